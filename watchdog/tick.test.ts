import { copyFileSync, existsSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createRegistry } from '../builtins.ts';
import { loadConfig } from '../core/config.ts';
import { createLogger } from '../core/logger.ts';
import { loadSensorSecret, sessionKey } from '../core/session-key.ts';
import type { Vigil } from '../core/vigil.ts';
import type { NoProgressDetector } from '../detectors/no-progress/no-progress.detector.ts';
import type { SessionHygieneDetector } from '../detectors/session-hygiene/hygiene.detector.ts';
import { buildServer } from '../service/server.ts';
import { needsSqlite3 } from '../test/helpers/external.ts';
import {
  type Behaviour,
  behaviour,
  eventually,
  fakeNotifySend,
  recordingPlugin,
  tempDir,
  testVigil,
} from '../test/helpers/index.ts';
import {
  type FakeOpencodeData,
  type FakeServer,
  fakeOllama,
  fakeOpencode,
  fakeServer,
  json,
  ocMessages,
  ocSession,
} from '../test/helpers/opencode.ts';
import { OcDb } from '../test/helpers/opencode-db.ts';
import { collectFromServer } from './collect.ts';
import { collectFromDb } from './dbread.ts';
import { issueText } from './discover.ts';
import { readState } from './state.ts';
import { runTick } from './tick.ts';

const SQLITE3 = needsSqlite3(import.meta.filename);

// The tick end to end in-process: a fake opencode (shapes under the test's control), a
// real Vigil service on 127.0.0.1:0, a fake ollama. The real-opencode run is
// test/watchdog.e2e.test.ts.

const THRESHOLDS = {
  window: 30,
  dup_min_events: 10,
  stall_turns: 10,
  loop_turns: 20,
  top_warn: 8,
  top_loop: 16,
  session_repeat_warn: 10,
  session_repeat_loop: 20,
};

const LOOP = 'ses_loop00000000000000000001';
const HEALTHY = 'ses_good00000000000000000001';

const loopCalls = (n = 30) =>
  Array.from({ length: n }, () => ({ tool: 'read', input: { filePath: '/work/project/docs/spec.md' } }));
const healthyCalls = [
  { tool: 'read', input: { filePath: '/work/project/src/app.js' } },
  { tool: 'bash', input: { command: 'sh test.sh' }, metadata: { exit: 1 } },
  {
    tool: 'edit',
    input: { filePath: '/work/project/src/app.js', oldString: 'a - b', newString: 'a + b' },
    metadata: { diff: '--- a\n+++ b\n-a - b\n+a + b\n' },
  },
  { tool: 'bash', input: { command: 'sh test.sh' }, metadata: { exit: 0 } },
];

let dir = '';
let vigil: Vigil;
let serviceUrl = '';
let closeService: () => Promise<void>;
let rec: Behaviour;
const servers: FakeServer[] = [];

beforeEach(async () => {
  dir = tempDir('vigil-wd-tick');
  rec = behaviour();
  vigil = await testVigil({
    backend: 'memory',
    registry: createRegistry().register(recordingPlugin(rec)),
    channels: [{ name: 'rec', type: 'recording', min_severity: 'info' }],
    overlay: { progress: THRESHOLDS },
  });
  const app = await buildServer(vigil);
  serviceUrl = await app.listen({ host: '127.0.0.1', port: 0 });
  closeService = async () => {
    await app.close();
    await vigil.close();
  };
});

afterEach(async () => {
  for (const s of servers.splice(0)) await s.close();
  await closeService();
  rmSync(dir, { recursive: true, force: true });
});

