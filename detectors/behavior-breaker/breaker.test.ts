import { afterEach, describe, expect, it } from 'vitest';
import { createRegistry } from '../../builtins.ts';
import { FakeClock } from '../../core/clock.ts';
import type { Vigil } from '../../core/vigil.ts';
import { buildServer } from '../../service/server.ts';
import { generateBreakerBaseline } from '../../test/fixtures/calibration.ts';
import {
  type Behaviour,
  backends,
  behaviour,
  eventually,
  flushPrefix,
  recordingPlugin,
  testPrefix,
  testVigil,
} from '../../test/helpers/index.ts';
import type { BehaviorBreaker, BreakerView } from './breaker.detector.ts';

// Scenario tests of the behavior breaker through the real Vigil (engine, store, gate,
// notifier, HTTP), with a fake clock. Request records tell which model served which
// session; stall verdicts arrive as external (watchdog) verdicts so each step is exact.

const running: { v: Vigil; prefix?: string }[] = [];
afterEach(async () => {
  for (const r of running.splice(0)) {
    await r.v.close();
    if (r.prefix) await flushPrefix(r.prefix);
  }
});

const MIN = 60_000;
const TOKEN = 'breaker-test-token';
const BAD = 'openrouter/z-ai/glm-5.3-flash';
const SIBLING = 'openrouter/z-ai/glm-5.3'; // same provider, different model
const GOOD1 = 'anthropic/claude-sonnet-5';
const GOOD2 = 'openai/gpt-6';

async function setup(backend: 'memory' | 'redis', breaker: Record<string, unknown> = {}) {
  const clock = new FakeClock();
  const b = behaviour();
  const prefix = backend === 'redis' ? testPrefix() : undefined;
  const v = await testVigil({
    backend,
    prefix,
    clock,
    env: { VIGIL_ADMIN_TOKEN: TOKEN },
    registry: createRegistry().register(recordingPlugin(b)),
    channels: [
      {
        name: 'rec',
        type: 'recording',
        min_severity: 'info',
        quiet_window: 0,
        rate_limit: { max: 1000, window: '1h' },
      },
    ],
    // The breaker alone judges here: session hygiene would flag the large-prompt sessions
    // of the calibration's other models too (a stall the breaker counts, by design).
    overlay: { breaker, hygiene: { enabled: false } },
  });
  running.push({ v, prefix });
  return { v, clock, b };
}

let seq = 0;
const serve = (v: Vigil, clock: FakeClock, model: string, sessions: readonly string[]) =>
  v.engine.requests(
    sessions.map((s) => ({ session_id: s, request_id: `req_${++seq}`, model, prompt_tokens: 20_000, ts: clock.now() })),
  );
const stall = (v: Vigil, session: string, level: 'stalling' | 'looping' = 'stalling') =>
  v.engine.verdicts([
    { session_id: session, level, reason: `${level}: read navbar.js x61`, source: 'watchdog', agent: 'sisyphus' },
  ]);
const tripped = async (v: Vigil, model: string) =>
  (await v.engine.check({ conversation: 'ses_probe', model })).model_tripped;
const ids = (p: string, n: number) => Array.from({ length: n }, (_, i) => `${p}${i + 1}`);

/** The breaker's alert transitions, in delivery order. */
async function breakerAlerts(v: Vigil, b: Behaviour, expected: number): Promise<string[]> {
  await v.queue.idle();
  const mine = () => b.sent.filter((a) => a.source === 'behavior-breaker');
  await eventually(() => mine().length >= expected);
  return mine().map((a) => `${a.state}/${a.severity}/${a.dedup_key}`);
}

async function http(v: Vigil, method: 'GET' | 'POST', url: string, token?: string) {
  const app = await buildServer(v);
  try {
    return await app.inject({ method, url, headers: token ? { authorization: `Bearer ${token}` } : {} });
  } finally {
    await app.close();
  }
}
const view = async (v: Vigil) => (await http(v, 'GET', '/breaker')).json() as BreakerView;
const row = (w: BreakerView, model: string) => w.models.find((m) => m.model === model);

