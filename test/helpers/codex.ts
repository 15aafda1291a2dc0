import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { codexInstaller } from '../../sensors/codex/installer.ts';
import { AGENTS, agentBin, agentCache } from './agents.ts';
import { needs } from './external.ts';

// The real Codex CLI, offline: `codex exec --json` in a throwaway git project with an
// isolated HOME and CODEX_HOME, whose only model provider is the scripted fake
// Responses API (test/fixtures/codex/fake-responses.mjs; its header documents the
// script format), with Vigil's hooks installed by `vigil install codex` (trusted in
// config.toml: no bypass flag). Outbound connections go to a closed local port.

const ROOT = join(import.meta.dirname, '..', '..');
const FAKE = join(ROOT, 'test', 'fixtures', 'codex', 'fake-responses.mjs');
export const CODEX_VERSION = AGENTS.codex.version;

export const needsCodex = (suite: string): string | undefined =>
  needs({
    suite,
    what: `Codex CLI ${CODEX_VERSION} in ${agentCache()}`,
    found: agentBin(AGENTS.codex),
    hint: 'the e2e tier installs it on its first run: npx vitest run --project e2e',
  });

export interface CodexRun {
  exit: number | null;
  /** --json lines */
  events: Record<string, any>[];
  threadId: string | undefined;
  stderr: string;
  ms: number;
}

