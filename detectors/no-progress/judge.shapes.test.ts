import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { landing, request, said, tool, turn } from './fixtures/inputs.ts';
import {
  decodeState,
  encodeState,
  LEVELS,
  newSessionState,
  onProgress,
  onRequest,
  onRollup,
  rebase,
  type SessionState,
  Tracker,
  verdictOf,
} from './judge.ts';
import { defaultKnobs } from './knobs.ts';
import { buildReport } from './report.ts';

// The shapes of round three: runs of one call with one RESULT (events carrying result
// fingerprints), short cycles, monologues; and the session table's result tags.

const k = defaultKnobs();
const level = (s: SessionState) => LEVELS[s.level];

describe('identical runs with result fingerprints', () => {
  it('take a lookup with an unchanged result to stalling at 3 and looping at 4', () => {
    const s = newSessionState(k);
    for (let i = 0; i < 10; i++) turn(s, `work ${i}`, { result: `w${i}` });
    const levels: string[] = [];
    for (let i = 0; i < 6; i++) {
      turn(s, 'read a.js', { target: 'a.js', result: 'the same content' });
      levels.push(level(s));
    }
    expect(levels.indexOf('stalling')).toBe(k.result_lookup_run_warn - 1);
    expect(levels.indexOf('looping')).toBe(k.result_lookup_run_loop - 1);
    expect(verdictOf(s, k)).toMatchObject({ rule: 'identical_run', signals: { identical_results: true } });
    expect(verdictOf(s, k).reason).toMatch(/read a\.js x6 in a row, the same result each time$/);
  });

  it('take any other call to stalling at 5 and looping at 8', () => {
    const s = newSessionState(k);
    const levels: string[] = [];
    for (let i = 0; i < 10; i++) {
      turn(s, 'npm test', { tool: 'bash', target: 'npm test', exit: 1, result: 'FAIL the same' });
      levels.push(level(s));
    }
    expect(levels.indexOf('stalling')).toBe(k.result_run_warn - 1);
    expect(levels.indexOf('looping')).toBe(k.result_run_loop - 1);
  });

  it('break when the result changes: a poll whose output moves is not a run', () => {
    const s = newSessionState(k);
    for (let i = 0; i < 40; i++) turn(s, 'tail build.log', { tool: 'bash', result: `step ${i}` });
    const v = verdictOf(s, k);
    expect(v.level).toBe('ok');
    expect(v.signals).toMatchObject({ identical_run: 1, dup_share: 0, session_repeat: 1, top_count: 1 });
  });

  it('without result fingerprints, keep the call-and-exit thresholds', () => {
    const s = newSessionState(k);
    const levels: string[] = [];
    for (let i = 0; i < 10; i++) {
      turn(s, 'read a.js', { target: 'a.js' });
      levels.push(level(s));
    }
    expect(levels.indexOf('stalling')).toBe(k.lookup_run_warn - 1);
    expect(levels.indexOf('looping')).toBe(k.lookup_run_loop - 1);
    expect(verdictOf(s, k).signals.identical_results).toBe(false);
  });

  it('property: a poll whose result changes at least every few calls never reaches a run flag', () => {
    fc.assert(
      fc.property(
        fc.array(fc.integer({ min: 1, max: k.result_lookup_run_warn - 1 }), { minLength: 5, maxLength: 40 }),
        (stretches) => {
          const s = newSessionState(k);
          let r = 0;
          for (const n of stretches) {
            r++;
            for (let i = 0; i < n; i++) {
              turn(s, 'read status.json', { target: 'status.json', result: `state ${r}` });
              if (verdictOf(s, k).rule === 'identical_run') return false;
            }
          }
          return true;
        },
      ),
      { seed: 24, numRuns: 100 },
    );
  });
});

describe('repeats with result fingerprints', () => {
  it('count a call again only when its result did not change since its latest run (session table)', () => {
    const s = newSessionState(k);
    // the same call every 5th call: half the time with the result it had before
    for (let i = 0; i < 100; i++) {
      if (i % 5 === 0) turn(s, 'cat state.json', { tool: 'bash', result: `v${Math.floor(i / 10)}` });
      else turn(s, `other ${i}`, { result: `o${i}` });
    }
    // 20 calls, 10 distinct results in pairs: 1 + 10 unchanged repeats
    expect(verdictOf(s, k).signals.session_repeat).toBe(11);
  });

  it('count a duplicate in the window only with the same result', () => {
    const s = newSessionState(k);
    for (let i = 0; i < 30; i++) turn(s, i % 2 ? 'read a.js' : `x ${i}`, { result: i % 2 ? `a ${i}` : `x ${i}` });
    expect(verdictOf(s, k).signals).toMatchObject({ dup_share: 0, top_count: 1 });
    for (let i = 0; i < 10; i++) turn(s, i % 2 ? 'read a.js' : `y ${i}`, { result: i % 2 ? 'a fixed' : `y ${i}` });
    expect(verdictOf(s, k).signals.top_count).toBe(5);
  });

  it('keep the failure streak per call, whatever each failure said', () => {
    const s = newSessionState(k);
    for (let i = 0; i < 20; i++) turn(s, `w ${i}`, { result: `w${i}` });
    for (let i = 0; i < 5; i++) {
      turn(s, 'npm test', { tool: 'bash', exit: 1, result: `error ${i}` });
      turn(s, `look ${i}`, { result: `l${i}` });
    }
    expect(verdictOf(s, k)).toMatchObject({ rule: 'fail_streak', signals: { fail_streak: 5 } });
  });
});

