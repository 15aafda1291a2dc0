import { describe, expect, it } from 'vitest';
import {
  type BreakerAction,
  decide,
  dict,
  evaluate,
  isPending,
  recordServed,
  recordStall,
  type Served,
  type Snapshot,
  type Stalls,
  sameComparison,
  type TripState,
} from './breaker.judge.ts';
import { type BreakerOptionsInput, BreakerOptionsSchema } from './breaker.options.ts';
import { fisherGreater } from './breaker.stats.ts';

const MIN = 60_000;
const T0 = Date.parse('2026-09-26T02:00:00Z');
const knobs = (o: BreakerOptionsInput = {}) => BreakerOptionsSchema.parse(o);
const K = knobs();

/** A snapshot: per model the sessions it served (all at `at`), and the stalled sessions. */
function snap(served: Record<string, string[]>, stalled: Record<string, string[]>, at = T0): Snapshot {
  const s: Snapshot = { served: dict<Served>(), stalls: dict() };
  for (const [m, ids] of Object.entries(served)) {
    s.served[m] = dict<number>();
    for (const id of ids) s.served[m][id] = at;
  }
  for (const [id, models] of Object.entries(stalled)) {
    s.stalls[id] = { level: 'stalling', first_at: at, at, source: 'test', reason: 'read x.ts x20', models };
  }
  return s;
}

const ids = (p: string, n: number) => Array.from({ length: n }, (_, i) => `${p}${i + 1}`);
const BAD = 'openrouter/z-ai/glm-5.3-flash';
const alerts = (a: BreakerAction[]) =>
  a.flatMap((x) => (x.type === 'alert' ? [`${x.alert.state}/${x.alert.severity}/${x.alert.dedup_key}`] : []));
const evidence = (a: BreakerAction[]) => a.flatMap((x) => (x.type === 'evidence' ? [x.evidence] : []));

describe('recordServed / recordStall', () => {
  it('keeps the window only, stamps the latest request, and stays bounded (newest kept)', () => {
    let s: Served | undefined;
    const k = knobs({ max_sessions: 10 });
    for (let i = 0; i < 15; i++) s = recordServed(s, `ses_${i}`, k, T0 + i * MIN);
    expect(Object.keys(s!).sort()).toEqual(
      ids('ses_', 10)
        .map((_, i) => `ses_${i + 5}`)
        .sort(),
    );
    s = recordServed(s, 'ses_14', k, T0 + 80 * MIN);
    expect(Object.keys(s!)).toEqual(['ses_14']); // the rest fell out of the 60m window
    expect(s!.ses_14).toBe(T0 + 80 * MIN);
  });

  it('takes any session id, even "__proto__"', () => {
    const s = recordServed(undefined, '__proto__', K, T0);
    expect(Object.keys(s)).toEqual(['__proto__']);
    expect(JSON.stringify(s)).toBe(`{"__proto__":${T0}}`);
  });

  it('a stall names each model once (fresh), keeps the worst level, prunes old marks', () => {
    const v = { level: 'stalling' as const, source: 'no-progress', reason: 'r' };
    let r = recordStall(undefined, 's1', { ...v, models: ['a'] }, K, T0);
    expect(r.fresh).toEqual(['a']);
    r = recordStall(r.stalls, 's1', { ...v, level: 'looping', models: ['a', 'b'] }, K, T0 + MIN);
    expect(r.fresh).toEqual(['b']);
    expect(r.stalls.s1).toMatchObject({ level: 'looping', first_at: T0, at: T0 + MIN, models: ['a', 'b'] });
    r = recordStall(r.stalls, 's1', { ...v, models: ['a'] }, K, T0 + 2 * MIN);
    expect(r.fresh).toEqual([]);
    expect(r.stalls.s1.level).toBe('looping');
    const later: Stalls = recordStall(r.stalls, 's2', { ...v, models: ['a'] }, K, T0 + 90 * MIN).stalls;
    expect(Object.keys(later)).toEqual(['s2']);
  });
});