function config(watchdog: Record<string, unknown>, extra: Record<string, unknown> = {}) {
  return loadConfig({
    registry: createRegistry(),
    env: {},
    overlay: {
      progress: THRESHOLDS,
      local_compute: { enabled: true },
      notifications: { channels: [{ name: 'desktop', type: 'desktop' }] },
      watchdog: {
        servers: [],
        service_url: serviceUrl,
        state_file: join(dir, 'state.json'),
        lock_file: join(dir, 'watchdog.lock'),
        opencode_db: join(dir, 'no-opencode.db'),
        rc_servers_file: join(dir, 'rc-servers.json'),
        probe_timeout: '2s',
        // opencode only unless a test lays out transcripts: not the machine's own
        transcripts: false,
        ...watchdog,
      },
      ...extra,
    },
  });
}

async function opencode(data: FakeOpencodeData): Promise<FakeServer> {
  const s = await fakeOpencode(data);
  servers.push(s);
  return s;
}
async function ollama(o: Parameters<typeof fakeOllama>[0]): Promise<FakeServer> {
  const s = await fakeOllama(o);
  servers.push(s);
  return s;
}

function twoSessions(now: number): FakeOpencodeData {
  return {
    health: { healthy: true, version: '1.18.33' },
    sessions: [ocSession(LOOP, now - 1_000, { agent: 'build' }), ocSession(HEALTHY, now - 2_000)],
    messages: {
      [LOOP]: ocMessages(LOOP, now - 100_000, loopCalls()),
      [HEALTHY]: ocMessages(HEALTHY, now - 90_000, healthyCalls),
    },
  };
}

const rows = async () =>
  (await (await fetch(`${serviceUrl}/sessions`)).json()) as { session: string; verdict: string; source: string }[];