describe('cycles', () => {
  const round = (s: SessionState, calls: string[], res = false) => {
    for (const c of calls) turn(s, c, res ? { result: `r ${c}` } : {});
  };

  it.each([2, 3, 4])('of period %i: stalling at cycle_warn rounds, looping at cycle_loop', (p) => {
    const s = newSessionState(k);
    for (let i = 0; i < 5; i++) turn(s, `warm ${i}`);
    const calls = Array.from({ length: p }, (_, i) => `step ${i}`);
    const levels: string[] = [];
    for (let r = 0; r < 8; r++) {
      round(s, calls);
      levels.push(level(s));
    }
    expect(levels.indexOf('stalling')).toBe(k.cycle_warn - 1);
    expect(levels.indexOf('looping')).toBe(k.cycle_loop - 1);
    const v = verdictOf(s, k);
    expect(v).toMatchObject({ rule: 'cycle', signals: { cycle_period: p, cycle_repeats: 8 } });
    expect(v.reason).toContain(`a cycle of ${p} calls (read step 0, read step 1`);
  });

  it('are not a single call repeated (that is an identical run), and break on another call', () => {
    const s = newSessionState(k);
    for (let i = 0; i < 12; i++) turn(s, 'poll', { tool: 'bash' });
    expect(verdictOf(s, k).signals.cycle_repeats).toBe(0);
    const t = newSessionState(k);
    round(t, ['a', 'b', 'a', 'b', 'a', 'b', 'c', 'a', 'b']);
    expect(verdictOf(t, k).signals).toMatchObject({ cycle_repeats: 0 });
  });

  it('with result fingerprints, need the same results each round', () => {
    const s = newSessionState(k);
    turn(s, 'edit a', { tool: 'edit', landed: true });
    for (let r = 0; r < 9; r++) {
      turn(s, 'sleep 30', { tool: 'bash', result: '' });
      turn(s, 'gh run view', { tool: 'bash', result: `status ${r}` });
    }
    expect(verdictOf(s, k)).toMatchObject({ level: 'ok', signals: { cycle_repeats: 0 } });
    for (let r = 0; r < 6; r++) round(s, ['sleep 30', 'gh run view'], true);
    expect(verdictOf(s, k)).toMatchObject({ level: 'looping', rule: 'cycle', signals: { cycle_period: 2 } });
  });

  it('end when something lands (a repeat landing too), at a compaction, and at a recovery', () => {
    const s = newSessionState(k);
    for (let r = 0; r < 3; r++) round(s, ['test', 'read']);
    expect(verdictOf(s, k).signals.cycle_repeats).toBe(3);
    turn(s, 'edit x', { tool: 'edit', landed: true });
    expect(verdictOf(s, k).signals.cycle_repeats).toBe(0);
    // edit and test, the edit landing each round (a repeat landing): no cycle
    for (let r = 0; r < 8; r++) {
      turn(s, 'edit x', { tool: 'edit', landed: true });
      turn(s, 'test', { tool: 'bash', exit: 1 });
    }
    expect(verdictOf(s, k).signals.cycle_repeats).toBe(0);
    for (let r = 0; r < 3; r++) round(s, ['a', 'b']);
    expect(verdictOf(s, k).signals.cycle_repeats).toBeGreaterThanOrEqual(3);
    onProgress(s, { kind: 'compaction_done', session_id: 's', landed: false, ts: 1 }, k);
    round(s, ['a', 'b']);
    expect(verdictOf(s, k).signals.cycle_repeats).toBe(0);
    for (let r = 0; r < 5; r++) round(s, ['a', 'b']);
    rebase(s, k, 5);
    expect(verdictOf(s, k).signals.cycle_repeats).toBe(0);
  });

  it('are named in the incident report', () => {
    const s = newSessionState(k);
    for (let r = 0; r < 6; r++) {
      turn(s, 'pytest', { tool: 'bash', target: 'pytest tests/x.py', exit: 1 });
      turn(s, 'read x', { target: 'src/x.py' });
    }
    const report = buildReport({ session_id: 's' }, s, k);
    expect(report).toContain('in a cycle: bash pytest tests/x.py, read src/x.py, 6 times round, nothing landed');
    expect(report).toContain('Avoid: going round the same few calls.');
  });
});

