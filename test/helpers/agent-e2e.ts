import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, beforeAll } from 'vitest';
import type { SessionRow } from '../../core/engine.ts';
import type { Vigil } from '../../core/vigil.ts';
import { type App, buildServer } from '../../service/server.ts';
import { type AgentCli, agentBin, agentCache } from './agents.ts';
import { needs } from './external.ts';
import { testVigil } from './index.ts';

// What the end-to-end suites of the hook agents (Claude Code, Codex CLI, Gemini CLI)
// share: the in-process Vigil they report to, the throwaway project each lab runs in
// (src/app.js with a bug, check.sh that always fails, ok.sh that passes, a git repo),
// the scripted fake model API beside it (test/fixtures/<agent>/; each header documents
// its script format), and running the real CLI with its JSON lines collected. Nothing
// leaves the machine: the proxies are a closed local port.

const ROOT = join(import.meta.dirname, '..', '..');
/** The admin token of the suites' Vigil: Resume goes through the admin route with it. */
export const ADMIN_TOKEN = 'agent-e2e-admin-token';
/**
 * The sensor secret of these suites, in a folder of their own: the service that hosts
 * the hook endpoint and `vigil install` (the hook key it writes) read the same file.
 */
export const SECRET_FILE = join(mkdtempSync(join(tmpdir(), 'vigil-e2e-secret-')), 'sensor-secret');
/** Where the suites' service keeps its hook bridges' per-session state (<dir>/<sensor>/<session>.json). */
export const HOOK_STATE_DIR = join(dirname(SECRET_FILE), 'hook-state');
/** What `vigil install <agent>` is given in a lab: its HOME, the suites' secret, the endpoint. */
export const installCtx = (home: string, extra: Record<string, string> = {}) => ({
  env: { HOME: home, VIGIL_SENSOR_SECRET_FILE: SECRET_FILE, ...extra },
  home,
});

/** The skip line of a suite whose agent CLI is not in the cache. */
export const needsAgent = (suite: string, a: AgentCli, title: string): string | undefined =>
  needs({
    suite,
    what: `${title} ${a.version} in ${agentCache()}`,
    found: agentBin(a),
    hint: 'the e2e tier installs it on its first run: npx vitest run --project e2e',
  });

export interface AgentService {
  vigil: Vigil;
  app: App;
  url: string;
  close(): Promise<void>;
}

/** A Vigil service on a free local port, in `mode`, with the admin token set. */
export async function agentService(mode: string): Promise<AgentService> {
  const vigil = await testVigil({
    backend: 'memory',
    overlay: { modes: { mode } },
    env: {
      VIGIL_ADMIN_TOKEN: ADMIN_TOKEN,
      VIGIL_SENSOR_SECRET_FILE: SECRET_FILE,
      VIGIL_HOOK_STATE_DIR: HOOK_STATE_DIR,
    },
  });
  const app = await buildServer(vigil);
  await app.listen({ port: 0, host: '127.0.0.1' });
  return {
    vigil,
    app,
    url: `http://127.0.0.1:${(app.server.address() as { port: number }).port}`,
    async close() {
      await app.close();
      await vigil.close();
    },
  };
}

/** The service of the enclosing describe: started before its tests, closed after (its fields read once it runs). */
export function serviceFor(mode: string): AgentService {
  let s: AgentService | undefined;
  beforeAll(async () => {
    s = await agentService(mode);
  });
  afterAll(async () => {
    await s?.close();
  });
  const live = () => {
    if (!s) throw new Error('the service did not start');
    return s;
  };
  return {
    get vigil() {
      return live().vigil;
    },
    get app() {
      return live().app;
    },
    get url() {
      return live().url;
    },
    close: async () => {
      await s?.close();
    },
  };
}

/** The Sessions readout row of `id`. */
export const rowOf = async (v: Vigil, id: string): Promise<SessionRow> => (await v.engine.sessionRow(id)) as SessionRow;

/** Whether an incident is open whose key names `id`. */
export const alerted = async (v: Vigil, id: string): Promise<boolean> =>
  (await v.notifier.openAlerts()).some((a) => a.dedup_key.includes(id));

