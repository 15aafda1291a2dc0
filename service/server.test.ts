import { afterEach, describe, expect, it } from 'vitest';
import { FakeClock } from '../core/clock.ts';
import type { Vigil } from '../core/vigil.ts';
import { normalizeCall } from '../sensors/shared/normalize.ts';
import { flushPrefix, testPrefix, testVigil, withMemory, withRedis } from '../test/helpers/index.ts';
import { buildServer } from './server.ts';

const TOKEN = 'adm1n-t0ken-for-tests';
const INGEST = 'ingest-t0ken-for-tests';
const running: { v: Vigil; prefix?: string; close: () => Promise<unknown> }[] = [];
afterEach(async () => {
  for (const r of running.splice(0)) {
    await r.close();
    await r.v.close();
    if (r.prefix) await flushPrefix(r.prefix);
  }
});

async function service(
  o: { backend?: 'memory' | 'redis'; prefix?: string; token?: boolean; overlay?: unknown; clock?: FakeClock } = {},
) {
  const backend = o.backend ?? 'memory';
  const prefix = o.prefix ?? (backend === 'redis' ? testPrefix() : undefined);
  const v = await testVigil({
    backend,
    prefix,
    env: o.token === false ? {} : { VIGIL_ADMIN_TOKEN: TOKEN },
    overlay: o.overlay,
    clock: o.clock,
    channels: [{ name: 'desk', type: 'desktop', command: '/nonexistent/notify-send' }],
  });
  const app = await buildServer(v, { version: '9.9.9' });
  running.push({ v, prefix: o.prefix ? undefined : prefix, close: () => app.close() });
  return { v, app };
}

const read = normalizeCall('read', { filePath: '/p/src/app.js' }, { cwd: '/p' });
const event = (session: string, i: number, extra: Record<string, unknown> = {}) => ({
  session_id: session,
  tool: 'read',
  call_id: `c${i}`,
  fingerprint: read.fingerprint,
  target: read.target,
  landed: false,
  ts: Date.now() - 60_000 + i,
  ...extra,
});
const admin = { authorization: `Bearer ${TOKEN}` };

// A batch is one unit: a resent batch judges only the events not committed yet, and a
// call_id twice in one batch counts once (each read of the same file is one call).
async function batchOnce(backend: 'memory' | 'redis') {
  const a = await service({ backend });
  const post = (ids: number[]) =>
    a.app.inject({ method: 'POST', url: '/progress', payload: ids.map((i) => event('ses_bt', i)) });
  expect((await post([1, 2, 2, 3])).statusCode).toBe(202);
  const calls = async () =>
    (await a.app.inject({ method: 'GET', url: '/sessions' }))
      .json()
      .find((r: { session: string }) => r.session === 'ses_bt').top_count;
  expect(await calls()).toBe(3);
  expect((await post([2, 3, 4, 5])).statusCode).toBe(202);
  expect(await calls()).toBe(5);
  expect((await post([1, 5])).json()).toMatchObject({ accepted: 2, verdicts: [] });
  expect(await calls()).toBe(5);
}

