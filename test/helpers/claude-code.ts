import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { claudeCodeInstaller } from '../../sensors/claude-code/installer.ts';
import { AGENTS, agentBin, agentCache } from './agents.ts';
import { needs } from './external.ts';

// The real Claude Code CLI, offline: `claude -p` in a throwaway git project with an
// isolated HOME, against the scripted fake Anthropic API (test/fixtures/claude-code/
// fake-anthropic.mjs; its header documents the script format), with Vigil's hooks
// installed by `vigil install claude-code` into that HOME.

const ROOT = join(import.meta.dirname, '..', '..');
const FAKE = join(ROOT, 'test', 'fixtures', 'claude-code', 'fake-anthropic.mjs');
export const CC_VERSION = AGENTS.claudeCode.version;

export const needsClaudeCode = (suite: string): string | undefined =>
  needs({
    suite,
    what: `Claude Code ${CC_VERSION} in ${agentCache()}`,
    found: agentBin(AGENTS.claudeCode),
    hint: 'the e2e tier installs it on its first run: npx vitest run --project e2e',
  });

export interface ClaudeRun {
  exit: number | null;
  /** stream-json lines */
  stream: Record<string, any>[];
  result: Record<string, any> | undefined;
  sessionId: string | undefined;
  stderr: string;
  ms: number;
}

export interface ClaudeLab {
  dir: string;
  project: string;
  home: string;
  /** One line per model request the fake served (headers redacted, `tail` = what is new since the last answer). */
  requests(): Record<string, any>[];
  /** Every tool_result text the model was sent (newest request wins per tool_use_id). */
  toolResults(): { id: string; text: string; is_error: boolean }[];
  run(prompt: string, o?: { resume?: string; env?: Record<string, string>; timeoutMs?: number }): Promise<ClaudeRun>;
  /** The transcripts under HOME (main and subagents). */
  transcripts(): string[];
  stop(): Promise<void>;
}

async function waitFor(file: string, ms: number): Promise<string> {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (existsSync(file)) {
      const s = readFileSync(file, 'utf8').trim();
      if (s) return s;
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`${file} did not appear`);
}