export interface CodexLab {
  dir: string;
  project: string;
  home: string;
  codexHome: string;
  /** One line per model request the fake served (headers, `fresh` = the items Codex added since the last answer). */
  requests(): Record<string, any>[];
  /** Every tool output text the model was sent, by call id. */
  outputs(): { id: string; text: string }[];
  run(prompt: string, o?: { resume?: boolean; env?: Record<string, string>; timeoutMs?: number }): Promise<CodexRun>;
  /** The rollout files under CODEX_HOME/sessions. */
  rollouts(): string[];
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

export async function codexLab(o: {
  script: unknown;
  vigilUrl: string;
  install?: boolean;
  /** `fake-model`: no bundled metadata, so Codex offers spawn_agent (subagents) and no apply_patch. */
  model?: string;
  hookTimeoutMs?: number;
}): Promise<CodexLab> {
  const bin = agentBin(AGENTS.codex);
  if (!bin) throw new Error('Codex is not installed');
  const dir = mkdtempSync(join(tmpdir(), 'vigil-codex-'));
  const project = join(dir, 'project');
  const home = join(dir, 'home');
  const codexHome = join(home, '.codex');
  const logs = join(dir, 'logs');
  for (const d of [join(project, 'src'), codexHome, logs, join(dir, 'tmp')]) mkdirSync(d, { recursive: true });
  writeFileSync(join(project, 'src', 'app.js'), 'export function add(a, b) {\n  return a - b;\n}\n');
  writeFileSync(join(project, 'src', 'util.js'), 'export const id = (x) => x;\n');
  writeFileSync(join(project, 'check.sh'), '#!/bin/sh\necho "FAIL: add(1, 2) should be 3" >&2\nexit 1\n');
  writeFileSync(join(project, 'ok.sh'), '#!/bin/sh\necho "all good"\n');
  const git = (...a: string[]) =>
    execFileSync('git', ['-C', project, '-c', 'user.name=t', '-c', 'user.email=t@example.invalid', ...a]);
  git('init', '-q');
  git('add', '-A');
  git('commit', '-qm', 'initial');

  const scriptFile = join(dir, 'script.json');
  writeFileSync(scriptFile, JSON.stringify(o.script));
  const portFile = join(dir, 'fake.port');
  const reqLog = join(logs, 'requests.jsonl');
  const fake: ChildProcess = spawn(
    process.execPath,
    [FAKE, '--script', scriptFile, '--port', '0', '--port-file', portFile, '--log', reqLog],
    { stdio: ['ignore', 'ignore', 'pipe'], detached: true },
  );
  let fakeErr = '';
  fake.stderr?.on('data', (c) => {
    fakeErr += c;
  });
  const port = await waitFor(portFile, 10_000);
  writeFileSync(
    join(codexHome, 'config.toml'),
    [
      `model = "${o.model ?? 'gpt-5.5'}"`,
      'model_provider = "fake"',
      'approval_policy = "never"',
      'sandbox_mode = "danger-full-access"',
      'check_for_update_on_startup = false',
      '',
      '[analytics]',
      'enabled = false',
      '',
      '[model_providers.fake]',
      'name = "Fake Responses API"',
      `base_url = "http://127.0.0.1:${port}/v1"`,
      'env_key = "FAKE_API_KEY"',
      'wire_api = "responses"',
      'request_max_retries = 0',
      'stream_max_retries = 0',
      '',
      `[projects.${JSON.stringify(project)}]`,
      'trust_level = "trusted"',
      '',
    ].join('\n'),
  );
  if (o.install !== false) await codexInstaller.install({}, { env: { HOME: home, CODEX_HOME: codexHome }, home });

  const requests = () =>
    existsSync(reqLog)
      ? readFileSync(reqLog, 'utf8')
          .split('\n')
          .filter(Boolean)
          .map((l) => JSON.parse(l))
      : [];
  const rollouts = () => {
    const found: string[] = [];
    const walk = (d: string) => {
      if (!existsSync(d)) return;
      for (const e of readdirSync(d, { withFileTypes: true })) {
        const p = join(d, e.name);
        if (e.isDirectory()) walk(p);
        else if (/^rollout-.*\.jsonl$/.test(e.name)) found.push(p);
      }
    };
    walk(join(codexHome, 'sessions'));
    return found.sort();
  };

  return {
    dir,
    project,
    home,
    codexHome,
    requests,
    rollouts,
    outputs() {
      const out = new Map<string, { id: string; text: string }>();
      for (const f of rollouts()) {
        for (const l of readFileSync(f, 'utf8').split('\n')) {
          if (!l.includes('_output"')) continue;
          const j = JSON.parse(l);
          const p = j.payload;
          if (j.type === 'response_item' && /function_call_output|custom_tool_call_output/.test(p?.type))
            out.set(p.call_id, { id: p.call_id, text: String(p.output) });
        }
      }
      return [...out.values()];
    },
    run(prompt, ro = {}) {
      const env: Record<string, string> = {
        PATH: process.env.PATH ?? '/usr/bin:/bin',
        HOME: home,
        CODEX_HOME: codexHome,
        TMPDIR: join(dir, 'tmp'),
        SHELL: '/bin/bash',
        TERM: 'dumb',
        LANG: 'C.UTF-8',
        FAKE_API_KEY: 'sk-fake',
        // nothing leaves the machine: a closed local port as the proxy
        HTTPS_PROXY: 'http://127.0.0.1:9',
        HTTP_PROXY: 'http://127.0.0.1:9',
        ALL_PROXY: 'http://127.0.0.1:9',
        NO_PROXY: '127.0.0.1,localhost',
        VIGIL_URL: o.vigilUrl,
        VIGIL_HOOK_STATE_DIR: join(dir, 'hook-state'),
        ...(o.hookTimeoutMs ? { VIGIL_HOOK_TIMEOUT_MS: String(o.hookTimeoutMs) } : {}),
        ...(ro.env ?? {}),
      };
      const args = [
        'exec',
        ...(ro.resume ? ['resume', '--last'] : []),
        '--json',
        '--dangerously-bypass-approvals-and-sandbox',
        ...['plugins', 'remote_plugin', 'apps', 'skill_mcp_dependency_install', 'tool_suggest'].flatMap((f) => [
          '--disable',
          f,
        ]),
        ...(ro.resume ? [] : ['-C', project]),
        prompt,
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
          const events = out
            .split('\n')
            .filter((l) => l.startsWith('{'))
            .map((l) => JSON.parse(l));
          resolve({
            exit: code,
            events,
            threadId: events.find((e) => e.type === 'thread.started')?.thread_id,
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
      if (!process.env.VIGIL_KEEP_LAB) rmSync(dir, { recursive: true, force: true });
    },
  };
}