describe.runIf(withMemory)('service API', () => {
  it('a batch judges each call once: a resent batch only its new calls', () => batchOnce('memory'));
  it('accepts one progress event or a batch with 202, and shows the session in the readout', async () => {
    const { app } = await service();
    const one = await app.inject({
      method: 'POST',
      url: '/progress',
      payload: event('ses_a', 0, { agent: 'build' }),
      headers: { 'x-vigil-plugin': 'vigil-opencode/0.1.0' },
    });
    expect(one.statusCode).toBe(202);
    expect(one.json()).toEqual({ accepted: 1, verdicts: [], directives: [] });
    const batch = await app.inject({
      method: 'POST',
      url: '/progress',
      payload: [1, 2, 3].map((i) => event('ses_a', i)),
    });
    expect(batch.json().accepted).toBe(3);
    const req = await app.inject({
      method: 'POST',
      url: '/requests',
      payload: {
        session_id: 'ses_a',
        request_id: 'r1',
        model: 'fake/loop-model',
        prompt_tokens: 1000,
        cost_usd: 0.01,
        ts: '2026-11-30T10:00:00Z',
      },
    });
    expect(req.statusCode).toBe(202);
    const rows = (await app.inject({ method: 'GET', url: '/sessions' })).json();
    expect(rows).toHaveLength(1);
    const row = rows[0];
    for (const k of [
      'session',
      'agent',
      'parent',
      'root',
      'verdict',
      'stage',
      'turns_since_landed',
      'usd_since_landed',
      'top_target',
      'top_count',
      'models',
      'plugin_live',
      'last_event_at',
    ]) {
      expect(row).toHaveProperty(k);
    }
    expect(row).toMatchObject({
      session: 'ses_a',
      agent: 'build',
      root: 'ses_a',
      verdict: 'ok',
      models: ['fake/loop-model'],
      plugin_live: true,
      top_count: 4,
    });
    const report = await app.inject({ method: 'GET', url: '/sessions/ses_a/report' });
    expect(report.headers['content-type']).toContain('text/plain');
    expect(report.body).toContain('session: ses_a (build)');
    expect((await app.inject({ method: 'GET', url: '/sessions/ses_nope/report' })).statusCode).toBe(404);
    const health = (await app.inject({ method: 'GET', url: '/health' })).json();
    expect(health).toMatchObject({ version: '9.9.9', backend: 'memory', mode: 'warn' });
    expect(health.plugins.map((p: { version: string }) => p.version)).toEqual(['vigil-opencode/0.1.0']);
  });

  it('names the field of a bad body and stores nothing', async () => {
    const { app, v } = await service();
    const cases: [string, unknown, string][] = [
      ['/progress', event('ses_b', 0, { fingerprint: 'xyz' }), 'body.fingerprint'],
      [
        '/progress',
        [event('ses_b', 0), event('ses_b', 1, { args: { filePath: '/secret' } })],
        'body[1].args: unknown key',
      ],
      ['/progress', { ...event('ses_b', 0), landed: 'yes' }, 'body.landed'],
      [
        '/requests',
        { session_id: 'ses_b', request_id: 'r', model: 'm', prompt_tokens: -1, ts: 1 },
        'body.prompt_tokens',
      ],
      ['/verdicts', { session_id: 'ses_b', level: 'panic', reason: 'x' }, 'body.level'],
      ['/gate', { conversation: 'ses_b', prompt: 'hello' }, 'body.prompt: unknown key'],
    ];
    for (const [url, payload, field] of cases) {
      const r = await app.inject({ method: 'POST', url, payload: payload as object });
      expect(r.statusCode, url).toBe(400);
      expect(r.json().message).toContain(field);
    }
    expect(await v.engine.sessionRows()).toEqual([]);
  });

  it('records watchdog verdicts and heartbeats; the warnings list the flagged session', async () => {
    const { app } = await service();
    const r = await app.inject({
      method: 'POST',
      url: '/verdicts',
      payload: {
        session_id: 'ses_w',
        agent: 'explore',
        level: 'looping',
        reason: 'read x.js x20, all failing',
        source: 'watchdog',
      },
    });
    expect(r.json().verdicts).toEqual([
      { session: 'ses_w', detector: 'no-progress', from: 'ok', to: 'looping', source: 'watchdog' },
    ]);
    const warnings = (await app.inject({ method: 'GET', url: '/warnings' })).json();
    expect(warnings).toEqual([
      expect.objectContaining({
        session: 'ses_w',
        agent: 'explore',
        level: 'looping',
        reason: 'read x.js x20, all failing',
      }),
    ]);
    await app.inject({
      method: 'POST',
      url: '/watchdog/heartbeat',
      payload: { last_tick_at: Date.now(), result: { status: 'flagged', sessions: 3, flagged: 1 } },
    });
    const health = (await app.inject({ method: 'GET', url: '/health' })).json();
    expect(health.watchdog.result).toMatchObject({ status: 'flagged', flagged: 1 });
    const prom = await app.inject({ method: 'GET', url: '/metrics/prometheus' });
    expect(prom.body).toContain('vigil_verdict_transitions_total{to="looping",source="watchdog"} 1');
    expect(prom.body).toContain('vigil_alert_queue_depth');
  });

  it('admin routes need the token; knobs are validated, effective at once and persisted', async () => {
    const { app, v } = await service();
    expect(
      (await app.inject({ method: 'PATCH', url: '/knobs', payload: { modes: { mode: 'auto_recover' } } })).statusCode,
    ).toBe(401);
    expect(
      (await app.inject({ method: 'PATCH', url: '/knobs', headers: { authorization: 'Bearer wrong' }, payload: {} }))
        .statusCode,
    ).toBe(401);
    const bad = await app.inject({
      method: 'PATCH',
      url: '/knobs',
      headers: admin,
      payload: { progress: { dup_warn: 2, windw: 3 } },
    });
    expect(bad.statusCode).toBe(400);
    expect(bad.json().message).toContain('progress.dup_warn');
    expect(bad.json().message).toContain('progress.windw: unknown key');
    const ok = await app.inject({
      method: 'PATCH',
      url: '/knobs',
      headers: admin,
      payload: { modes: { mode: 'auto_recover' }, progress: { stall_turns: 30 } },
    });
    expect(ok.statusCode).toBe(200);
    expect(v.knobs.get<{ mode: string }>('modes').mode).toBe('auto_recover');
    expect((await app.inject({ method: 'GET', url: '/knobs' })).json().progress.stall_turns).toBe(30);
    expect((await app.inject({ method: 'POST', url: '/trees/ses_x/resume', payload: {} })).statusCode).toBe(401);
    expect(
      (await app.inject({ method: 'POST', url: '/trees/ses_x/resume', headers: admin, payload: {} })).json().tree.stage,
    ).toBe(0);
  });

  it('with no token configured, mutating admin routes are refused, reads still work', async () => {
    const { app } = await service({ token: false });
    expect((await app.inject({ method: 'PATCH', url: '/knobs', payload: {} })).statusCode).toBe(403);
    expect((await app.inject({ method: 'POST', url: '/channels/desk/test' })).statusCode).toBe(403);
    expect((await app.inject({ method: 'GET', url: '/knobs' })).statusCode).toBe(200);
  });

  it('refuses to bind off loopback without both tokens (or with a short one), and then guards every route', async () => {
    for (const env of [{}, { VIGIL_ADMIN_TOKEN: TOKEN }, { VIGIL_ADMIN_TOKEN: TOKEN, VIGIL_INGEST_TOKEN: 'short' }]) {
      const v = await testVigil({ backend: 'memory', env });
      await expect(buildServer(v, { host: '0.0.0.0' })).rejects.toThrow(/not loopback/);
      await v.close();
    }
    const v2 = await testVigil({ backend: 'memory', env: { VIGIL_ADMIN_TOKEN: TOKEN, VIGIL_INGEST_TOKEN: INGEST } });
    const app = await buildServer(v2, { host: '0.0.0.0' });
    expect((await app.inject({ method: 'GET', url: '/sessions' })).statusCode).toBe(401);
    expect((await app.inject({ method: 'GET', url: '/sessions', headers: admin })).statusCode).toBe(200);
    // Sensors' routes take the ingestion token, not the admin token (and not nothing).
    const ev = {
      session_id: 'ses_x',
      tool: 'read',
      call_id: 'c1',
      fingerprint: 'a'.repeat(64),
      target: 'f',
      landed: false,
      ts: Date.now(),
    };
    const post = (headers: Record<string, string>) =>
      app.inject({ method: 'POST', url: '/progress', payload: ev, headers });
    expect((await post({})).statusCode).toBe(401);
    expect((await post(admin)).statusCode).toBe(401);
    expect((await post({ authorization: `Bearer ${INGEST}` })).statusCode).toBe(202);
    expect((await post({ 'x-vigil-token': INGEST })).statusCode).toBe(202);
    await app.close();
    await v2.close();
  });

  it('channels: list without secrets, toggle, Send test alert reports the outcome', async () => {
    const { app } = await service();
    const list = (await app.inject({ method: 'GET', url: '/channels' })).json();
    expect(list).toEqual([expect.objectContaining({ name: 'desk', type: 'desktop', enabled: true })]);
    const t = await app.inject({ method: 'POST', url: '/channels/desk/test', headers: admin });
    expect(t.json()).toMatchObject({ outcome: 'failed', reason: '/nonexistent/notify-send not found on PATH' });
    const d = (await app.inject({ method: 'GET', url: '/deliveries' })).json();
    expect(d[0]).toMatchObject({ channel: 'desk', outcome: 'failed', test: true });
    const p = await app.inject({
      method: 'PATCH',
      url: '/channels/desk',
      headers: admin,
      payload: { min_severity: 'critical' },
    });
    expect(p.json()).toMatchObject({ min_severity: 'critical' });
    expect((await app.inject({ method: 'POST', url: '/channels/nope/test', headers: admin })).statusCode).toBe(404);
  });

  it('a directive ack must name the session the directive was issued for', async () => {
    const { app, v } = await service({ overlay: { modes: { mode: 'auto_recover' } } });
    await v.engine.check({ conversation: 'ses_kid', parent: 'ses_top' });
    await v.engine.verdicts([{ session_id: 'ses_kid', level: 'looping', reason: 'x', source: 'test' }]);
    const pending = (await app.inject({ method: 'GET', url: '/directives?session=ses_kid' })).json().directives;
    const abortKid = pending.find(
      (d: { type: string; session_id: string }) => d.type === 'abort' && d.session_id === 'ses_kid',
    );
    const ack = (session_id: string) =>
      app.inject({
        method: 'POST',
        url: '/directives/ack',
        payload: { acks: [{ id: abortKid.id, root_id: 'ses_top', session_id }] },
      });
    const forged = await ack('ses_other');
    expect(forged.statusCode).toBe(403);
    expect(forged.json().message).toContain(abortKid.id);
    expect((await v.engine.directives.pending('ses_top')).map((d) => d.id)).toContain(abortKid.id);
    expect((await ack('ses_kid')).json()).toEqual({ acknowledged: 1 });
  });

  it('refuses event times outside the sane window, naming the field', async () => {
    const { app, v } = await service();
    const future = await app.inject({
      method: 'POST',
      url: '/progress',
      payload: [event('ses_t', 1), event('ses_t', 2, { ts: Date.now() + 3_600_000 })],
    });
    expect(future.statusCode).toBe(400);
    expect(future.json().message).toMatch(/^body\[1\]\.ts: more than 300 s ahead/);
    const old = await app.inject({ method: 'POST', url: '/progress', payload: event('ses_t', 3, { ts: 0 }) });
    expect(old.json().message).toMatch(/^body\.ts: older than server\.max_event_age/);
    expect(await v.engine.sessionRows()).toEqual([]);
  });

  it('limits each client on the ingestion routes (429 with Retry-After)', async () => {
    const { app } = await service({ overlay: { server: { rate_limit: { max: 3, window: '1m' } } } });
    const codes = [];
    for (let i = 0; i < 5; i++)
      codes.push((await app.inject({ method: 'POST', url: '/progress', payload: event('ses_r', i) })).statusCode);
    expect(codes).toEqual([202, 202, 202, 429, 429]);
    const r = await app.inject({ method: 'POST', url: '/progress', payload: event('ses_r', 9) });
    expect(Number(r.headers['retry-after'])).toBeGreaterThan(0);
    // Reads are not limited.
    expect((await app.inject({ method: 'GET', url: '/sessions' })).statusCode).toBe(200);
  });

  it('an id of the longest accepted length works in every path (a tree can be resumed)', async () => {
    const { app, v } = await service();
    const id = `ses_${'x'.repeat(124)}`;
    expect((await app.inject({ method: 'POST', url: '/progress', payload: event(id, 1) })).statusCode).toBe(202);
    expect((await app.inject({ method: 'GET', url: `/trees/${id}` })).statusCode).toBe(200);
    expect((await app.inject({ method: 'GET', url: `/sessions/${id}/report` })).statusCode).toBe(200);
    // No body at all, as `curl -X POST` sends it.
    const r = await app.inject({ method: 'POST', url: `/trees/${id}/resume`, headers: admin });
    expect(r.statusCode).toBe(200);
    expect((await v.engine.treeState(id))?.stage).toBe(0);
  });

  it('caps tracked sessions: the least recently active beyond detection.max_sessions are forgotten, logged and counted', async () => {
    const clock = new FakeClock(Date.now());
    const { app, v } = await service({ clock, overlay: { detection: { max_sessions: 100, active_window: 0 } } });
    for (let i = 0; i < 105; i++) {
      clock.advance(61_000);
      const ev = event(`ses_cap${i}`, i, { ts: clock.now() });
      expect((await app.inject({ method: 'POST', url: '/progress', payload: ev })).statusCode).toBe(202);
    }
    const gone = await v.trimSessions();
    expect(gone.sort()).toEqual(['ses_cap0', 'ses_cap1', 'ses_cap2', 'ses_cap3', 'ses_cap4']);
    const rows = await v.engine.sessionRows(10_000);
    expect(rows).toHaveLength(100);
    expect(rows.some((r) => r.session === 'ses_cap0')).toBe(false);
    const text = (await app.inject({ method: 'GET', url: '/metrics/prometheus' })).body;
    expect(text).toContain('vigil_sessions_evicted_total 5');
  });

  it('gate over HTTP; the OpenAPI document is served', async () => {
    const { app } = await service();
    const g = await app.inject({ method: 'POST', url: '/gate', payload: { conversation: 'ses_g', model: 'a/b' } });
    expect(g.json()).toEqual({ action: 'allow', model_tripped: false });
    const doc = (await app.inject({ method: 'GET', url: '/openapi.json' })).json();
    expect(Object.keys(doc.paths)).toEqual(
      expect.arrayContaining(['/progress', '/requests', '/verdicts', '/gate', '/sessions', '/knobs']),
    );
  });
});