describe('monologues', () => {
  const say = (s: SessionState, text: string) => {
    onRequest(s, request('s'), k);
    return onProgress(s, said('s', text), k);
  };

  it('the same text with no tool call: stalling at monologue_warn, looping at monologue_loop', () => {
    const s = newSessionState(k);
    turn(s, 'edit a', { tool: 'edit', landed: true });
    const levels: string[] = [];
    for (let i = 0; i < 6; i++) {
      onProgress(s, { kind: 'continuation', session_id: 's', landed: false, ts: i }, k);
      say(s, 'All done.');
      levels.push(level(s));
    }
    expect(levels.indexOf('stalling')).toBe(k.monologue_warn - 1);
    expect(levels.indexOf('looping')).toBe(k.monologue_loop - 1);
    expect(verdictOf(s, k)).toMatchObject({ rule: 'monologue', signals: { monologue_run: 6 } });
    expect(verdictOf(s, k).reason).toMatch(/the same assistant text 6 times in a row, no tool call$/);
    expect(buildReport({ session_id: 's' }, s, k)).toContain('Avoid: answering with the same text again.');
  });

  it('ends at a tool call, another text, a landing in the tree, or a compaction', () => {
    const s = newSessionState(k);
    say(s, 'A');
    say(s, 'A');
    turn(s, 'look');
    say(s, 'A');
    expect(s.monoRun).toBe(1);
    say(s, 'B');
    expect(s.monoRun).toBe(1);
    say(s, 'B');
    onRollup(s, { landed: true, requests: 0, tools: 1, usd: 0, tokens: 0 }, k);
    say(s, 'B');
    expect(s.monoRun).toBe(1);
    say(s, 'B');
    onProgress(s, { kind: 'compaction_done', session_id: 's', landed: false, ts: 1 }, k);
    expect(s.monoRun).toBe(0);
  });

  it('ignores model steps without a text fingerprint (steps with tool calls, empty steps)', () => {
    const s = newSessionState(k);
    for (let i = 0; i < 3; i++) turn(s, `w${i}`);
    const before = encodeState(s);
    const { text_fingerprint: _, ...plain } = said('s', 'x', { ts: s.lastTs });
    onProgress(s, plain, k);
    expect(encodeState(s)).toEqual(before);
  });

  it('the Tracker rolls nothing up for a model step', () => {
    const t = new Tracker(k);
    t.applyProgress(tool('kid', 'a', { parent_session_id: 'p' }));
    for (let i = 0; i < 6; i++) t.applyProgress(said('kid', 'same', { parent_session_id: 'p' }));
    expect(t.verdict('kid')?.rule).toBe('monologue');
    expect(t.verdict('p')?.level).toBe('ok');
  });
});

describe('state encoding, version 5', () => {
  it('round-trips the result tags, the run result flag, the cycles, the monologue and the rhythm', () => {
    const t = new Tracker(k);
    for (let i = 0; i < 30; i++) t.applyProgress(tool('o', `own ${i % 7}`, { result: `r${i % 3}` }));
    t.applyProgress(landing('kid', 'a.js', { parent_session_id: 'o' }));
    for (let r = 0; r < 3; r++) for (const c of ['a', 'b', 'c']) t.applyProgress(tool('o', c, { result: c }));
    t.applyProgress(said('o', 'hello'));
    t.applyProgress(said('o', 'hello'));
    const s = t.state('o') as SessionState;
    expect(s).toMatchObject({ sawResult: true, monoRun: 2, ownGapMax: 30 });
    const back = decodeState(encodeState(s));
    for (const f of [
      'sawResult',
      'runRes',
      'per2',
      'per3',
      'per4',
      'monoRun',
      'monoHi',
      'monoLo',
      'ownGapMax',
      'childGapMax',
      'callsAtLand',
      'reqAtLand',
    ] as const)
      expect(back[f], f).toEqual(s[f]);
    expect(verdictOf(back, k)).toEqual(verdictOf(s, k));
    expect(encodeState(back)).toEqual(encodeState(s));
    // the tags: a repeat with the same result counts, after the round trip too
    onProgress(back, tool('o', 'own 0', { result: 'r0' }), k);
    onProgress(s, tool('o', 'own 0', { result: 'r0' }), k);
    expect(verdictOf(back, k).signals).toEqual(verdictOf(s, k).signals);
  });

  it('costs nothing for a session without result fingerprints, 2 bytes a used slot with them', () => {
    const a = newSessionState(k);
    const b = newSessionState(k);
    for (let i = 0; i < 100; i++) {
      onProgress(a, tool('a', `c${i % 50}`), k);
      onProgress(b, tool('b', `c${i % 50}`, { result: `r${i % 50}` }), k);
    }
    let used = 0;
    for (let i = 0; i < 64; i++) if (b.buf[b.fpBase + i * 6 + 2] & 0xffff) used++;
    expect(used).toBeGreaterThan(40);
    expect(encodeState(b).length - encodeState(a).length).toBe(2 * used);
    expect(encodeState(b).length).toBeLessThan(3_000);
  });
});