/** An admin Resume of the tree `root` over HTTP, as an operator does it: the route's status. */
export async function resumeTree(s: AgentService, root: string): Promise<number> {
  const r = await fetch(`${s.url}/trees/${encodeURIComponent(root)}/resume`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${ADMIN_TOKEN}` },
    body: JSON.stringify({ by: 'e2e' }),
  });
  await r.body?.cancel();
  return r.status;
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

const jsonLines = (text: string): Record<string, any>[] =>
  text
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l));

/** The files below `dir` whose name matches `re`, sorted. */
export function filesUnder(dir: string, re: RegExp): string[] {
  const found: string[] = [];
  const walk = (d: string) => {
    if (!existsSync(d)) return;
    for (const e of readdirSync(d, { withFileTypes: true })) {
      const p = join(d, e.name);
      if (e.isDirectory()) walk(p);
      else if (re.test(e.name)) found.push(p);
    }
  };
  walk(dir);
  return found.sort();
}

export interface LabBase {
  dir: string;
  project: string;
  home: string;
  /** The fake API's port. */
  port: string;
  /** One line per model request the fake served. */
  requests(): Record<string, any>[];
  /** The environment every agent run gets (an isolated HOME, Vigil's URL, no way out). */
  env(vigilUrl: string): Record<string, string>;
  stop(): Promise<void>;
}

/** The project (a git repo), an empty HOME with `homeDirs` in it, and the fake model API (`test/fixtures/<fixture>`) running `script`. */
export async function labBase(o: {
  prefix: string;
  fixture: string;
  script: unknown;
  homeDirs?: string[];
  fakeArgs?: string[];
}): Promise<LabBase> {
  const dir = mkdtempSync(join(tmpdir(), o.prefix));
  const project = join(dir, 'project');
  const home = join(dir, 'home');
  const logs = join(dir, 'logs');
  for (const d of [join(project, 'src'), home, logs, join(dir, 'tmp'), ...(o.homeDirs ?? []).map((h) => join(home, h))])
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

  const scriptFile = join(dir, 'script.json');
  writeFileSync(scriptFile, JSON.stringify(o.script));
  const portFile = join(dir, 'fake.port');
  const reqLog = join(logs, 'requests.jsonl');
  const fake: ChildProcess = spawn(
    process.execPath,
    [
      join(ROOT, 'test', 'fixtures', o.fixture),
      ...['--script', scriptFile, '--port', '0', '--port-file', portFile, '--log', reqLog],
      ...(o.fakeArgs ?? []),
    ],
    { stdio: ['ignore', 'ignore', 'pipe'], detached: true },
  );
  let fakeErr = '';
  fake.stderr?.on('data', (c) => {
    fakeErr += c;
  });
  const port = await waitFor(portFile, 10_000);

  return {
    dir,
    project,
    home,
    port,
    requests: () =>
      existsSync(reqLog)
        ? readFileSync(reqLog, 'utf8')
            .split('\n')
            .filter(Boolean)
            .map((l) => JSON.parse(l))
        : [],
    env: (vigilUrl) => ({
      PATH: process.env.PATH ?? '/usr/bin:/bin',
      HOME: home,
      TMPDIR: join(dir, 'tmp'),
      TERM: 'dumb',
      LANG: 'C.UTF-8',
      HTTPS_PROXY: 'http://127.0.0.1:9',
      HTTP_PROXY: 'http://127.0.0.1:9',
      ALL_PROXY: 'http://127.0.0.1:9',
      NO_PROXY: '127.0.0.1,localhost',
      VIGIL_URL: vigilUrl,
      VIGIL_SENSOR_SECRET_FILE: SECRET_FILE,
    }),
    async stop() {
      try {
        process.kill(-(fake.pid as number), 'SIGTERM');
      } catch {}
      if (fakeErr) process.stderr.write(fakeErr.slice(-500));
      if (!process.env.VIGIL_KEEP_LAB) rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** How long after an agent exits its last events have reached Vigil (the hook host's flush delay, and a margin). */
export const SETTLE_MS = 400;

export interface CliRun {
  exit: number | null;
  /** Its stdout's JSON lines. */
  lines: Record<string, any>[];
  stderr: string;
  ms: number;
}

/** Runs the agent CLI in its own process group, killed after `timeoutMs`. */
export function runCli(
  bin: string,
  args: readonly string[],
  o: { cwd: string; env: Record<string, string>; timeoutMs: number },
): Promise<CliRun> {
  const t0 = Date.now();
  return new Promise((resolve) => {
    const p = spawn(bin, args, { cwd: o.cwd, env: o.env, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
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
    }, o.timeoutMs);
    p.on('close', (code) => {
      clearTimeout(timer);
      const ms = Date.now() - t0;
      // The hook endpoint sends an observe-only call's events (a tool's result, a session's
      // end) with the session's next answered call, or 250 ms after it: once the agent has
      // exited, its last ones are in by then.
      setTimeout(() => resolve({ exit: code, lines: jsonLines(out), stderr: err, ms }), SETTLE_MS);
    });
  });
}
