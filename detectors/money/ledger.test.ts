import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { amount, budgetLine, standing } from './budget.ts';
import { dayOf, dayStart, lastDays, nextDayAt } from './day.ts';
import {
  addSpend,
  decodeSpend,
  encodeSpend,
  flag,
  landed,
  median,
  newSessionSpend,
  pack,
  restart,
  type SpendInput,
  type Stretch,
  stretchOf,
  summarize,
  unpack,
} from './ledger.ts';

// The pure parts: how inputs move a session's spend, what a stretch records, the
// compact form, the summary, the budget standings and the days.

const T = Date.parse('2026-09-26T10:00:00Z');
const req = (ts: number, usd = 0.01, tokens = 1000): SpendInput => ({
  kind: 'request',
  calls: 1,
  tokens,
  usd,
  ts,
  model: 'p/m',
  agent: 'build',
});

describe('a session s spend', () => {
  it('counts model calls once: request records, else a sensor s events, else tool calls', () => {
    const s = newSessionSpend(T);
    expect(addSpend(s, { ...req(T), kind: 'tool', tokens: 0, usd: 0 })).toEqual({ c: 1, k: 0, u: 0 });
    expect(addSpend(s, { ...req(T), kind: 'assistant', usd: 0 })).toEqual({ c: 1, k: 1000, u: 0 });
    // It reports model calls now: its tool calls are not calls.
    expect(addSpend(s, { ...req(T), kind: 'tool', tokens: 0, usd: 0 })).toEqual({ c: 0, k: 0, u: 0 });
    expect(addSpend(s, req(T + 1))).toEqual({ c: 1, k: 1000, u: 0.01 });
    // A router reports it: the sensor's events are the same calls.
    expect(addSpend(s, { ...req(T), kind: 'assistant', usd: 0 })).toEqual({ c: 0, k: 0, u: 0 });
    expect(s).toMatchObject({ c: 3, k: 2000, u: 0.01, ts: T + 1, req: 1, mc: 1 });
    // Stored packed, and read back the same.
    expect(decodeSpend(JSON.parse(JSON.stringify(encodeSpend(s))))).toEqual(s);
  });

  it('a landing is progress unless it lands the same call again', () => {
    const s = newSessionSpend(T);
    expect(landed(s, 'a'.repeat(64), T)).toBe(true);
    expect(landed(s, 'a'.repeat(64), T + 1)).toBe(false);
    expect(landed(s, 'b'.repeat(64), T + 2)).toBe(true);
  });

  it('a stretch: the spend to the flag, then to the action; a close starts afresh', () => {
    const s = newSessionSpend(T);
    for (let i = 1; i <= 3; i++) addSpend(s, req(T + i * 60_000));
    expect(flag(s, 'no-progress', 'top_repeat', 'stalling', 'auto_recover', { root: 'r', agent: 'build' })).toBe(true);
    expect(flag(s, 'no-progress', 'top_repeat', 'looping', 'auto_recover', { root: 'r' })).toBe(false);
    for (let i = 4; i <= 6; i++) addSpend(s, req(T + i * 60_000, 0.02));
    // Packed with its flag; dollars kept to the nano-dollar.
    const back = decodeSpend(JSON.parse(JSON.stringify(encodeSpend(s))))!;
    expect(back).toMatchObject({ ...s, u: back.u, f: { ...s.f, u: back.f?.u } });
    expect(back.u).toBeCloseTo(s.u, 9);
    const x = stretchOf('ses', s, 'acted', T + 6 * 60_000)!;
    expect(x).toMatchObject({
      root: 'r',
      agent: 'build',
      model: 'p/m',
      level: 'looping',
      calls: 6,
      usd: 0.09,
      minutes: 6,
      to_flag: { calls: 3, usd: 0.03, minutes: 3 },
      to_action: { calls: 6, usd: 0.09, minutes: 6 },
    });
    expect(stretchOf('ses', s, 'ended', T)?.to_action).toBeNull();
    restart(s, T + 6 * 60_000);
    expect(s).toMatchObject({ c: 0, k: 0, u: 0, t0: T + 6 * 60_000 });
    expect(s.f).toBeUndefined();
  });
});

const stretchArb: fc.Arbitrary<Stretch> = fc
  .record({
    session: fc.string({ minLength: 1, maxLength: 40 }),
    root: fc.string({ minLength: 1, maxLength: 40 }),
    agent: fc.option(fc.string({ maxLength: 20 }), { nil: null }),
    model: fc.option(fc.string({ maxLength: 40 }), { nil: null }),
    rule: fc.option(fc.constantFrom('duplicates', 'top_repeat'), { nil: null }),
    level: fc.constantFrom('stalling' as const, 'looping' as const),
    outcome: fc.constantFrom('acted' as const, 'budget' as const, 'recovered' as const, 'ended' as const),
    // Whole seconds: the compact form keeps times to the second after the start.
    start: fc.integer({ min: 0, max: 2 ** 42 }),
    flagAfter: fc.integer({ min: 0, max: 10 ** 5 }).map((s) => s * 1000),
    closeAfter: fc.integer({ min: 0, max: 10 ** 5 }).map((s) => s * 1000),
    fc_: fc.nat(1000),
    more: fc.nat(1000),
    tokens: fc.nat(10 ** 9),
    cents: fc.nat(10 ** 6),
  })
  .map((r) => {
    const t = { calls: r.fc_, tokens: Math.floor(r.tokens / 2), usd: r.cents / 200 };
    const all = { calls: r.fc_ + r.more, tokens: r.tokens, usd: r.cents / 100 };
    const m = (ms: number) => Math.round(ms / 6_000) / 10;
    const flagged = r.start + r.flagAfter;
    const closed = flagged + r.closeAfter;
    const acted = r.outcome === 'acted' || r.outcome === 'budget';
    return {
      session: r.session,
      root: r.root,
      agent: r.agent,
      model: r.model,
      detector: 'no-progress',
      rule: r.rule,
      level: r.level,
      mode: 'warn',
      outcome: r.outcome,
      start: r.start,
      flagged_at: flagged,
      closed_at: closed,
      ...all,
      minutes: m(closed - r.start),
      to_flag: { ...t, minutes: m(r.flagAfter) },
      to_action: acted ? { ...all, minutes: m(closed - r.start) } : null,
    };
  });

