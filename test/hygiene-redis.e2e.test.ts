import { afterAll, describe, expect, it } from 'vitest';
import { createRegistry } from '../builtins.ts';
import { keys } from '../core/store/keys.ts';
import type { Vigil } from '../core/vigil.ts';
import { call, HOUR, type HygieneInputList, P, SEC, turn } from '../detectors/session-hygiene/fixtures.ts';
import type { SessionHygieneDetector } from '../detectors/session-hygiene/hygiene.detector.ts';
import { type App, buildServer } from '../service/server.ts';
import { behaviour, eventually, flushPrefix, recordingPlugin, testPrefix, testVigil } from './helpers/index.ts';

// Session hygiene on Redis: two service instances sharing one Redis (states, envelopes
// and the timed index are JSON written compare-and-set), inputs alternating between
// them. They must agree with one process: thread B warns once at its 164k turn and
// retires once at its 206k turn; an empty generation recorded on one instance is
// refused by the other's gate; a restore stall is found by the other's tick.
// (Real Redis at VIGIL_TEST_REDIS_URL; it lives in the e2e tier.)

const MODEL = 'route/long-context-model';
const CURVE = [143_000, 164_000, 175_000, 180_000, 185_000, 206_000, 230_000];
const T0 = Date.parse('2026-08-22T08:00:00Z');
const prefixes: string[] = [];
const open: { v: Vigil; app: App }[] = [];

afterAll(async () => {
  for (const { v, app } of open) {
    await app.close();
    await v.close();
  }
  for (const p of prefixes) await flushPrefix(p);
});

async function pair(mode = 'warn', hygiene: Record<string, unknown> = {}) {
  const prefix = testPrefix();
  prefixes.push(prefix);
  const rec = behaviour();
  const one = async () => {
    const v = await testVigil({
      backend: 'redis',
      prefix,
      registry: createRegistry().register(recordingPlugin(rec)),
      channels: [{ name: 'rec', type: 'recording', min_severity: 'info', quiet_window: 0 }],
      // The post-mortem's timeline is replayed at its own dates.
      overlay: { modes: { mode }, hygiene, server: { max_event_age: '3650d' } },
    });
    const app = await buildServer(v);
    open.push({ v, app });
    return { v, app };
  };
  return { a: await one(), b: await one(), rec };
}

/** Inputs alternate between the two instances; returns the hygiene verdict changes in order. */
async function send(apps: App[], inputs: HygieneInputList, start = 0) {
  const out: string[] = [];
  let n = start;
  for (const i of inputs) {
    const app = apps[n++ % apps.length];
    const r =
      i.type === 'request'
        ? await app.inject({ method: 'POST', url: '/requests', payload: i.record })
        : await app.inject({ method: 'POST', url: '/progress', payload: i.event });
    expect(r.statusCode, r.body).toBe(202);
    for (const x of r.json().verdicts) if (x.detector === 'session-hygiene') out.push(`${x.from}->${x.to}`);
  }
  return out;
}

describe('session hygiene on Redis, two instances', () => {
  it('thread B: one warning at the 164k turn, one retire at the 206k turn, whichever instance judged', async () => {
    const { a, b, rec } = await pair();
    const sid = 'ses_threadB_redis';
    const perTurn: string[][] = [];
    for (const [i, x] of CURVE.entries()) {
      const t = turn(sid, MODEL, { perCall: x, calls: 5, resume: i > 0, at: T0 + i * 8 * HOUR }, 'router');
      perTurn.push(await send([a.app, b.app], t, i));
    }
    expect(perTurn).toEqual([[], ['ok->stalling'], [], [], [], ['stalling->looping'], []]);
    await eventually(() => rec.sent.filter((x) => x.dedup_key === `session-hygiene:${sid}`).length === 2);
    expect(await a.v.store.get(keys.incident(`session-hygiene:${sid}`))).toMatchObject({
      seq: 2,
      severity: 'critical',
    });
    // both read the same state and the same envelope
    const d = (v: Vigil) => v.detector<SessionHygieneDetector>('session-hygiene');
    expect((await d(a.v).state(sid))?.trend.map((e) => e.per_call)).toEqual(CURVE);
    expect(await d(b.v).envelopeRows()).toEqual(await d(a.v).envelopeRows());
    expect((await d(b.v).envelopeRows())[0]).toMatchObject({ model: MODEL, clean_calls: 35, effective: 234_000 });
  }, 60_000);

  it('an empty generation recorded on one instance is refused by the other; the sibling passes', async () => {
    const { a, b } = await pair('auto_recover');
    const at = Date.now() - 30 * SEC;
    const got = await send(
      [a.app],
      [
        P({ kind: 'prompt', session_id: 'ses_e', ts: at, call_id: 'msg_e', resume: false }),
        call('ses_e', MODEL, 60_000, at + SEC, 'router', { finish: 'tool' }),
        call('ses_e', MODEL, 61_000, at + 2 * SEC, 'router', { visible: false, finish: 'stop' }),
      ],
    );
    expect(got).toEqual(['ok->looping']);
    const gate = (conversation: string) =>
      b.app.inject({ method: 'POST', url: '/gate', payload: { conversation } }).then((r) => r.json());
    expect(await gate('ses_e')).toMatchObject({ action: 'refuse', status: 429 });
    expect(await gate('ses_sibling')).toMatchObject({ action: 'allow' });
    const ds = (await b.app.inject({ method: 'GET', url: '/directives?session=ses_e' })).json().directives;
    expect(ds.map((x: { type: string }) => x.type)).toContain('abort');
    // the flagged index: health and the panel list it on the other instance without reading every session
    const health = (await b.app.inject({ method: 'GET', url: '/health' })).json();
    expect(health.detectors['session-hygiene']).toMatchObject({ critical_sessions: ['ses_e'], sessions: 1 });
    const panels = (await b.app.inject({ method: 'GET', url: '/panels' })).json();
    const rows = panels.find((p: { detector: string; title: string }) => p.detector === 'session-hygiene').rows;
    expect(rows[0]).toMatchObject({ session: 'ses_e', level: 'critical', rule: 'empty_generation' });
  }, 60_000);

  it("a restore stall armed through one instance is found by the other's tick, once", async () => {
    const { a, b } = await pair('auto_recover', { first_token_timeout: '20s' });
    const t = Date.now();
    await send(
      [a.app],
      [
        P({ kind: 'prompt', session_id: 'ses_s', ts: t, call_id: 'msg_s', resume: true }),
        P({
          kind: 'session_stats',
          session_id: 'ses_s',
          ts: t + SEC,
          messages: 3_700,
          stored_bytes: 18_200_000,
          updated_at: t - HOUR,
          live: true,
        }),
      ],
    );
    expect(await b.v.engine.tick(t + 19_000)).toEqual([]);
    const fired = await b.v.engine.tick(t + 21_000);
    expect(fired.map((x) => [x.to, x.rule])).toEqual([['looping', 'restore_stall']]);
    expect(await a.v.engine.tick(t + 22_000)).toEqual([]);
  }, 60_000);
});