/** One episode: BAD serves 4 sessions and stalls 3 of them; GOOD1 and GOOD2 serve 4 healthy ones each. */
async function badRound(v: Vigil, clock: FakeClock, tag: string) {
  await serve(v, clock, BAD, ids(`${tag}_b`, 4));
  await serve(v, clock, GOOD1, ids(`${tag}_g`, 4));
  await serve(v, clock, GOOD2, ids(`${tag}_h`, 4));
  for (const s of ids(`${tag}_b`, 3)) await stall(v, s);
}

describe.each(backends())('behavior breaker (%s)', (backend) => {
  it('trips one model stalling across 3 sessions while the others are healthy: one critical alert, gate skips that model only', async () => {
    const { v, clock, b } = await setup(backend);
    await serve(v, clock, BAD, ids('b', 4));
    await serve(v, clock, GOOD1, ids('g', 4));
    await serve(v, clock, GOOD2, ids('h', 4));
    await serve(v, clock, SIBLING, ['s1']);
    await stall(v, 'b1');
    await stall(v, 'b2');
    expect(await tripped(v, BAD)).toBe(false);
    await stall(v, 'b3');
    expect(await tripped(v, BAD)).toBe(true);
    for (const m of [GOOD1, GOOD2, SIBLING, 'openrouter/z-ai/glm-5.3-flash:free'])
      expect(await tripped(v, m)).toBe(false);
    expect(await v.engine.check({ conversation: 'b9', model: BAD })).toMatchObject({
      action: 'allow',
      model_tripped: true,
    });

    // More verdicts on the tripped model (a new stall, an escalation) add no alert.
    await stall(v, 'b4');
    await stall(v, 'b1', 'looping');
    expect(await breakerAlerts(v, b, 1)).toEqual([`trigger/critical/breaker:${BAD}`]);
    const alert = b.sent.find((a) => a.source === 'behavior-breaker');
    expect(alert?.title).toBe(`model tripped: ${BAD}`);
    expect(alert?.summary).toContain('stalled 3 of 4 sessions');
    expect(alert?.details).toContain('Fisher exact one-sided p = 0.0140');

    const w = await view(v);
    expect(row(w, BAD)).toMatchObject({
      tripped: true,
      trips: 1,
      cooldown_ms: 15 * MIN,
      backoff_level: 0,
      stalled_sessions: 4,
    });
    expect(row(w, GOOD1)).toMatchObject({ tripped: false, served_sessions: 4, stalled_sessions: 0 });
    const trips = w.evidence;
    expect(trips.map((e) => e.decision)).toEqual(['tripped']);
    expect(trips[0]).toMatchObject({
      model: BAD,
      model_rate: { stalled: 3, served: 4, rate: 0.75 },
      others: { models: [GOOD1, GOOD2, SIBLING].sort(), stalled: 0, served: 9, rate: 0 },
      ratio: null,
      window_ms: 60 * MIN,
      cooldown_ms: 15 * MIN,
      outcome: 'trip',
    });
    expect(trips[0].p_value).toBeCloseTo(4 / 286, 12); // C(4,3)/C(13,3): 3 of 4 vs 0 of 9
    expect(trips[0].sessions.map((s) => s.session).sort()).toEqual(['b1', 'b2', 'b3']);
    expect(trips[0].sessions[0]).toMatchObject({
      level: 'stalling',
      source: 'watchdog',
      reason: 'stalling: read navbar.js x61',
    });
  });

  it('one hard task stalling on every model that tries it trips none', async () => {
    const { v, clock, b } = await setup(backend);
    const models = [BAD, GOOD1, GOOD2];
    // The hard task's sessions are served by every model (fallbacks, retries), and each
    // model also made one attempt of its own; each model has healthy traffic besides.
    for (const m of models) await serve(v, clock, m, ['hard1', 'hard2', 'hard3']);
    for (const [i, m] of models.entries()) {
      await serve(v, clock, m, ids(`ok${i}_`, 3));
      await serve(v, clock, m, [`attempt${i}`]);
    }
    for (const s of ['attempt0', 'attempt1', 'attempt2', 'hard1', 'hard2', 'hard3']) await stall(v, s, 'looping');
    for (const m of models) expect(await tripped(v, m)).toBe(false);
    const w = await view(v);
    for (const m of models)
      expect(row(w, m)).toMatchObject({ tripped: false, stalled_sessions: 4, served_sessions: 7 });
    // Each comparison was made and held the model back: rates alike, so not the model.
    expect(w.evidence).toEqual([]);
    expect(w.held).toHaveLength(6); // after hard2 and hard3, one per model
    for (const e of w.held) expect(e).toMatchObject({ decision: 'held', outcome: 'ratio_too_low' });
    expect(w.held.every((e) => e.ratio !== null && e.ratio < 2)).toBe(true);
    await v.queue.idle();
    expect(b.sent.filter((a) => a.source === 'behavior-breaker')).toEqual([]);
  });

  it('a model with little traffic and one stall does not trip', async () => {
    const { v, clock } = await setup(backend);
    await serve(v, clock, BAD, ['r1']);
    await serve(v, clock, GOOD1, ids('g', 10));
    await stall(v, 'r1', 'looping');
    expect(await tripped(v, BAD)).toBe(false);
    const w = await view(v);
    expect(row(w, BAD)?.last_check).toMatchObject({
      outcome: 'too_few_sessions',
      model_rate: { stalled: 1, served: 1, rate: 1 },
    });
    expect(w.evidence).toEqual([]);
    expect(w.held).toEqual([]);
  });

  it('without enough traffic on the other models the comparison is not made: no trip, and the evidence says so', async () => {
    const { v, clock } = await setup(backend);
    await serve(v, clock, BAD, ids('b', 3));
    await serve(v, clock, GOOD1, ids('g', 2));
    for (const s of ids('b', 3)) await stall(v, s);
    expect(await tripped(v, BAD)).toBe(false);
    const w = await view(v);
    expect(w.evidence).toEqual([]);
    expect(w.held).toHaveLength(1);
    expect(w.held[0]).toMatchObject({
      decision: 'held',
      outcome: 'no_baseline',
      p_value: null,
      others: { served: 2 },
    });
    expect(w.held[0].note).toContain('no baseline to compare with, not tripped');
  });

  it('cooldown, then a re-trip within the backoff memory doubles it; a trip a day later starts over', async () => {
    const { v, clock, b } = await setup(backend);
    await badRound(v, clock, 'r1');
    expect(row(await view(v), BAD)).toMatchObject({ tripped: true, cooldown_ms: 15 * MIN, backoff_level: 0 });
    clock.advance(14 * MIN);
    expect(await tripped(v, BAD)).toBe(true);
    clock.advance(2 * MIN);
    expect(await tripped(v, BAD)).toBe(false);
    expect(row(await view(v), BAD)).toMatchObject({
      tripped: false,
      released_by: 'cooldown',
      released_at: clock.now() - MIN,
    });

    // Fresh evidence after the release: the second trip is skipped twice as long.
    await badRound(v, clock, 'r2');
    expect(row(await view(v), BAD)).toMatchObject({ tripped: true, cooldown_ms: 30 * MIN, backoff_level: 1, trips: 2 });
    clock.advance(29 * MIN);
    expect(await tripped(v, BAD)).toBe(true);
    clock.advance(2 * MIN);
    expect(await tripped(v, BAD)).toBe(false);

    // Beyond backoff_memory (24h) the cooldown starts again at 15m.
    clock.advance(25 * 60 * MIN);
    await badRound(v, clock, 'r3');
    expect(row(await view(v), BAD)).toMatchObject({ tripped: true, cooldown_ms: 15 * MIN, backoff_level: 0, trips: 3 });

    const k = `breaker:${BAD}`;
    expect(await breakerAlerts(v, b, 5)).toEqual([
      `trigger/critical/${k}`,
      `resolve/critical/${k}`,
      `trigger/critical/${k}`,
      `resolve/critical/${k}`,
      `trigger/critical/${k}`,
    ]);
  });

  it('the stalls behind a trip are not reused: after the cooldown one more stall does not re-trip', async () => {
    const { v, clock } = await setup(backend);
    await badRound(v, clock, 'r1');
    clock.advance(16 * MIN);
    expect(await tripped(v, BAD)).toBe(false);
    await serve(v, clock, BAD, ['late1']);
    await stall(v, 'late1');
    expect(await tripped(v, BAD)).toBe(false);
    expect(row(await view(v), BAD)?.last_check).toMatchObject({
      outcome: 'too_few_sessions',
      model_rate: { stalled: 1 },
    });
  });

  it('admin Resume clears the trip at once (with the resolve alert); it needs the admin token', async () => {
    const { v, clock, b } = await setup(backend);
    await badRound(v, clock, 'r1');
    expect(await tripped(v, BAD)).toBe(true);
    const url = `/breaker/${encodeURIComponent(BAD)}/resume`;
    expect((await http(v, 'POST', url)).statusCode).toBe(401);
    expect(await tripped(v, BAD)).toBe(true);
    const r = await http(v, 'POST', url, TOKEN);
    expect(r.statusCode).toBe(200);
    expect(r.json()).toMatchObject({
      resumed: true,
      model: { model: BAD, tripped: false, released_by: 'resume by admin' },
    });
    expect(await tripped(v, BAD)).toBe(false);
    expect(await v.engine.check({ conversation: 'x', model: BAD })).toMatchObject({ model_tripped: false });
    expect(await breakerAlerts(v, b, 2)).toEqual([
      `trigger/critical/breaker:${BAD}`,
      `resolve/critical/breaker:${BAD}`,
    ]);
    // Resuming again is a no-op; a model never judged is a 404.
    expect((await http(v, 'POST', url, TOKEN)).json()).toMatchObject({ resumed: false });
    expect((await http(v, 'POST', `/breaker/${encodeURIComponent('nobody/none')}/resume`, TOKEN)).statusCode).toBe(404);
  });

  it('stalls before the others have a baseline: trips once the other models have served enough sessions (the new traffic), one alert', async () => {
    const { v, clock, b } = await setup(backend);
    await serve(v, clock, BAD, ids('b', 4));
    await serve(v, clock, GOOD1, ids('g', 2));
    for (const s of ids('b', 3)) {
      clock.advance(MIN);
      await stall(v, s);
    }
    expect(await tripped(v, BAD)).toBe(false);
    expect(row(await view(v), BAD)?.last_check).toMatchObject({ outcome: 'no_baseline', others: { served: 2 } });
    // the other models' sessions arrive minutes later, one at a time
    const later = [
      [GOOD2, 'h1'],
      [GOOD1, 'g3'],
      [GOOD2, 'h2'],
    ] as const;
    for (const [i, [m, s]] of later.entries()) {
      clock.advance(4 * MIN);
      expect(await tripped(v, BAD)).toBe(false);
      await serve(v, clock, m, [s]);
      // 2 + 3 sessions: min_other_sessions (5) reached with the third
      expect(await tripped(v, BAD)).toBe(i === 2);
    }
    // more traffic, ticks and time add nothing
    for (let i = 0; i < 3; i++) {
      clock.advance(MIN);
      await serve(v, clock, GOOD1, [`g${10 + i}`]);
      await v.engine.tick();
    }
    expect(await breakerAlerts(v, b, 1)).toEqual([`trigger/critical/breaker:${BAD}`]);
    const w = await view(v);
    expect(w.evidence).toHaveLength(1);
    expect(w.evidence[0]).toMatchObject({
      decision: 'tripped',
      recheck: 'traffic',
      model_rate: { stalled: 3, served: 4 },
      others: { stalled: 0, served: 5 },
    });
    expect(w.held.map((e) => e.outcome)).toEqual(['no_baseline']);
    for (const m of [GOOD1, GOOD2]) expect(await tripped(v, m)).toBe(false);
  });

  it('held by the others stalling too: a tick trips it once their stalls leave the window, one alert', async () => {
    const { v, clock, b } = await setup(backend);
    // the others: 12 sessions, 4 of them stalled at the start (2 per model: neither can trip)
    await serve(v, clock, GOOD1, ids('g', 6));
    await serve(v, clock, GOOD2, ids('h', 6));
    for (const s of ['g1', 'g2', 'h1', 'h2']) await stall(v, s);
    clock.advance(30 * MIN);
    await serve(v, clock, BAD, ids('b', 4));
    for (const s of ids('b', 3)) await stall(v, s);
    // 3 of 4 vs 4 of 12: the ratio passes, the test does not
    expect(row(await view(v), BAD)?.last_check).toMatchObject({ outcome: 'not_significant' });
    // the others keep serving the same sessions: no new session, so no traffic recheck
    clock.advance(10 * MIN);
    await serve(v, clock, GOOD1, ids('g', 6));
    await serve(v, clock, GOOD2, ids('h', 6));
    clock.advance(19 * MIN); // 59 minutes: the others' stalls still count
    await v.engine.tick();
    expect(await tripped(v, BAD)).toBe(false);
    clock.advance(2 * MIN);
    expect(await tripped(v, BAD)).toBe(false);
    await v.engine.tick();
    expect(await tripped(v, BAD)).toBe(true);
    clock.advance(2 * MIN);
    await v.engine.tick();
    expect(await breakerAlerts(v, b, 1)).toEqual([`trigger/critical/breaker:${BAD}`]);
    const w = await view(v);
    expect(w.evidence[0]).toMatchObject({
      recheck: 'tick',
      model_rate: { stalled: 3, served: 4 },
      others: { stalled: 0, served: 12 },
    });
    for (const m of [GOOD1, GOOD2]) expect(await tripped(v, m)).toBe(false);
  });

  it('the calibration case: the real judge flags three loops of one model early; it trips when the baseline arrives, one alert', async () => {
    const cal = generateBreakerBaseline();
    const { v, clock, b } = await setup(backend);
    const breaker = v.detector<BehaviorBreaker>('behavior-breaker');
    let trippedBy: string | undefined;
    for (const i of cal.inputs) {
      const ts = i.type === 'progress' ? i.event.ts : i.type === 'request' ? i.record.ts : 0;
      clock.set(Math.max(clock.now(), ts));
      if (i.type === 'progress') await v.engine.progress([i.event]);
      else if (i.type === 'request') await v.engine.requests([i.record]);
      if (trippedBy === undefined && (await breaker.isTripped(cal.model))) {
        trippedBy = i.type === 'request' ? i.record.session_id : 'not a request';
      }
    }
    expect(trippedBy).toBe(cal.baseline);
    for (const m of cal.others) expect(await breaker.isTripped(m)).toBe(false);
    expect(await breakerAlerts(v, b, 1)).toEqual([`trigger/critical/breaker:${cal.model}`]);
    expect((await view(v)).evidence[0]).toMatchObject({
      recheck: 'traffic',
      model_rate: { stalled: 3, served: 4 },
      others: { stalled: 0, served: 5 },
    });
  }, 60_000);

  it('re-evaluates only within the window: stalls that aged out before the baseline arrived trip nothing', async () => {
    const { v, clock, b } = await setup(backend);
    await serve(v, clock, BAD, ids('b', 4));
    for (const s of ids('b', 3)) await stall(v, s);
    clock.advance(61 * MIN);
    await v.engine.tick();
    await serve(v, clock, GOOD1, ids('g', 6));
    await v.engine.tick();
    expect(await tripped(v, BAD)).toBe(false);
    await v.queue.idle();
    expect(b.sent.filter((a) => a.source === 'behavior-breaker')).toEqual([]);
  });

  it('recheck_interval 0: only a new stall compares, so the late baseline trips nothing', async () => {
    const { v, clock } = await setup(backend, { recheck_interval: 0 });
    await serve(v, clock, BAD, ids('b', 4));
    for (const s of ids('b', 3)) await stall(v, s);
    clock.advance(5 * MIN);
    await serve(v, clock, GOOD1, ids('g', 6));
    await v.engine.tick();
    expect(await tripped(v, BAD)).toBe(false);
    expect(row(await view(v), BAD)?.last_check).toMatchObject({ outcome: 'no_baseline' });
  });

  it('documents its routes in the OpenAPI document', async () => {
    const { v } = await setup(backend);
    const doc = (await http(v, 'GET', '/openapi.json')).json();
    expect(Object.keys(doc.paths)).toEqual(expect.arrayContaining(['/breaker', '/breaker/{model}/resume']));
  });

  it('the knobs are live: with the breaker disabled nothing trips and nothing is skipped', async () => {
    const { v, clock } = await setup(backend);
    await badRound(v, clock, 'r1');
    expect(await tripped(v, BAD)).toBe(true);
    await v.knobs.patch({ breaker: { enabled: false } });
    expect(await tripped(v, BAD)).toBe(false);
    await badRound(v, clock, 'r2');
    expect(await tripped(v, GOOD1)).toBe(false);
    await v.knobs.patch({ breaker: { enabled: true, min_sessions: 5 } });
    expect(v.knobs.get<{ min_sessions: number; window: number }>('breaker')).toMatchObject({
      min_sessions: 5,
      window: 60 * MIN,
    });
  });
});