describe('watchdog tick', () => {
  it('reports exactly the looping session, with the local model second opinion; a healthy tick asks no model', async () => {
    const now = Date.now();
    const oc = await opencode({ ...twoSessions(now), sessions: [ocSession(HEALTHY, now - 2_000)] });
    const llm = await ollama({ answer: 'Yes - docs/spec.md is read 30 times and nothing lands.' });
    const cfg = config({ servers: [oc.url], ollama_url: llm.url, model: 'fake-llm' });

    const healthy = await runTick({ config: cfg });
    expect(healthy).toMatchObject({ status: 'ok', servers: 1, sessions: 1, flagged: 0, model_calls: 0, reported: [] });
    expect(llm.requests).toHaveLength(0);

    const oc2 = await opencode(twoSessions(now));
    const r = await runTick({
      config: config({ servers: [oc2.url], ollama_url: llm.url, model: 'fake-llm', state_file: join(dir, 's2.json') }),
    });
    expect(r).toMatchObject({ status: 'flagged', servers: 1, sessions: 2, flagged: 1, model_calls: 1, service: 'up' });
    expect(r.reported.map((v) => [v.session_id, v.level])).toEqual([[LOOP, 'looping']]);
    expect(llm.requests).toHaveLength(1);
    const sent = JSON.stringify(llm.requests[0].body);
    expect(sent).toContain('read docs/spec.md exit=0');
    expect(sent).not.toContain('SECRET');

    const row = (await rows()).find((x) => x.session === LOOP);
    expect(row).toMatchObject({ verdict: 'looping', source: 'watchdog' });
    // the healthy session gets no verdict, only its bulk (session hygiene): ok in the readout
    expect((await rows()).find((x) => x.session === HEALTHY)).toMatchObject({ verdict: 'ok', messages: 5 });
    expect((await vigil.detector<NoProgressDetector>('no-progress').externalVerdict(LOOP))?.second_opinion).toEqual({
      model: 'fake-llm',
      looping: true,
      reason: 'docs/spec.md is read 30 times and nothing lands.',
    });
    const health = (await (await fetch(`${serviceUrl}/health`)).json()) as { watchdog: { result: { status: string } } };
    expect(health.watchdog.result).toMatchObject({ status: 'flagged', flagged: 1, model_calls: 1 });
    expect(readState(join(dir, 's2.json'))).toMatchObject({
      result: { status: 'flagged' },
      flagged: { [LOOP]: 'looping' },
    });
  });

  it('no second opinion unless local_compute.enabled and watchdog.local_llm_enabled; a model failure does not break the tick', async () => {
    const oc = await opencode(twoSessions(Date.now()));
    const llm = await ollama({ answer: 'yes' });
    const off = await runTick({
      config: config({ servers: [oc.url], ollama_url: llm.url }, { local_compute: { enabled: false } }),
    });
    expect(off).toMatchObject({ status: 'flagged', model_calls: 0 });
    // a state file of its own: the first tick moved its window past these sessions
    const off2 = await runTick({
      config: config({
        servers: [oc.url],
        ollama_url: llm.url,
        local_llm_enabled: false,
        state_file: join(dir, 'b.json'),
      }),
    });
    expect(off2).toMatchObject({ status: 'flagged', model_calls: 0 });
    expect(llm.requests).toHaveLength(0);

    const broken = await ollama({ answer: '', status: 500 });
    const r = await runTick({
      config: config({ servers: [oc.url], ollama_url: broken.url, state_file: join(dir, 'c.json') }),
    });
    expect(r).toMatchObject({ status: 'flagged', flagged: 1, model_calls: 1, service: 'up' });
    expect(r.reported[0].second_opinion).toBeUndefined();
  });

  it("signs its reports with the plugin's session keys: a bound session takes them only with the secret", async () => {
    const now = Date.now();
    // The plugin made the user's sensor secret and reported both sessions with their keys.
    const file = join(dir, 'state', 'sensor-secret');
    const secret = loadSensorSecret(file, { create: true });
    for (const id of [LOOP, HEALTHY]) {
      const res = await fetch(`${serviceUrl}/progress`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-vigil-session-key': sessionKey(secret, id) },
        body: JSON.stringify({ kind: 'continuation', session_id: id, ts: now - 500, landed: false }),
      });
      expect(res.status).toBe(202);
    }
    const oc = await opencode(twoSessions(now));
    const cfg = (state: string) =>
      config({ servers: [oc.url], state_file: join(dir, state) }, { local_compute: { enabled: false } });
    // A watchdog without that secret (another user, another file): refused, nothing changed.
    const without = await runTick({ config: cfg('a.json'), env: { VIGIL_SENSOR_SECRET_FILE: join(dir, 'none') } });
    expect(without).toMatchObject({ status: 'error', service: 'refused' });
    expect(without.error).toMatch(/answered 403: headers\.x-vigil-session-key: no key for session/);
    expect((await rows()).find((x) => x.session === LOOP)).toMatchObject({ verdict: 'ok' });
    // With it (same user): the verdict lands.
    const signed = await runTick({ config: cfg('b.json'), env: { VIGIL_SENSOR_SECRET_FILE: file } });
    expect(signed).toMatchObject({ status: 'flagged', service: 'up' });
    expect((await rows()).find((x) => x.session === LOOP)).toMatchObject({ verdict: 'looping', source: 'watchdog' });
  });

  it('a session it flagged before is reported ok once it recovers', async () => {
    const now = Date.now();
    const data = twoSessions(now);
    const oc = await opencode(data);
    const cfg = config({ servers: [oc.url] }, { local_compute: { enabled: false } });
    expect((await runTick({ config: cfg })).reported.map((v) => v.level)).toEqual(['looping']);
    // the agent finally lands an edit and passes its check; the session was updated since
    data.sessions = [ocSession(LOOP, Date.now() + 1_000, { agent: 'build' })];
    data.messages[LOOP] = ocMessages(LOOP, now - 100_000, [...loopCalls(), ...healthyCalls]);
    const r = await runTick({ config: cfg });
    expect(r.reported.map((v) => [v.session_id, v.level])).toEqual([[LOOP, 'ok']]);
    expect(readState(join(dir, 'state.json'))?.flagged).toEqual({});
  });

  it('two servers sharing one opencode.db list the same sessions: each is judged once', async () => {
    const a = await opencode(twoSessions(Date.now()));
    const b = await opencode(twoSessions(Date.now()));
    const r = await runTick({ config: config({ servers: [a.url, b.url] }, { local_compute: { enabled: false } }) });
    expect(r).toMatchObject({ status: 'flagged', servers: 2, sessions: 2, flagged: 1 });
    expect(b.requests.filter((q) => q.path.includes('/message'))).toHaveLength(0);
  });

  it('idle when no opencode answers and there is no opencode.db', async () => {
    const r = await runTick({ config: config({ servers: ['http://127.0.0.1:9'] }) });
    expect(r).toMatchObject({ status: 'idle', servers: 0, sessions: 0, source: 'none', service: 'up' });
    const health = (await (await fetch(`${serviceUrl}/health`)).json()) as { watchdog: { result: { status: string } } };
    expect(health.watchdog.result.status).toBe('idle');
    expect(readState(join(dir, 'state.json'))).toMatchObject({ result: { status: 'idle' } });
  });

  it('finds servers through rc-servers.json', async () => {
    const oc = await opencode(twoSessions(Date.now()));
    const { writeFileSync } = await import('node:fs');
    writeFileSync(join(dir, 'rc-servers.json'), JSON.stringify({ servers: [{ serverUrl: oc.url }, { junk: true }] }));
    const r = await runTick({ config: config({}, { local_compute: { enabled: false } }) });
    expect(r).toMatchObject({ status: 'flagged', servers: 1, flagged: 1 });
  });

  it("reports each active session's bulk as a session_stats reading, live when its server answered", async () => {
    const now = Date.now();
    const oc = await opencode(twoSessions(now));
    const r = await runTick({ config: config({ servers: [oc.url] }, { local_compute: { enabled: false } }) });
    expect(r).toMatchObject({ source: 'api', stats: 2, service: 'up' });
    const st = await vigil.detector<SessionHygieneDetector>('session-hygiene').state(LOOP);
    const bytes = Buffer.byteLength(JSON.stringify(twoSessions(now).messages[LOOP]));
    expect(st?.stats).toMatchObject({ messages: 31, live: true });
    // the fake's ids differ per call: sizes within a few bytes per message
    expect(Math.abs((st?.stats?.stored_bytes ?? 0) - bytes)).toBeLessThan(31 * 8);
    // the newest model-side write: the last assistant message's completion
    expect(st?.stats?.updated_at).toBe(now - 100_000 + 30 * 1_000 + 500);
    const row = (await rows()).find((x) => x.session === LOOP) as Record<string, unknown> | undefined;
    expect(row).toMatchObject({ messages: 31 });
  });

  it('reads opencode.db read-only when no server answers', async (ctx) => {
    if (!SQLITE3) return ctx.skip();
    const db = join(dir, 'opencode.db');
    copyFileSync(join(import.meta.dirname, '../test/fixtures/opencode-export/opencode.db'), db);
    const before = readFileSync(db);
    // the fixture's sessions are from 2026-11: a window that covers them
    const c = await collectFromDb(db, { since: 0, maxSessions: 50, timeoutMs: 1_000 });
    expect(c.issues).toEqual([]);
    expect(c.sessions.filter((s) => s.active).length).toBeGreaterThan(0);
    const r = await runTick({
      config: config(
        { servers: ['http://127.0.0.1:9'], opencode_db: db, interval: '3650d' },
        { local_compute: { enabled: false } },
      ),
    });
    expect(r).toMatchObject({ source: 'db', servers: 0 });
    expect(r.sessions).toBeGreaterThan(0);
    // session hygiene from the rows: counts and sizes, live false (the database file alone)
    expect(r.stats).toBe(2);
    const st = await vigil.detector<SessionHygieneDetector>('session-hygiene').state('ses_dd3c1f1ffffe6w37wujp0POfVN');
    expect(st?.stats).toMatchObject({ messages: 27, live: false });
    expect(st?.stats?.stored_bytes).toBeGreaterThan(10_842);
    expect(['ok', 'flagged']).toContain(r.status);
    expect(readFileSync(db).equals(before)).toBe(true);
  });

  it('a later DB tick reads only what changed: the kept reads sit beside the state file', async (ctx) => {
    if (!SQLITE3) return ctx.skip();
    const db = join(dir, 'opencode.db');
    copyFileSync(join(import.meta.dirname, '../test/fixtures/opencode-export/opencode.db'), db);
    const cfg = config(
      { servers: ['http://127.0.0.1:9'], opencode_db: db, interval: '3650d' },
      { local_compute: { enabled: false } },
    );
    const first = await runTick({ config: cfg });
    expect(first).toMatchObject({ source: 'db' });
    expect(existsSync(join(dir, 'state.db-cache.json'))).toBe(true);
    // the root session goes on: one more read, after the first tick
    const root = 'ses_dd3c1f1ffffe6w37wujp0POfVN';
    const w = new OcDb(db);
    const now = Date.now();
    w.message(root, ocMessages(root, now, [{ tool: 'read', input: { filePath: '/work/project/x.js' } }])[1], now);
    w.touch(root, now);
    w.close();
    const lines: string[] = [];
    const logger = createLogger({
      level: 'debug',
      format: 'json',
      destination: new Writable({
        write(chunk, _e, cb) {
          lines.push(String(chunk));
          cb();
        },
      }),
    });
    const second = await runTick({ config: cfg, logger });
    expect(second).toMatchObject({ source: 'db', sessions: 1 });
    const read = lines.map((l) => JSON.parse(l)).find((l) => l.msg === 'watchdog: opencode.db read');
    expect(read).toMatchObject({ full: 0, incremental: 2 });
    expect(lines.join('')).not.toContain('full read of a session');
  });
});