/** A lab: the project, HOME with the hooks installed (unless `install: false`), the fake API running `script`. */
export async function claudeLab(o: {
  script: unknown;
  vigilUrl: string;
  install?: boolean;
  hookTimeoutMs?: number;
}): Promise<ClaudeLab> {
  const bin = agentBin(AGENTS.claudeCode);
  if (!bin) throw new Error('Claude Code is not installed');
  const dir = mkdtempSync(join(tmpdir(), 'vigil-cc-'));
  const project = join(dir, 'project');
  const home = join(dir, 'home');
  const logs = join(dir, 'logs');
  for (const d of [join(project, 'src'), home, logs, join(dir, 'tmp')]) mkdirSync(d, { recursive: true });
  writeFileSync(join(project, 'src', 'app.js'), 'export function add(a, b) {\n  return a - b;\n}\n');
  writeFileSync(join(project, 'src', 'util.js'), 'export const id = (x) => x;\n');
  writeFileSync(join(project, 'check.sh'), '#!/bin/sh\necho "FAIL: add(1, 2) should be 3" >&2\nexit 1\n');
  writeFileSync(join(project, 'ok.sh'), '#!/bin/sh\necho "all good"\n');
  const git = (...a: string[]) =>
    execFileSync('git', ['-C', project, '-c', 'user.name=t', '-c', 'user.email=t@example.invalid', ...a]);
  git('init', '-q');
  git('add', '-A');
  git('commit', '-qm', 'initial');
  if (o.install !== false) await claudeCodeInstaller.install({}, { env: { HOME: home }, home });

  const scriptFile = join(dir, 'script.json');
  writeFileSync(scriptFile, JSON.stringify(o.script));
  const portFile = join(dir, 'fake.port');
  const reqLog = join(logs, 'requests.jsonl');
  const fake: ChildProcess = spawn(
    process.execPath,
    [FAKE, '--script', scriptFile, '--port', '0', '--port-file', portFile, '--log', reqLog, '--log-bodies', '1'],
    { stdio: ['ignore', 'ignore', 'pipe'], detached: true },
  );
  let fakeErr = '';
  fake.stderr?.on('data', (c) => {
    fakeErr += c;
  });
  const port = await waitFor(portFile, 10_000);

  const requests = () =>
    existsSync(reqLog)
      ? readFileSync(reqLog, 'utf8')
          .split('\n')
          .filter(Boolean)
          .map((l) => JSON.parse(l))
      : [];

  return {
    dir,
    project,
    home,
    requests,
    toolResults() {
      const out = new Map<string, { id: string; text: string; is_error: boolean }>();
      for (const r of requests()) {
        for (const m of r.tail ?? []) {
          for (const c of Array.isArray(m.content) ? m.content : []) {
            if (c?.type !== 'tool_result') continue;
            const text = typeof c.content === 'string' ? c.content : JSON.stringify(c.content);
            out.set(c.tool_use_id, { id: c.tool_use_id, text, is_error: c.is_error === true });
          }
        }
      }
      return [...out.values()];
    },
    transcripts() {
      const base = join(home, '.claude', 'projects');
      const found: string[] = [];
      const walk = (d: string) => {
        if (!existsSync(d)) return;
        for (const e of readdirSync(d, { withFileTypes: true })) {
          const p = join(d, e.name);
          if (e.isDirectory()) walk(p);
          else if (e.name.endsWith('.jsonl')) found.push(p);
        }
      };
      walk(base);
      return found;
    },
    run(prompt, ro = {}) {
      const env: Record<string, string> = {
        PATH: process.env.PATH ?? '/usr/bin:/bin',
        HOME: home,
        TMPDIR: join(dir, 'tmp'),
        SHELL: '/bin/sh',
        TERM: 'dumb',
        LANG: 'C.UTF-8',
        XDG_CONFIG_HOME: join(dir, 'xdg', 'config'),
        XDG_CACHE_HOME: join(dir, 'xdg', 'cache'),
        XDG_DATA_HOME: join(dir, 'xdg', 'data'),
        XDG_STATE_HOME: join(dir, 'xdg', 'state'),
        ANTHROPIC_BASE_URL: `http://127.0.0.1:${port}`,
        ANTHROPIC_API_KEY: 'fake',
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
        DISABLE_AUTOUPDATER: '1',
        DISABLE_TELEMETRY: '1',
        DISABLE_ERROR_REPORTING: '1',
        VIGIL_URL: o.vigilUrl,
        VIGIL_HOOK_STATE_DIR: join(dir, 'hook-state'),
        ...(o.hookTimeoutMs ? { VIGIL_HOOK_TIMEOUT_MS: String(o.hookTimeoutMs) } : {}),
        // bypassPermissions refuses to run as root without it
        ...(process.getuid?.() === 0 ? { IS_SANDBOX: '1' } : {}),
        ...(ro.env ?? {}),
      };
      const args = [
        '-p',
        prompt,
        '--output-format',
        'stream-json',
        '--verbose',
        '--permission-mode',
        'bypassPermissions',
        ...(ro.resume ? ['--resume', ro.resume] : []),
      ];
      const t0 = Date.now();
      return new Promise((resolve) => {
        const p = spawn(bin, args, { cwd: project, env, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
        let out = '';
        let err = '';
        p.stdout.on('data', (c) => {
          out += c;
        });
        p.stderr.on('data', (c) => {
          err += c;
        });
        const timer = setTimeout(() => {
          try {
            process.kill(-(p.pid as number), 'SIGKILL');
          } catch {}
        }, ro.timeoutMs ?? 180_000);
        p.on('close', (code) => {
          clearTimeout(timer);
          const stream = out
            .split('\n')
            .filter((l) => l.startsWith('{'))
            .map((l) => JSON.parse(l));
          const result = stream.filter((l) => l.type === 'result').pop();
          const init = stream.find((l) => l.type === 'system' && l.subtype === 'init');
          resolve({
            exit: code,
            stream,
            result,
            sessionId: init?.session_id ?? result?.session_id,
            stderr: err,
            ms: Date.now() - t0,
          });
        });
      });
    },
    async stop() {
      try {
        process.kill(-(fake.pid as number), 'SIGTERM');
      } catch {}
      if (fakeErr) process.stderr.write(fakeErr.slice(-500));
    },
  };
}