describe.runIf(withRedis)('service API on Redis', () => {
  it('a batch judges each call once: a resent batch only its new calls', () => batchOnce('redis'));

  it('with Redis, PATCHed knobs survive a restart', async () => {
    const prefix = testPrefix();
    try {
      const a = await service({ backend: 'redis', prefix });
      await a.app.inject({
        method: 'PATCH',
        url: '/knobs',
        headers: admin,
        payload: { modes: { mode: 'auto_compact' } },
      });
      const b = await service({ backend: 'redis', prefix });
      expect(b.v.knobs.get<{ mode: string }>('modes').mode).toBe('auto_compact');
    } finally {
      await flushPrefix(prefix);
    }
  });

  it('knobs and channel toggles changed on one instance reach the others on their tick; resets too', async () => {
    const prefix = testPrefix();
    try {
      const a = await service({ backend: 'redis', prefix });
      const b = await service({ backend: 'redis', prefix });
      await a.app.inject({
        method: 'PATCH',
        url: '/knobs',
        headers: admin,
        payload: { modes: { mode: 'auto_recover' } },
      });
      await a.app.inject({ method: 'PATCH', url: '/channels/desk', headers: admin, payload: { enabled: false } });
      expect(b.v.mode().type).toBe('warn');
      await b.v.tick();
      expect(b.v.mode().type).toBe('auto_recover');
      expect(b.v.notifier.channels()[0].enabled).toBe(false);
      expect((await b.app.inject({ method: 'GET', url: '/health' })).json().knobs).toContainEqual(
        expect.objectContaining({ path: 'modes.mode', source: 'runtime' }),
      );
      await b.app.inject({ method: 'DELETE', url: '/knobs', headers: admin });
      await b.app.inject({ method: 'POST', url: '/channels/desk/reset', headers: admin });
      await a.v.tick();
      expect(a.v.mode().type).toBe('warn');
      expect(a.v.notifier.channels()[0].enabled).toBe(true);
    } finally {
      await flushPrefix(prefix);
    }
  });
});