describe('blind: an unexpected opencode API shape', () => {
  const shapes: [string, (d: FakeOpencodeData) => void, RegExp][] = [
    [
      'parts renamed',
      (d) => (d.messages[LOOP] = (d.messages[LOOP] as any[]).map(({ parts, ...m }) => ({ ...m, content: parts }))),
      /parts expected array/,
    ],
    ['a new tool status', (d) => ((d.messages[LOOP] as any[])[1].parts[1].state.status = 'done'), /state\.status/],
    [
      'a part type renamed',
      (d) =>
        (d.messages[LOOP] = (d.messages[LOOP] as any[]).map((m) => ({
          ...m,
          parts: m.parts.map((p: any) => ({ ...p, type: `${p.type}-v2` })),
        }))),
      /no known part type/,
    ],
    [
      'session time missing',
      (d) => (d.sessions = (d.sessions as any[]).map(({ time, ...s }) => s)),
      /time expected object/,
    ],
    ['the list is an object', (d) => (d.sessions = { items: d.sessions }), /GET \/session: unexpected shape/],
    ['health changed', (d) => (d.health = { status: 'up' }), /global\/health: unexpected shape/],
  ];

  it.each(shapes)('%s: the collector says blind and names the field, never content', async (_name, change, why) => {
    const d = twoSessions(Date.now());
    change(d);
    const oc = await opencode(d);
    const r = await runTick({ config: config({ servers: [oc.url] }, { local_compute: { enabled: false } }) });
    expect(r.status).toBe('blind');
    expect(r.error).toMatch(why);
    expect(r.error).not.toContain('SECRET');
  });

  it('heartbeat blind -> the service raises exactly one warning "watchdog is blind"; a good tick resolves it', async () => {
    const d = twoSessions(Date.now());
    const good = JSON.parse(JSON.stringify(d.messages[LOOP]));
    (d.messages[LOOP] as any[])[1].parts[1].state = { phase: 'finished' };
    const oc = await opencode(d);
    const cfg = config({ servers: [oc.url] }, { local_compute: { enabled: false } });
    expect((await runTick({ config: cfg })).status).toBe('blind');
    expect((await runTick({ config: cfg })).status).toBe('blind');
    const alerts = (await eventually(() => (rec.sent.length >= 1 ? rec.sent : undefined)))!;
    expect(alerts).toHaveLength(1);
    expect(alerts[0]).toMatchObject({
      dedup_key: 'watchdog:blind',
      severity: 'warning',
      state: 'trigger',
      title: 'watchdog is blind',
    });
    expect(alerts[0].summary).toMatch(
      /\[1\]\.parts\[1\]\.state\.status expected one of pending, running, completed, error/,
    );
    const health = (await (await fetch(`${serviceUrl}/health`)).json()) as { watchdog: { result: { status: string } } };
    expect(health.watchdog.result.status).toBe('blind');
    // the state file keeps the window where it was: the blind ticks read nothing
    expect(readState(join(dir, 'state.json'))?.since).toBeLessThan(Date.now() - 60_000);

    d.messages[LOOP] = good;
    const blind = () => rec.sent.filter((a) => a.dedup_key === 'watchdog:blind');
    expect((await runTick({ config: cfg })).status).toBe('flagged');
    await eventually(() => blind().length === 2);
    expect(blind()[1]).toMatchObject({ state: 'resolve', title: 'watchdog is blind' });
    // the looping session it can see again is alerted by the service as usual
    await eventually(() => rec.sent.some((a) => a.dedup_key === LOOP && a.state === 'trigger'));
    // a later good tick (nothing updated since): the incident is closed already, nothing more is sent
    const sent = rec.sent.length;
    expect((await runTick({ config: cfg })).status).toBe('ok');
    expect((await vigil.deliveryLog.recent()).length).toBe(sent);
    expect(blind()).toHaveLength(2);
  });

  it('collectFromServer: a 500 is an error, not blindness; a session deleted since the list is skipped', async () => {
    const now = Date.now();
    const d = twoSessions(now);
    delete d.messages[HEALTHY]; // 404
    const oc = await opencode(d);
    const c = await collectFromServer(oc.url, { since: now - 60_000, maxSessions: 10, timeoutMs: 2_000 });
    expect(c.issues).toEqual([]);
    expect(c.errors).toEqual([]);
    expect(c.sessions.map((s) => s.id)).toEqual([LOOP]);
  });
});

