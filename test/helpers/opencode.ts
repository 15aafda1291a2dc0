import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, http, type Proc, startProc, stopProc, until } from '../fixtures/opencode-e2e/procs.ts';
import { AGENTS, agentBin, agentCache } from './agents.ts';
import { needs } from './external.ts';

// Test harnesses for the watchdog and other end-to-end suites:
// - startOpencode: a REAL `opencode serve` (opencode-ai 1.18.33 from the agent cache,
//   installed by the e2e tier's global setup: test/helpers/agents.ts) with
//   the scripted fake model of test/fixtures/opencode-e2e/, offline, isolated XDG and
//   TMPDIR dirs, seeded plugin-dependency stubs (no npm at start) and no plugin;
// - fakeOpencode: a small HTTP server answering the routes the watchdog reads, with
//   whatever shapes a test wants (blind detection, gating a tick);
// - fakeOllama: the /api/chat wire format the `ollama` client speaks, counting calls.
// Every process runs in its own process group and is stopped by stop(); temp dirs go too.

const ROOT = join(import.meta.dirname, '..', '..');
const FAKE_MODEL = join(ROOT, 'test', 'fixtures', 'opencode-e2e', 'fake-model.mjs');
export const OC_VERSION = AGENTS.opencode.version;

/**
 * The opencode binary for a suite that starts it, or undefined (the suite skips, with
 * one line; CI fails): `describe.runIf(needsOpencode(import.meta.filename))`.
 */
export const needsOpencode = (suite: string): string | undefined =>
  needs({
    suite,
    what: `opencode ${OC_VERSION} in ${agentCache()}`,
    found: agentBin(AGENTS.opencode),
    hint: 'the e2e tier installs it on its first run: npx vitest run --project e2e',
  });

export interface OpencodeLab {
  url: string;
  tmp: string;
  project: string;
  /** Process logs; with `fakeModelLog`, `fake-model.jsonl` holds one line per model request. */
  logs: string;
  fakeLog: string;
  /** $XDG_DATA_HOME/opencode/opencode.db of this server */
  db: string;
  /** Runs one session to idle (the sync route answers when the agent loop ends); returns its id. */
  runSession(title: string, prompt: string): Promise<string>;
  /** Tail of both processes' output, for failure messages. */
  detail(): string;
  stop(): Promise<void>;
}

function seedPluginDeps(dir: string): void {
  // opencode npm-installs @opencode-ai/plugin into each config dir at start unless
  // node_modules/ and a lock file listing it exist (reference pitfall 2)
  mkdirSync(join(dir, 'node_modules'), { recursive: true });
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ dependencies: { '@opencode-ai/plugin': OC_VERSION } }));
  writeFileSync(
    join(dir, 'package-lock.json'),
    JSON.stringify({
      lockfileVersion: 3,
      requires: true,
      packages: { '': { dependencies: { '@opencode-ai/plugin': OC_VERSION } } },
    }),
  );
}

export interface LabDirs {
  tmp: string;
  project: string;
  logs: string;
  /** The isolated XDG base: config/opencode/plugin/ is where a global plugin goes. */
  xdg: string;
}

/** The caller's environment without settings that would leak into the isolated servers. */
export const cleanEnv = (): NodeJS.ProcessEnv =>
  Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^(OPENCODE_|VIGIL_|REDIS_URL$|XDG_)/.test(k)));

