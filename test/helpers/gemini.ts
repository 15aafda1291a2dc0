import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { geminiInstaller } from '../../sensors/gemini/installer.ts';
import { AGENTS, agentBin, agentCache } from './agents.ts';
import { needs } from './external.ts';

// The real Gemini CLI, offline: `gemini -p --output-format stream-json --approval-mode
// yolo` in a throwaway git project with an isolated HOME, against the scripted fake
// Gemini API (test/fixtures/gemini/fake-gemini.mjs; its header documents the script
// format), with Vigil's hooks installed by `vigil install gemini` into that HOME. The
// CLI's own loop detection is off unless asked for, so the runs test Vigil's judge.

const ROOT = join(import.meta.dirname, '..', '..');
const FAKE = join(ROOT, 'test', 'fixtures', 'gemini', 'fake-gemini.mjs');
export const GEMINI_VERSION = AGENTS.gemini.version;

export const needsGemini = (suite: string): string | undefined =>
  needs({
    suite,
    what: `Gemini CLI ${GEMINI_VERSION} in ${agentCache()}`,
    found: agentBin(AGENTS.gemini),
    hint: 'the e2e tier installs it on its first run: npx vitest run --project e2e',
  });

export interface GeminiRun {
  exit: number | null;
  stream: Record<string, any>[];
  sessionId: string | undefined;
  stderr: string;
  ms: number;
}

export interface GeminiLab {
  dir: string;
  project: string;
  home: string;
  requests(): Record<string, any>[];
  /** stream-json tool_result lines of every run so far. */
  results(): Record<string, any>[];
  run(prompt: string, o?: { env?: Record<string, string>; timeoutMs?: number }): Promise<GeminiRun>;
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

export async function geminiLab(o: {
  script: unknown;
  vigilUrl: string;
  install?: boolean;
  loopDetection?: boolean;
}): Promise<GeminiLab> {
  const bin = agentBin(AGENTS.gemini);
  if (!bin) throw new Error('Gemini CLI is not installed');
  const dir = mkdtempSync(join(tmpdir(), 'vigil-gemini-'));
  const project = join(dir, 'project');
  const home = join(dir, 'home');
  const logs = join(dir, 'logs');
  for (const d of [join(project, 'src'), join(home, '.gemini'), logs, join(dir, 'tmp')])
    mkdirSync(d, { recursive: true });
  writeFileSync(join(project, 'src', 'app.js'), 'export function add(a, b) {\n  return a - b;\n}\n');
  writeFileSync(join(project, 'src', 'util.js'), 'export const id = (x) => x;\n');
  writeFileSync(join(project, 'check.sh'), '#!/bin/sh\necho "FAIL: add(1, 2) should be 3" >&2\nexit 1\n');
  writeFileSync(join(project, 'ok.sh'), '#!/bin/sh\necho "all good"\n');
  const git = (...a: string[]) =>
    execFileSync('git', ['-C', project, '-c', 'user.name=t', '-c', 'user.email=t@example.invalid', ...a]);
  git('init', '-q');
  git('add', '-A');
  git('commit', '-qm', 'initial');
  writeFileSync(
    join(home, '.gemini', 'settings.json'),
    `${JSON.stringify(
      {
        security: { auth: { selectedType: 'gemini-api-key' } },
        privacy: { usageStatisticsEnabled: false },
        general: { enableAutoUpdate: false, enableAutoUpdateNotification: false },
        ...(o.loopDetection ? {} : { model: { disableLoopDetection: true } }),
      },
      null,
      2,
    )}\n`,
  );
  if (o.install !== false) await geminiInstaller.install({}, { env: { HOME: home }, home });

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
  const results: Record<string, any>[] = [];

  return {
    dir,
    project,
    home,
    requests: () =>
      existsSync(reqLog)
        ? readFileSync(reqLog, 'utf8')
            .split('\n')
            .filter(Boolean)
            .map((l) => JSON.parse(l))
        : [],
    results: () => results,
    run(prompt, ro = {}) {
      const env: Record<string, string> = {
        PATH: process.env.PATH ?? '/usr/bin:/bin',
        HOME: home,
        TMPDIR: join(dir, 'tmp'),
        TERM: 'dumb',
        NO_COLOR: '1',
        LANG: 'C.UTF-8',
        GEMINI_API_KEY: 'fake',
        GOOGLE_GEMINI_BASE_URL: `http://127.0.0.1:${port}`,
        GEMINI_CLI_TRUST_WORKSPACE: 'true',
        HTTPS_PROXY: 'http://127.0.0.1:9',
        HTTP_PROXY: 'http://127.0.0.1:9',
        NO_PROXY: '127.0.0.1,localhost',
        VIGIL_URL: o.vigilUrl,
        VIGIL_HOOK_STATE_DIR: join(dir, 'hook-state'),
        ...(ro.env ?? {}),
      };
      const args = ['-p', prompt, '--approval-mode', 'yolo', '--output-format', 'stream-json'];
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
        }, ro.timeoutMs ?? 240_000);
        p.on('close', (code) => {
          clearTimeout(timer);
          const stream = out
            .split('\n')
            .filter((l) => l.startsWith('{'))
            .map((l) => JSON.parse(l));
          results.push(...stream.filter((l) => l.type === 'tool_result'));
          resolve({
            exit: code,
            stream,
            sessionId: stream.find((l) => l.type === 'init')?.session_id,
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