describe('evaluate', () => {
  it('trips a model stalling 3 of 4 sessions while 8 sessions on others are healthy', () => {
    const e = evaluate(
      BAD,
      snap({ [BAD]: ids('b', 4), g1: ids('g', 4), g2: ids('h', 4) }, { b1: [BAD], b2: [BAD], b3: [BAD] }),
      undefined,
      K,
      T0,
    );
    expect(e.outcome).toBe('trip');
    expect(e.model_rate).toEqual({ stalled: 3, served: 4, rate: 0.75 });
    expect(e.others).toEqual({ models: ['g1', 'g2'], stalled: 0, served: 8, rate: 0 });
    expect(e.ratio).toBeNull(); // the others stalled none: infinitely above
    expect(e.p_value).toBeCloseTo(4 / 220, 12);
    expect(e.sessions.map((s) => s.session).sort()).toEqual(['b1', 'b2', 'b3']);
  });

  it('needs min_sessions distinct stalled sessions', () => {
    const e = evaluate(BAD, snap({ [BAD]: ids('b', 4), g1: ids('g', 8) }, { b1: [BAD], b2: [BAD] }), undefined, K, T0);
    expect(e).toMatchObject({ outcome: 'too_few_sessions', p_value: null });
  });

  it('makes no comparison without min_other_sessions on the other models, and says so', () => {
    const e = evaluate(
      BAD,
      snap({ [BAD]: ids('b', 3), g1: ids('g', 4) }, { b1: [BAD], b2: [BAD], b3: [BAD] }),
      undefined,
      K,
      T0,
    );
    expect(e).toMatchObject({ outcome: 'no_baseline', p_value: null, ratio: null });
    expect(e.note).toContain('no baseline');
    expect(e.note).toContain('min_other_sessions 5');
  });

  it('one hard task stalling on every model that served it blames none (shared sessions count in both rows)', () => {
    const served = {
      a: ['h1', 'h2', 'h3', ...ids('a', 3)],
      b: ['h1', 'h2', 'h3', ...ids('b', 3)],
      c: ['h1', 'h2', 'h3', ...ids('c', 3)],
    };
    const s = snap(served, { h1: ['a', 'b', 'c'], h2: ['a', 'b', 'c'], h3: ['a', 'b', 'c'] });
    for (const m of ['a', 'b', 'c']) {
      const e = evaluate(m, s, undefined, K, T0);
      expect(e.model_rate).toEqual({ stalled: 3, served: 6, rate: 0.5 });
      expect(e.others).toMatchObject({ stalled: 3, served: 9 });
      expect(e.ratio).toBeCloseTo(1.5, 12);
      expect(e.p_value).toBeCloseTo(fisherGreater(3, 6, 3, 9), 12);
      expect(e.outcome).toBe('ratio_too_low');
    }
  });

  it('a high ratio on thin evidence is not significant', () => {
    const e = evaluate(
      BAD,
      snap({ [BAD]: ids('b', 20), g: ids('g', 30) }, { b1: [BAD], b2: [BAD], b3: [BAD], g1: ['g'] }),
      undefined,
      K,
      T0,
    );
    expect(e.ratio).toBeCloseTo(0.15 / (1 / 30), 12);
    expect(e.p_value).toBeCloseTo(fisherGreater(3, 20, 1, 30), 12);
    expect(e.p_value).toBeGreaterThan(0.05);
    expect(e.outcome).toBe('not_significant');
  });

  it('does not reuse evidence from before the last release', () => {
    const s = snap({ [BAD]: ids('b', 4), g: ids('g', 8) }, { b1: [BAD], b2: [BAD], b3: [BAD] });
    const e = evaluate(BAD, s, T0 + 1, K, T0 + 10 * MIN);
    expect(e.model_rate).toEqual({ stalled: 0, served: 0, rate: 0 });
    expect(e.outcome).toBe('too_few_sessions');
  });

  it('ignores traffic and stalls older than the window', () => {
    const s = snap({ [BAD]: ids('b', 4), g: ids('g', 8) }, { b1: [BAD], b2: [BAD], b3: [BAD] });
    expect(evaluate(BAD, s, undefined, K, T0 + 61 * MIN).model_rate.stalled).toBe(0);
  });
});

