import { Writable } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { createLogger } from '../core/logger.ts';
import { sessionKey, sessionKeyHeader } from '../core/session-key.ts';
import type { Vigil } from '../core/vigil.ts';
import { normalizeCall } from '../sensors/shared/normalize.ts';
import { backends, flushPrefix, testPrefix, testVigil } from '../test/helpers/index.ts';
import { type App, buildServer } from './server.ts';

// Defect 2 of issue 27, over real sockets: with the ingestion token (every sensor and
// router holds it), nobody but a session's own sensor may stop it, read what an ack
// needs, acknowledge its directives or report its compaction. The sensor proves it with
// the key it derives from its local secret (X-Vigil-Session-Key). On Redis the plugin
// talks to one instance and the forger to another: both agree on the binding.

const INGEST = 'ingest-t0ken-for-session-keys';
const ADMIN = 'adm1n-t0ken-for-session-keys';
const SECRET = Buffer.alloc(32, 3); // the plugin's and the watchdog's (same user)
const FORGED = Buffer.alloc(32, 4); // another local process's own secret

const running: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of running.splice(0).reverse()) await c();
});

interface Instance {
  v: Vigil;
  app: App;
  url: string;
  logs: string[];
}

async function instance(backend: 'memory' | 'redis', prefix: string | undefined): Promise<Instance> {
  const logs: string[] = [];
  const destination = new Writable({
    write(chunk, _enc, cb) {
      logs.push(String(chunk));
      cb();
    },
  });
  const v = await testVigil({
    backend,
    prefix,
    env: { VIGIL_INGEST_TOKEN: INGEST, VIGIL_ADMIN_TOKEN: ADMIN },
    overlay: { modes: { mode: 'auto_recover' } },
    logger: createLogger({ destination, level: 'debug' }),
  });
  const app = await buildServer(v, { logger: true });
  const url = await app.listen({ host: '127.0.0.1', port: 0 });
  running.push(async () => {
    await app.close();
    await v.close();
  });
  return { v, app, url, logs };
}

/** The plugin's side (instance `a`) and another local process's (`b`: the same instance on memory). */
async function services(backend: 'memory' | 'redis'): Promise<{ a: Instance; b: Instance }> {
  if (backend === 'memory') {
    const a = await instance('memory', undefined);
    return { a, b: a };
  }
  const prefix = testPrefix();
  running.push(() => flushPrefix(prefix));
  return { a: await instance('redis', prefix), b: await instance('redis', prefix) };
}

const key = (secret: Buffer, ...ids: string[]) => ({
  'x-vigil-session-key': sessionKeyHeader(ids.map((id) => [id, sessionKey(secret, id)] as const)) as string,
});

async function call(
  base: string,
  method: string,
  path: string,
  o: { body?: unknown; headers?: Record<string, string> } = {},
): Promise<{ status: number; text: string; json: any }> {
  const res = await fetch(`${base}${path}`, {
    method,
    headers: {
      authorization: `Bearer ${INGEST}`,
      ...(o.body === undefined ? {} : { 'content-type': 'application/json' }),
      ...o.headers,
    },
    body: o.body === undefined ? undefined : JSON.stringify(o.body),
  });
  const text = await res.text();
  let json: any;
  try {
    json = text ? JSON.parse(text) : undefined;
  } catch {
    json = undefined;
  }
  return { status: res.status, text, json };
}

const read = normalizeCall('read', { filePath: '/p/src/nav.js' }, { cwd: '/p' });
const tool = (session: string, i: number, extra: Record<string, unknown> = {}) => ({
  session_id: session,
  tool: 'read',
  call_id: `c${i}`,
  fingerprint: read.fingerprint,
  target: read.target,
  landed: false,
  ts: Date.now() - 1_000 + i,
  ...extra,
});
const looping = (session: string, extra: Record<string, unknown> = {}) => ({
  session_id: session,
  level: 'looping',
  reason: 'the same read again and again',
  source: 'watchdog',
  ...extra,
});

const ROOT = 'ses_root';
const CHILD = 'ses_child';