export async function startOpencode(o: {
  script: unknown;
  files?: Record<string, string>;
  /** Where opencode sends model requests, given the fake model's URL (e.g. a router in front of it). */
  modelUrl?: (fakeModelUrl: string) => string | Promise<string>;
  /** Log every model request (headers, and bodies) to `fakeLog`. */
  fakeModelLog?: boolean;
  /** Runs after the project is set up, before opencode starts (install a plugin, start a service). */
  beforeStart?: (dirs: LabDirs) => void | Promise<void>;
  /** Extra environment for opencode (its plugins read it). */
  env?: (dirs: LabDirs) => NodeJS.ProcessEnv;
}): Promise<OpencodeLab> {
  const tmp = mkdtempSync(join(tmpdir(), 'vigil-wd-oc-'));
  const project = join(tmp, 'project');
  const logs = join(tmp, 'logs');
  const xdg = join(tmp, 'xdg');
  for (const d of ['data', 'config/opencode', 'cache', 'state']) mkdirSync(join(xdg, d), { recursive: true });
  mkdirSync(join(tmp, 'tmp'), { recursive: true });
  mkdirSync(project, { recursive: true });
  for (const [rel, text] of Object.entries(o.files ?? {})) {
    mkdirSync(join(project, rel, '..'), { recursive: true });
    writeFileSync(join(project, rel), text);
  }
  const git = (...a: string[]) => execFileSync('git', a, { cwd: project, stdio: 'ignore' });
  git('init', '-q');
  git('add', '-A');
  git('-c', 'user.name=wd', '-c', 'user.email=wd@example.invalid', 'commit', '-qm', 'initial', '--allow-empty');
  seedPluginDeps(join(xdg, 'config', 'opencode'));
  seedPluginDeps(join(project, '.opencode'));

  const fakeLog = join(logs, 'fake-model.jsonl');
  const dirs: LabDirs = { tmp, project, logs, xdg };
  const procs: Proc[] = [];
  const stop = async () => {
    for (const p of procs.reverse()) await stopProc(p);
    if (!process.env.VIGIL_E2E_KEEP) rmSync(tmp, { recursive: true, force: true });
  };
  try {
    writeFileSync(join(tmp, 'script.json'), JSON.stringify(o.script));
    const portFile = join(tmp, 'fake.port');
    const fake = startProc(
      'fake-model',
      process.execPath,
      [
        FAKE_MODEL,
        ...['--script', join(tmp, 'script.json'), '--port', '0', '--port-file', portFile],
        ...(o.fakeModelLog ? ['--log', fakeLog, '--log-bodies', '1'] : []),
      ],
      { cwd: tmp, env: cleanEnv(), logDir: logs },
    );
    procs.push(fake);
    const fakePort = await until(
      'the fake model port',
      () => existsSync(portFile) && readFileSync(portFile, 'utf8').trim(),
      {
        timeoutMs: 30_000,
      },
    );
    const fakeUrl = `http://127.0.0.1:${fakePort}`;
    const baseURL = o.modelUrl ? await o.modelUrl(fakeUrl) : fakeUrl;
    writeFileSync(
      join(project, 'opencode.json'),
      JSON.stringify({
        model: 'fake/loop-model',
        small_model: 'fake/loop-model',
        enabled_providers: ['fake'],
        autoupdate: false,
        share: 'disabled',
        provider: {
          fake: {
            npm: '@ai-sdk/openai-compatible',
            name: 'Fake scripted model',
            options: { baseURL: `${baseURL}/v1`, apiKey: 'fake-key' },
            models: { 'loop-model': { name: 'Loop model', tool_call: true, limit: { context: 200000, output: 8000 } } },
          },
        },
      }),
    );
    await o.beforeStart?.(dirs);
    const port = await freePort(); // explicit: --port 0 means 4096 when free
    const url = `http://127.0.0.1:${port}`;
    const bin = agentBin(AGENTS.opencode);
    if (!bin) throw new Error(`no opencode ${OC_VERSION} in ${agentCache()} (the e2e tier's global setup installs it)`);
    const oc = startProc('opencode', bin, ['serve', '--hostname', '127.0.0.1', '--port', String(port)], {
      cwd: project,
      env: {
        ...cleanEnv(),
        ...o.env?.(dirs),
        XDG_DATA_HOME: join(xdg, 'data'),
        XDG_CONFIG_HOME: join(xdg, 'config'),
        XDG_CACHE_HOME: join(xdg, 'cache'),
        XDG_STATE_HOME: join(xdg, 'state'),
        TMPDIR: join(tmp, 'tmp'),
        OPENCODE_DISABLE_MODELS_FETCH: '1',
        OPENCODE_DISABLE_AUTOUPDATE: '1',
        OPENCODE_DISABLE_SHARE: '1',
        OPENCODE_DISABLE_LSP_DOWNLOAD: '1',
      },
      logDir: logs,
    });
    procs.push(oc);
    const detail = () => procs.map((p) => `--- ${p.name} ---\n${p.output().slice(-2000)}`).join('\n');
    // a request sent before the "listening" line may never be answered (pitfall 1)
    await until('opencode "listening" line', () => /listening on http/.test(oc.output()), {
      timeoutMs: 120_000,
      detail,
    });
    await until(
      'opencode /global/health',
      async () => (await http('GET', `${url}/global/health`, undefined, 3_000)).status === 200,
      { timeoutMs: 60_000, detail },
    );
    return {
      url,
      tmp,
      project,
      logs,
      fakeLog,
      db: join(xdg, 'data', 'opencode', 'opencode.db'),
      detail,
      stop,
      async runSession(title, prompt) {
        const s = await http<{ id: string }>('POST', `${url}/session`, { title });
        if (s.status !== 200) throw new Error(`POST /session answered ${s.status}`);
        const r = await http(
          'POST',
          `${url}/session/${s.data.id}/message`,
          { parts: [{ type: 'text', text: prompt }] },
          240_000,
        );
        if (r.status !== 200) throw new Error(`POST /session/{id}/message answered ${r.status}\n${detail()}`);
        return s.data.id;
      },
    };
  } catch (e) {
    await stop();
    throw e;
  }
}

// ---------------------------------------------------------------------------
// small fake servers

export interface FakeServer {
  url: string;
  /** Requests seen: method, path (with query) and the parsed JSON body. */
  requests: { method: string; path: string; body: unknown }[];
  close(): Promise<void>;
}

type Handler = (req: IncomingMessage, body: unknown, res: ServerResponse) => void | Promise<void>;