describe('issue text', () => {
  it('keeps where, field and the kind of problem; drops quoted values and parse excerpts', () => {
    expect(
      issueText({
        where: 'session ses_a',
        field: 'data',
        message: 'unreadable row (Unexpected token \'S\', "SECRET-CONTENT" is not valid JSON)',
      }),
    ).toBe('session ses_a: data: unreadable row');
    expect(issueText({ where: 'message 3 part 2', field: 'state.status', message: 'unknown status "SECRET"' })).toBe(
      'message 3 part 2: state.status: unknown status "?"',
    );
  });
});

describe('overlapping ticks', () => {
  it('two ticks started together on one lock file: one runs, one skips (and says so)', async () => {
    let open!: () => void;
    const d = twoSessions(Date.now());
    d.gate = new Promise<void>((r) => {
      open = r;
    });
    const oc = await opencode(d);
    const cfg = config({ servers: [oc.url] }, { local_compute: { enabled: false } });
    const a = runTick({ config: cfg });
    const b = runTick({ config: cfg });
    const first = await Promise.race([a, b]);
    expect(first).toMatchObject({ status: 'skipped', holder: { pid: process.pid } });
    expect(first.error).toMatch(/previous tick still running/);
    open();
    const both = await Promise.all([a, b]);
    expect(both.map((r) => r.status).sort()).toEqual(['flagged', 'skipped']);
    expect(existsSync(join(dir, 'watchdog.lock'))).toBe(false);
    expect(readState(join(dir, 'state.json'))?.result.status).toBe('flagged');
  });
});