describe('the compact record', () => {
  it('unpacks what it packed, through JSON', () => {
    fc.assert(
      fc.property(stretchArb, (x) => {
        expect(unpack(JSON.parse(JSON.stringify(pack(x))))).toEqual(x);
      }),
    );
  });

  it('never throws on anything else (a record of a later version is skipped)', () => {
    fc.assert(fc.property(fc.jsonValue(), (v) => void unpack(v)));
    expect(unpack([2, 'x'])).toBeUndefined();
  });

  it('is small: a typical stretch is under 240 bytes of JSON', () => {
    const x = fc.sample(stretchArb, 1)[0];
    const typical = pack({
      ...x,
      session: 'ses_2a6b1f3e8ffeR0k9y2hQm1VxZb',
      root: 'ses_2a6b1f3e8ffeR0k9y2hQm1VxZa',
      agent: 'sisyphus-junior',
      model: 'openrouter/z-ai/glm-5.3-flash',
      rule: 'session_repeat',
      start: T,
      flagged_at: T + 3_600_000,
      closed_at: T + 5_400_000,
      calls: 312,
      tokens: 98_765_432,
      usd: 3.891234,
      to_flag: { calls: 118, tokens: 12_345_678, usd: 0.391234, minutes: 60 },
    });
    expect(JSON.stringify(typical).length).toBeLessThan(240);
  });
});

describe('the summary', () => {
  it('counts, sums and takes medians', () => {
    const xs = fc.sample(stretchArb, 5);
    const s = summarize(xs);
    expect(s.loops).toBe(5);
    expect(s.before_action.calls).toBe(xs.reduce((a, x) => a + x.calls, 0));
    expect(s.median_calls_to_flag).toBe(median(xs.map((x) => x.to_flag.calls)));
    expect(median([3, 1, 2, 10])).toBe(2.5);
    expect(median([])).toBeNull();
    expect(Object.values(s.by_outcome).reduce((a, n) => a + n, 0)).toBe(5);
  });
});

describe('budget standings', () => {
  const c = { usd: 5, prompt_tokens: 1_000_000 };
  it('the larger share of the ceilings decides; warn_at warns, the ceiling is over', () => {
    expect(standing({ usd: 1, tokens: 100 }, c, 0.8)).toMatchObject({ level: 'ok', by: 'usd', share: 0.2 });
    expect(standing({ usd: 1, tokens: 850_000 }, c, 0.8)).toMatchObject({ level: 'warning', by: 'prompt_tokens' });
    const over = standing({ usd: 5, tokens: 0 }, c, 0.8);
    expect(over.level).toBe('over');
    expect(amount(over)).toBe('$5.00 of $5.00 (100%)');
    expect(standing({ usd: 99, tokens: 99 }, { usd: null, prompt_tokens: null }, 0.8).level).toBe('ok');
    expect(budgetLine({ kind: 'agent', id: 'build' }, over, '2026-09-26')).toBe(
      'budget: agent build over its ceiling on 2026-09-26: $5.00 of $5.00 (100%)',
    );
  });
});

describe('days in a time zone', () => {
  it('the day key and the next day s start, across a DST change', () => {
    expect(dayOf(Date.parse('2026-09-26T23:30:00Z'), 'UTC')).toBe('2026-09-26');
    expect(dayOf(Date.parse('2026-09-26T23:30:00Z'), 'Europe/Berlin')).toBe('2026-09-27');
    expect(new Date(nextDayAt(Date.parse('2026-09-26T23:30:00Z'), 'Europe/Berlin')).toISOString()).toBe(
      '2026-09-27T22:00:00.000Z',
    );
    // 25 October 2026: Berlin leaves summer time; that day has 25 hours.
    expect(new Date(nextDayAt(Date.parse('2026-10-25T12:00:00Z'), 'Europe/Berlin')).toISOString()).toBe(
      '2026-10-25T23:00:00.000Z',
    );
    expect(lastDays(Date.parse('2026-09-26T10:00:00Z'), 3, 'UTC')).toEqual(['2026-09-24', '2026-09-25', '2026-09-26']);
  });

  it('every instant falls on the day that starts at or before it and ends after it', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: Date.parse('2000-01-01'), max: Date.parse('2090-01-01') }),
        fc.constantFrom('UTC', 'Europe/Berlin', 'America/New_York', 'Asia/Kolkata', 'Pacific/Chatham'),
        (t, tz) => {
          const d = dayOf(t, tz);
          const start = dayStart(d, tz);
          expect(start).toBeLessThanOrEqual(t);
          expect(nextDayAt(t, tz)).toBeGreaterThan(t);
          expect(dayOf(start, tz)).toBe(d);
        },
      ),
      { numRuns: 300 },
    );
  });
});