export async function fakeServer(handler: Handler): Promise<FakeServer> {
  const requests: FakeServer['requests'] = [];
  const server: Server = createServer((req, res) => {
    let raw = '';
    req.on('data', (c) => {
      raw += c;
    });
    req.on('end', async () => {
      let body: unknown = raw;
      try {
        body = raw ? JSON.parse(raw) : undefined;
      } catch {
        // keep the text
      }
      requests.push({ method: req.method ?? '?', path: req.url ?? '/', body });
      try {
        await handler(req, body, res);
      } catch (e) {
        if (!res.headersSent) res.writeHead(500);
        res.end(String(e));
      }
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

export function json(res: ServerResponse, status: number, data: unknown): void {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(data));
}

/**
 * A fake opencode: GET /global/health, the session lists, children and messages from
 * `data` (mutable, so a test can change a shape between ticks). `gate`, when set, holds
 * /global/health until it resolves.
 */
export interface FakeOpencodeData {
  health: unknown;
  sessions: unknown;
  messages: Record<string, unknown>;
  children?: Record<string, unknown>;
  gate?: Promise<void>;
}

export async function fakeOpencode(data: FakeOpencodeData): Promise<FakeServer> {
  return fakeServer(async (req, _body, res) => {
    const u = new URL(req.url ?? '/', 'http://x');
    if (u.pathname === '/global/health') {
      if (data.gate) await data.gate;
      return json(res, 200, data.health);
    }
    if (u.pathname === '/experimental/session' || u.pathname === '/session') return json(res, 200, data.sessions);
    const m = /^\/session\/([^/]+)\/(message|children)$/.exec(u.pathname);
    if (m && m[2] === 'message') {
      const msgs = data.messages[m[1]];
      return msgs === undefined ? json(res, 404, { name: 'NotFound' }) : json(res, 200, msgs);
    }
    if (m && m[2] === 'children') return json(res, 200, data.children?.[m[1]] ?? []);
    json(res, 404, { name: 'NotFound' });
  });
}

/** The ollama /api/chat (and /api/generate) wire format, non-streaming; `answer` is the reply text. */
export async function fakeOllama(o: { answer: string; status?: number; hangMs?: number }): Promise<FakeServer> {
  return fakeServer(async (req, body, res) => {
    const u = new URL(req.url ?? '/', 'http://x');
    if (o.hangMs) await new Promise((r) => setTimeout(r, o.hangMs));
    if (res.destroyed) return;
    if (o.status && o.status !== 200) return json(res, o.status, { error: 'model exploded' });
    const model = (body as { model?: string })?.model ?? 'x';
    const base = { model, created_at: new Date().toISOString(), done: true, done_reason: 'stop', total_duration: 1 };
    if (u.pathname === '/api/chat')
      return json(res, 200, { ...base, message: { role: 'assistant', content: o.answer } });
    if (u.pathname === '/api/generate') return json(res, 200, { ...base, response: o.answer });
    json(res, 404, { error: 'not found' });
  });
}

// ---------------------------------------------------------------------------
// opencode-shaped sessions and messages for the fake server

let seq = 0;
const id = (p: string) => `${p}_${(++seq).toString(36).padStart(6, '0')}test`;

export function ocSession(sid: string, updated: number, extra: Record<string, unknown> = {}) {
  return {
    id: sid,
    slug: 'test-session',
    projectID: 'p1',
    directory: '/work/project',
    title: 'test',
    version: OC_VERSION,
    time: { created: updated - 60_000, updated },
    ...extra,
  };
}

/** One user prompt and one assistant step per call: `calls` are [tool, input, status, metadata]. */
export function ocMessages(
  sid: string,
  t0: number,
  calls: { tool: string; input: Record<string, unknown>; status?: string; metadata?: Record<string, unknown> }[],
  prompt = 'SECRET-PROMPT: fix the bug',
) {
  const user = {
    info: { id: id('msg'), sessionID: sid, role: 'user', time: { created: t0 }, agent: 'build' },
    parts: [{ id: id('prt'), sessionID: sid, type: 'text', text: prompt }],
  };
  const steps = calls.map((c, i) => {
    const mid = id('msg');
    const at = t0 + 1000 * (i + 1);
    return {
      info: {
        id: mid,
        sessionID: sid,
        role: 'assistant',
        parentID: user.info.id,
        agent: 'build',
        mode: 'build',
        modelID: 'loop-model',
        providerID: 'fake',
        path: { cwd: '/work/project', root: '/work/project' },
        cost: 0.001,
        tokens: { total: 1010, input: 1000, output: 10, reasoning: 0, cache: { read: 0, write: 0 } },
        time: { created: at, completed: at + 500 },
        finish: 'tool-calls',
      },
      parts: [
        { id: id('prt'), sessionID: sid, messageID: mid, type: 'step-start' },
        {
          id: id('prt'),
          sessionID: sid,
          messageID: mid,
          type: 'tool',
          callID: `call_${i}`,
          tool: c.tool,
          state: {
            status: c.status ?? 'completed',
            input: c.input,
            output: 'SECRET-OUTPUT: file content here',
            title: 'x',
            metadata: c.metadata ?? {},
            time: { start: at + 100, end: at + 200 },
          },
        },
        { id: id('prt'), sessionID: sid, messageID: mid, type: 'step-finish', reason: 'tool-calls' },
      ],
    };
  });
  return [user, ...steps];
}