describe('service down', () => {
  it('sends exactly one critical desktop alert per outage, naming the flagged count', async () => {
    const bin = join(dir, 'bin');
    const { mkdirSync } = await import('node:fs');
    mkdirSync(bin);
    const notify = fakeNotifySend(bin);
    const env = { PATH: `${bin}:${process.env.PATH}`, DBUS_SESSION_BUS_ADDRESS: 'unix:path=/nonexistent' };
    const d = twoSessions(Date.now());
    const oc = await opencode(d);
    const cfg = config({ servers: [oc.url], service_url: 'http://127.0.0.1:9' }, { local_compute: { enabled: false } });

    const r = await runTick({ config: cfg, env });
    expect(r).toMatchObject({ status: 'flagged', flagged: 1, service: 'down', alerted: true });
    expect(notify.calls()).toHaveLength(1);
    const [args] = notify.calls();
    expect(args).toContain('--urgency=critical');
    expect(args.at(-2)).toBe('Vigil service is down');
    expect(args.at(-1)).toMatch(
      /CRITICAL Vigil service is down: .*cannot reach http:\/\/127\.0\.0\.1:9.*1 session is flagged: build looping/,
    );
    expect(rec.sent).toHaveLength(0); // nothing else: the service never heard of it

    // still down, nothing new flagged: no second alert; the window does not move on
    const again = await runTick({ config: cfg, env });
    expect(again).toMatchObject({ service: 'down', alerted: false });
    expect(notify.calls()).toHaveLength(1);
    // a newly flagged session during the same outage is worth one more
    const other = 'ses_loop00000000000000000002';
    (d.sessions as unknown[]).push(ocSession(other, Date.now()));
    d.messages[other] = ocMessages(other, Date.now() - 50_000, loopCalls());
    expect(await runTick({ config: cfg, env })).toMatchObject({ flagged: 2, alerted: true });
    expect(notify.calls()).toHaveLength(2);

    // back up: the outage closes, the verdicts reach the service
    const up = await runTick({ config: config({ servers: [oc.url] }, { local_compute: { enabled: false } }), env });
    expect(up).toMatchObject({ service: 'up', alerted: false });
    expect(readState(join(dir, 'state.json'))?.service_down).toBeNull();
    expect(
      (await rows())
        .filter((x) => x.source === 'watchdog')
        .map((x) => x.session)
        .sort(),
    ).toEqual([LOOP, other]);
  });

  it('a service that refuses the report (4xx) is an error, not an outage: no desktop alert', async () => {
    const bin = join(dir, 'bin');
    const { mkdirSync } = await import('node:fs');
    mkdirSync(bin);
    const notify = fakeNotifySend(bin);
    const strict = await fakeServer((_req, _body, res) => json(res, 400, { message: 'body[0].level: invalid' }));
    servers.push(strict);
    const oc = await opencode(twoSessions(Date.now()));
    const cfg = config({ servers: [oc.url], service_url: strict.url }, { local_compute: { enabled: false } });
    const r = await runTick({ config: cfg, env: { PATH: `${bin}:${process.env.PATH}` } });
    expect(r).toMatchObject({ status: 'error', service: 'refused', alerted: false });
    expect(r.error).toBe('the service refused the report: answered 400: body[0].level: invalid');
    expect(strict.requests.map((q) => q.path)).toEqual(['/verdicts', '/watchdog/heartbeat']);
    expect(strict.requests[1].body).toMatchObject({ result: { status: 'error' } });
    expect(notify.calls()).toHaveLength(0);
  });

  it('a failing notify-send makes the tick an error (nobody was told)', async () => {
    const bin = join(dir, 'bin');
    const { mkdirSync } = await import('node:fs');
    mkdirSync(bin);
    fakeNotifySend(bin, 1);
    const oc = await opencode(twoSessions(Date.now()));
    const cfg = config({ servers: [oc.url], service_url: 'http://127.0.0.1:9' }, { local_compute: { enabled: false } });
    const r = await runTick({ config: cfg, env: { PATH: `${bin}:${process.env.PATH}` } });
    expect(r).toMatchObject({ status: 'error', alerted: false });
    expect(r.error).toMatch(/desktop alert failed/);
  });
});