/** The plugin reports a root and its child, with their keys: both are bound. */
async function pluginReports(a: Instance) {
  const r = await call(a.url, 'POST', '/progress', {
    body: [tool(ROOT, 1), tool(CHILD, 2, { parent_session_id: ROOT })],
    headers: key(SECRET, ROOT, CHILD),
  });
  expect(r.status).toBe(202);
}

const gate = async (base: string, conversation: string) =>
  (await call(base, 'POST', '/gate', { body: { conversation } })).json.action as string;

function expectRefused(r: { status: number; json: any }, session: string) {
  expect(r.status).toBe(403);
  expect(r.json.code).toBe('SESSION_KEY_MISMATCH');
  expect(r.json.message).toMatch(new RegExp(`^headers\\.x-vigil-session-key: .*session "${session}"`));
}

describe.each(backends())('session keys over HTTP (%s)', (backend) => {
  it("a forged verdict for a bound session is refused; the session's verdict and gate stay as they were", async () => {
    const { a, b } = await services(backend);
    await pluginReports(a);
    // Another local process with the ingestion token: no key, a key of its own, a forged child.
    expectRefused(await call(b.url, 'POST', '/verdicts', { body: looping(CHILD) }), CHILD);
    expectRefused(await call(b.url, 'POST', '/verdicts', { body: looping(CHILD), headers: key(FORGED, CHILD) }), CHILD);
    expectRefused(
      await call(b.url, 'POST', '/verdicts', {
        body: looping('ses_evil', { parent_session_id: ROOT }),
        headers: key(FORGED, 'ses_evil', ROOT),
      }),
      ROOT,
    );
    expect(await gate(b.url, CHILD)).toBe('allow');
    const rows = (await call(b.url, 'GET', '/sessions', { headers: { authorization: `Bearer ${ADMIN}` } })).json;
    expect(rows.map((s: { session: string; verdict: string }) => [s.session, s.verdict]).sort()).toEqual([
      [CHILD, 'ok'],
      [ROOT, 'ok'],
    ]);
    // The forged child was never entered into the tree.
    expect((await b.v.tree.info('ses_evil')).root).toBe('ses_evil');
    // The watchdog (same user, same secret) is the session's sensor: its verdict stops the child.
    const real = await call(b.url, 'POST', '/verdicts', { body: looping(CHILD), headers: key(SECRET, CHILD) });
    expect(real.status).toBe(202);
    expect(real.json.verdicts).toMatchObject([{ session: CHILD, to: 'looping', source: 'watchdog' }]);
    expect(await gate(a.url, CHILD)).toBe('refuse');
  });

  it('a forged ack or compaction_done is refused and the refusal stays; the real key lifts it', async () => {
    const { a, b } = await services(backend);
    await pluginReports(a);
    expect((await call(a.url, 'POST', '/verdicts', { body: looping(CHILD), headers: key(SECRET, CHILD) })).status).toBe(
      202,
    );
    expect(await gate(b.url, CHILD)).toBe('refuse');

    // Without the key, GET /directives hands out nothing: no ids, no sessions.
    const peek = await call(b.url, 'GET', `/directives?session=${CHILD}`);
    expectRefused(peek, CHILD);
    expect(peek.text).not.toMatch(/"id"|"d[0-9a-f]{20}"|directives|ses_root/);
    expectRefused(await call(b.url, 'GET', `/directives?session=${CHILD}`, { headers: key(FORGED, CHILD) }), CHILD);

    // The plugin reads them with its key (a bare key: the request names one session).
    const mine = await call(a.url, 'GET', `/directives?session=${CHILD}`, {
      headers: { 'x-vigil-session-key': sessionKey(SECRET, CHILD) },
    });
    expect(mine.status).toBe(200);
    const ds = mine.json.directives as { id: string; type: string; session_id: string; root_id: string }[];
    const block = ds.find((d) => d.type === 'block' && d.session_id === CHILD);
    const abort = ds.find((d) => d.type === 'abort' && d.session_id === CHILD);
    expect(block && abort).toBeTruthy();

    // A forger who learned the ids anyway (GET /trees/:root on an open loopback) cannot ack them.
    const acks = [block!, abort!].map((d) => ({ id: d.id, root_id: d.root_id, session_id: d.session_id }));
    expectRefused(await call(b.url, 'POST', '/directives/ack', { body: { acks } }), CHILD);
    expectRefused(await call(b.url, 'POST', '/directives/ack', { body: { acks }, headers: key(FORGED, CHILD) }), CHILD);
    // Nor report the compaction that ends the recovery, for the root, the child or a forged member.
    for (const [s, extra] of [
      [ROOT, {}],
      [CHILD, {}],
      ['ses_evil', { parent_session_id: ROOT }],
    ] as const) {
      const done = { kind: 'compaction_done', session_id: s, ts: Date.now(), landed: false, ...extra };
      const r = await call(b.url, 'POST', '/progress', { body: done, headers: key(FORGED, s) });
      expectRefused(r, s === 'ses_evil' ? ROOT : s);
    }
    // The refusal stays: the gate refuses, the block is still pending, the tree still waits.
    expect(await gate(b.url, CHILD)).toBe('refuse');
    const still = await call(a.url, 'GET', `/directives?session=${CHILD}`, { headers: key(SECRET, CHILD) });
    expect(still.json.directives.map((d: { id: string }) => d.id)).toEqual(expect.arrayContaining([block!.id]));
    expect((await a.v.engine.treeState(ROOT))?.awaiting_compaction?.session).toBe(ROOT);

    // The plugin, with its keys: the abort is acknowledged, the compaction ends the recovery.
    const acked = await call(a.url, 'POST', '/directives/ack', {
      body: { acks: [acks[1]] },
      headers: key(SECRET, CHILD),
    });
    expect(acked.status).toBe(200);
    expect(acked.json).toEqual({ acknowledged: 1 });
    const done = await call(a.url, 'POST', '/progress', {
      body: { kind: 'compaction_done', session_id: ROOT, ts: Date.now(), landed: false },
      headers: key(SECRET, ROOT),
    });
    expect(done.status).toBe(202);
    expect(await gate(b.url, CHILD)).toBe('allow');
    expect(done.json.directives.some((d: { type: string }) => d.type === 'lift')).toBe(true);

    // The keys never reached the log.
    const logs = [...a.logs, ...b.logs].join('');
    expect(logs.length).toBeGreaterThan(0);
    for (const s of [ROOT, CHILD, 'ses_evil']) {
      expect(logs).not.toContain(sessionKey(SECRET, s));
      expect(logs).not.toContain(sessionKey(FORGED, s));
    }
  });

  it('a member that joined the tree without a key (a gate check, a router record) cannot lift it', async () => {
    const { a, b } = await services(backend);
    await pluginReports(a);
    await call(a.url, 'POST', '/verdicts', { body: looping(CHILD), headers: key(SECRET, CHILD) });
    expect(await gate(b.url, CHILD)).toBe('refuse');
    // The gate and request records name a parent with the ingestion token alone: the member joins.
    await call(b.url, 'POST', '/gate', { body: { conversation: 'ses_joined', parent: ROOT } });
    await call(b.url, 'POST', '/requests', {
      body: {
        session_id: 'ses_joined2',
        parent_session_id: 'ses_joined',
        request_id: 'r1',
        model: 'a/b',
        prompt_tokens: 1,
        ts: Date.now(),
      },
    });
    expect((await b.v.tree.info('ses_joined2')).root).toBe(ROOT);
    // Its compaction_done (keyless: it is unbound) names the tree's root, which is bound.
    for (const s of ['ses_joined', 'ses_joined2']) {
      const done = { kind: 'compaction_done', session_id: s, ts: Date.now(), landed: false };
      expectRefused(await call(b.url, 'POST', '/progress', { body: done }), ROOT);
    }
    // A new member naming the joined one as its parent: the same root.
    const viaParent = {
      kind: 'compaction_done',
      session_id: 'ses_new',
      parent_session_id: 'ses_joined2',
      ts: Date.now(),
      landed: false,
    };
    expectRefused(await call(b.url, 'POST', '/progress', { body: viaParent }), ROOT);
    expect(await gate(b.url, CHILD)).toBe('refuse');
    expect((await a.v.engine.treeState(ROOT))?.awaiting_compaction?.session).toBe(ROOT);
  });

  it('unbound sessions take keyless inputs as before; the admin Resume needs no session key', async () => {
    const { a, b } = await services(backend);
    // A sensor that sends no key (an older plugin): nothing is bound, nothing refused.
    expect((await call(a.url, 'POST', '/progress', { body: tool('ses_old', 1) })).status).toBe(202);
    expect((await call(b.url, 'POST', '/verdicts', { body: looping('ses_old') })).status).toBe(202);
    expect((await call(b.url, 'GET', '/directives?session=ses_old')).status).toBe(200);
    expect(await b.v.bindings.isBound('ses_old')).toBe(false);
    // A bound tree under a hard stop is the person's to lift: Resume, with the admin token.
    await pluginReports(a);
    for (let i = 0; i < 4; i++) {
      await call(a.url, 'POST', '/verdicts', { body: looping(CHILD), headers: key(SECRET, CHILD) });
      await call(a.url, 'POST', '/progress', {
        body: { kind: 'compaction_done', session_id: ROOT, ts: Date.now(), landed: false },
        headers: key(SECRET, ROOT),
      });
    }
    expect((await a.v.engine.treeState(ROOT))?.stage).toBe(3);
    expect(await gate(b.url, ROOT)).toBe('refuse');
    const resumed = await call(b.url, 'POST', `/trees/${ROOT}/resume`, {
      headers: { authorization: `Bearer ${ADMIN}` },
    });
    expect(resumed.status).toBe(200);
    expect(await gate(b.url, ROOT)).toBe('allow');
  });

  it('a forged progress event is refused with nothing judged or stored; a retry with the key and a repeat are checked too', async () => {
    const { a, b } = await services(backend);
    await pluginReports(a);
    // The key check runs in the events' unit (its binding read is checked by the commit):
    // on Redis, b has cached nothing, so its read is a guess the commit must correct.
    const ev = tool(ROOT, 7);
    expectRefused(await call(b.url, 'POST', '/progress', { body: ev }), ROOT);
    expectRefused(await call(b.url, 'POST', '/progress', { body: [tool('ses_free', 1), ev] }), ROOT);
    // Nothing of either was judged: the same call ids are new, not repeats, and the
    // unbound session in the refused batch was not bound or entered.
    expect(await b.v.bindings.isBound('ses_free')).toBe(false);
    expect(await b.v.tree.known('ses_free')).toBe(false);
    const ok = await call(b.url, 'POST', '/progress', { body: ev, headers: key(SECRET, ROOT) });
    expect(ok.status).toBe(202);
    // The same event again is a repeat (nothing judged), and it is still checked.
    expectRefused(await call(b.url, 'POST', '/progress', { body: ev }), ROOT);
    expect((await call(b.url, 'POST', '/progress', { body: ev, headers: key(SECRET, ROOT) })).status).toBe(202);
    // A binding made in b's unit is what a reads: a wrong key for it is refused there.
    expect(
      (await call(b.url, 'POST', '/progress', { body: tool('ses_new', 1), headers: key(SECRET, 'ses_new') })).status,
    ).toBe(202);
    expectRefused(
      await call(a.url, 'POST', '/progress', { body: tool('ses_new', 2), headers: key(FORGED, 'ses_new') }),
      'ses_new',
    );
  });

  it('a malformed key header is a 400 naming it', async () => {
    const { a } = await services(backend);
    const r = await call(a.url, 'POST', '/verdicts', {
      body: looping('ses_x'),
      headers: { 'x-vigil-session-key': 'ses_x=short' },
    });
    expect(r.status).toBe(400);
    expect(r.json).toMatchObject({ code: 'BAD_INPUT' });
    expect(r.json.message).toBe('headers.x-vigil-session-key: a key is not 32 to 128 base64url characters');
    const two = await call(a.url, 'POST', '/progress', {
      body: [tool('ses_p', 1), tool('ses_q', 2)],
      headers: { 'x-vigil-session-key': sessionKey(SECRET, 'ses_p') },
    });
    expect(two.status).toBe(400);
    expect(two.json.message).toMatch(/^headers\.x-vigil-session-key: a bare key names one session/);
  });
});