describe('decide', () => {
  const tripping = snap({ [BAD]: ids('b', 4), g1: ids('g', 8) }, { b1: [BAD], b2: [BAD], b3: [BAD] });
  const stallAt = (now: number) =>
    snap({ [BAD]: ids('b', 4), g1: ids('g', 8) }, { b1: [BAD], b2: [BAD], b3: [BAD] }, now);

  it('trips once: one critical alert and one evidence record; later stalls while tripped do nothing', () => {
    const r = decide(BAD, undefined, { type: 'stall', snapshot: tripping }, K, T0);
    expect(r.state).toMatchObject({
      tripped: true,
      tripped_at: T0,
      until: T0 + 15 * MIN,
      cooldown_ms: 15 * MIN,
      level: 0,
      trips: 1,
    });
    expect(alerts(r.actions)).toEqual([`trigger/critical/breaker:${BAD}`]);
    const [ev] = evidence(r.actions);
    expect(ev).toMatchObject({ decision: 'tripped', id: `${BAD}#1`, cooldown_ms: 15 * MIN, backoff_level: 0 });
    const alert = r.actions.find((a) => a.type === 'alert');
    expect(alert?.type === 'alert' && alert.alert.details).toContain('Fisher exact one-sided p = 0.0182');
    const again = decide(BAD, r.state, { type: 'stall', snapshot: tripping }, K, T0 + MIN);
    expect(again.actions).toEqual([]);
    expect(again.state).toEqual(r.state);
  });

  it('releases at the end of the cooldown (lazily, dated at the end), with one resolve', () => {
    const t = decide(BAD, undefined, { type: 'stall', snapshot: tripping }, K, T0).state;
    expect(decide(BAD, t, { type: 'tick' }, K, T0 + 15 * MIN - 1).actions).toEqual([]);
    const r = decide(BAD, t, { type: 'tick' }, K, T0 + 40 * MIN);
    expect(r.state).toMatchObject({ tripped: false, released_at: T0 + 15 * MIN, released_by: 'cooldown' });
    expect(alerts(r.actions)).toEqual([`resolve/critical/breaker:${BAD}`]);
    expect(decide(BAD, r.state, { type: 'tick' }, K, T0 + 41 * MIN).actions).toEqual([]);
  });

  it('backs off: a re-trip within backoff_memory doubles the cooldown, up to max_cooldown; later it starts over', () => {
    const k = knobs({ cooldown: '15m', backoff: 2, max_cooldown: '1h', backoff_memory: '24h' });
    let now = T0;
    let s: TripState | undefined;
    const cooldowns: number[] = [];
    for (let i = 0; i < 4; i++) {
      s = decide(BAD, s, { type: 'stall', snapshot: stallAt(now) }, k, now).state;
      cooldowns.push(s.cooldown_ms!);
      now = s.until! + 5 * MIN; // released, then fresh stalls after the release
    }
    expect(cooldowns).toEqual([15 * MIN, 30 * MIN, 60 * MIN, 60 * MIN]);
    expect(s!.level).toBe(3);
    now += 25 * 60 * MIN;
    s = decide(BAD, s, { type: 'stall', snapshot: stallAt(now) }, k, now).state;
    expect(s).toMatchObject({ cooldown_ms: 15 * MIN, level: 0, trips: 5 });
  });

  it('Resume ends the skip now with a resolve; a resume of an untripped model does nothing', () => {
    const t = decide(BAD, undefined, { type: 'stall', snapshot: tripping }, K, T0).state;
    const r = decide(BAD, t, { type: 'resume', by: 'ops' }, K, T0 + MIN);
    expect(r.state).toMatchObject({ tripped: false, released_at: T0 + MIN, released_by: 'resume by ops', level: 0 });
    expect(alerts(r.actions)).toEqual([`resolve/critical/breaker:${BAD}`]);
    expect(decide(BAD, r.state, { type: 'resume', by: 'ops' }, K, T0 + 2 * MIN).actions).toEqual([]);
  });

  it('a comparison that holds the model back is recorded as evidence, without an alert', () => {
    const s = snap({ [BAD]: ids('b', 3), g: ids('g', 2) }, { b1: [BAD], b2: [BAD], b3: [BAD] });
    const r = decide(BAD, undefined, { type: 'stall', snapshot: s }, K, T0);
    expect(r.state.tripped).toBe(false);
    expect(alerts(r.actions)).toEqual([]);
    expect(evidence(r.actions)).toMatchObject([{ decision: 'held', outcome: 'no_baseline' }]);
    expect(r.state.last_check?.outcome).toBe('no_baseline');
  });

  it('below min_sessions: only the latest check is kept', () => {
    const s = snap({ [BAD]: ids('b', 3), g: ids('g', 9) }, { b1: [BAD] });
    const r = decide(BAD, undefined, { type: 'stall', snapshot: s }, K, T0);
    expect(r.actions).toEqual([]);
    expect(r.state.last_check?.outcome).toBe('too_few_sessions');
  });
});

describe('decide: a recheck of a held comparison', () => {
  const stalled = { b1: [BAD], b2: [BAD], b3: [BAD] };
  const thin = snap({ [BAD]: ids('b', 4), g: ids('g', 2) }, stalled);
  const more = snap({ [BAD]: ids('b', 4), g: ids('g', 4) }, stalled);
  const enough = snap({ [BAD]: ids('b', 4), g: ids('g', 5) }, stalled);

  it('outcomes that can still change while the stalls are in the window are pending', () => {
    expect(['no_baseline', 'ratio_too_low', 'not_significant'].every((o) => isPending(o as never))).toBe(true);
    expect(['trip', 'too_few_sessions', undefined].some((o) => isPending(o as never))).toBe(false);
  });

  it('trips when the baseline has arrived, marked as a recheck and why; once', () => {
    const held = decide(BAD, undefined, { type: 'stall', snapshot: thin }, K, T0);
    expect(held.outcome).toBe('no_baseline');
    const r = decide(BAD, held.state, { type: 'recheck', snapshot: enough, why: 'traffic' }, K, T0 + 5 * MIN);
    expect(r.outcome).toBe('trip');
    expect(alerts(r.actions)).toEqual([`trigger/critical/breaker:${BAD}`]);
    expect(evidence(r.actions)).toMatchObject([{ decision: 'tripped', recheck: 'traffic', others: { served: 5 } }]);
    const again = decide(BAD, r.state, { type: 'recheck', snapshot: enough, why: 'tick' }, K, T0 + 6 * MIN);
    expect(again).toEqual({ state: r.state, actions: [] });
  });

  it('still held for the same reason: the latest check is kept, no new evidence record', () => {
    const held = decide(BAD, undefined, { type: 'stall', snapshot: thin }, K, T0);
    const r = decide(BAD, held.state, { type: 'recheck', snapshot: more, why: 'tick' }, K, T0 + MIN);
    expect(r.outcome).toBe('no_baseline');
    expect(r.actions).toEqual([]);
    expect(r.state.last_check?.others.served).toBe(4);
    expect(sameComparison(held.state.last_check, r.state.last_check!)).toBe(false);
    expect(sameComparison(r.state.last_check, evaluate(BAD, more, undefined, K, T0 + 2 * MIN))).toBe(true);
  });

  it('held for another reason now: one held record, marked as a recheck', () => {
    const held = decide(BAD, undefined, { type: 'stall', snapshot: thin }, K, T0);
    const alike = snap({ [BAD]: ids('b', 4), g: ids('g', 6) }, { ...stalled, g1: ['g'], g2: ['g'], g3: ['g'] });
    const r = decide(BAD, held.state, { type: 'recheck', snapshot: alike, why: 'traffic' }, K, T0 + MIN);
    expect(r.outcome).toBe('ratio_too_low');
    expect(evidence(r.actions)).toMatchObject([{ decision: 'held', outcome: 'ratio_too_low', recheck: 'traffic' }]);
  });
});

describe('options', () => {
  it('defaults as in the spec, durations in ms, max_cooldown >= cooldown', () => {
    expect(K).toMatchObject({
      window: 60 * MIN,
      min_sessions: 3,
      min_ratio: 2,
      alpha: 0.05,
      cooldown: 15 * MIN,
      backoff: 2,
      max_cooldown: 24 * 60 * MIN,
    });
    expect(BreakerOptionsSchema.safeParse({ cooldown: '2h', max_cooldown: '1h' }).success).toBe(false);
    expect(BreakerOptionsSchema.safeParse({ alpah: 0.1 }).success).toBe(false);
  });
});
