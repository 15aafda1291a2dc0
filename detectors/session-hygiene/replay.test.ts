import { describe, expect, it } from 'vitest';
import { call, HOUR, type HygieneInputList, MIN, P, SEC, type Source, turn } from './fixtures.ts';
import { type HygieneChange, HygieneTracker, readout, report } from './judge.ts';
import { defaultHygieneOptions } from './options.ts';

// The long-lived session that died of bulk: per-call prompt tokens 143k, 164k, 175k,
// 180k, 185k, 206k, 230k over seven turns of several calls each, resumed between turns;
// the eighth turn at 246k per call got an empty generation, six retries of the same
// prefix over 43 minutes, and a terminal 400.

const MODEL = 'route/long-context-model';
const SID = 'ses_threadB';
const CURVE = [143_000, 164_000, 175_000, 180_000, 185_000, 206_000, 230_000];
const FATAL_TURN_AT = Date.parse('2026-08-22T20:57:00Z');
const FIRST_EMPTY_AT = Date.parse('2026-08-22T21:01:47Z');

interface Replay {
  inputs: HygieneInputList;
  /** Time each turn's last call ended it. */
  turnEnds: number[];
  deathAt: number;
}

/** The turns `gap` apart, ending with the fatal turn's start at 20:57. */
function replay(source: Source, perCall: readonly number[], gap: number, fatal: boolean): Replay {
  const inputs: HygieneInputList = [];
  const turnEnds: number[] = [];
  const start = FATAL_TURN_AT - perCall.length * gap;
  perCall.forEach((x, i) => {
    const at = start + i * gap;
    inputs.push(...turn(SID, MODEL, { perCall: x, calls: 5, resume: i > 0, at }, source));
    turnEnds.push(at + 5 * 20 * SEC);
  });
  if (!fatal) return { inputs, turnEnds, deathAt: Number.POSITIVE_INFINITY };
  // the fatal turn: a resume, four room captures (base64 images), three tool steps, then the empty generation
  const t = FATAL_TURN_AT;
  inputs.push(P({ kind: 'prompt', session_id: SID, ts: t, call_id: 'msg_fatal', resume: true }));
  const captures = [198_000, 197_000, 181_000, 180_000];
  for (const [i, bytes] of captures.entries()) {
    inputs.push(P({ kind: 'image', session_id: SID, ts: t + i * SEC, call_id: `prt_img${i}`, bytes }));
  }
  // each tool step appends its result, so the next call is larger; the empty one re-sends it all
  for (const [i, x] of [240_000, 242_000, 244_000].entries()) {
    inputs.push(call(SID, MODEL, x, t + (i + 1) * MIN, source, { finish: 'tool' }));
  }
  inputs.push(call(SID, MODEL, 246_000, FIRST_EMPTY_AT, source, { visible: false, finish: 'stop' }));
  // six retries of the identical prefix over 43 minutes: five more empties, then a 400
  for (let r = 1; r <= 6; r++) {
    const at = FIRST_EMPTY_AT + r * 7 * MIN + 10 * SEC;
    if (source === 'opencode') inputs.push(P({ kind: 'retry', session_id: SID, ts: at - SEC, attempt: r }));
    inputs.push(
      r < 6
        ? call(SID, MODEL, 246_000, at, source, { visible: false, finish: 'stop' })
        : call(SID, MODEL, 246_000, at, source, { status: 400, code: 'context_length_exceeded' }),
    );
  }
  const deathAt = FIRST_EMPTY_AT + 43 * MIN;
  return { inputs, turnEnds, deathAt };
}

function run(inputs: HygieneInputList): { tracker: HygieneTracker; changes: HygieneChange[] } {
  const tracker = new HygieneTracker(defaultHygieneOptions());
  const changes: HygieneChange[] = [];
  for (const i of inputs) changes.push(...tracker.apply(i));
  return { tracker, changes };
}

describe.each(['router', 'opencode'] as const)('thread B replay, calls reported by %s', (source) => {
  const r = replay(source, CURVE, 90 * MIN, true);
  const { tracker, changes } = run(r.inputs);
  const k = tracker.knobs;

  it('warns at the 164k turn, retires at the 206k turn, then fires the alarm on the first empty generation', () => {
    expect(changes.map((c) => [c.from, c.to, c.rule, c.action])).toEqual([
      ['ok', 'warning', 'watch_number', 'finish_question'],
      ['warning', 'critical', 'watch_number', 'retire'],
      ['critical', 'critical', 'empty_generation', 'abort_dispatch'],
    ]);
    expect(changes[0].at).toBe(r.turnEnds[1]);
    expect(changes[0].reason).toContain('watch number 164k prompt tokens per call');
    expect(changes[1].at).toBe(r.turnEnds[5]);
    expect(changes[1].reason).toContain('206k');
    expect(changes[2].at).toBe(FIRST_EMPTY_AT);
  });

  it('retires hours before the death point', () => {
    expect(changes[1].at).toBeLessThan(FATAL_TURN_AT);
    expect(r.deathAt - changes[1].at).toBeGreaterThan(2 * HOUR);
  });

  it('the retire verdict carries a brief made of measurements only', () => {
    const brief = changes[1].brief ?? '';
    expect(brief).toContain(`What died: session ${SID}.`);
    expect(brief).toContain('143k -> 164k -> 175k -> 180k -> 185k -> 206k');
    expect(brief).toContain('There is no continuity');
    expect(brief).toContain('Do not pretend otherwise');
    expect(brief).toMatch(/^[\x20-\x7e\n]+$/);
    expect(changes[0].brief).toBeUndefined();
    expect(changes[2].brief).toBeUndefined();
  });

  it('keeps the trend, the secondary tells under the verdict, and the terminal error with its code', () => {
    const s = tracker.state(SID)!;
    const ro = readout(s, k, tracker.book);
    expect(ro.trend.slice(0, 7)).toEqual(CURVE);
    if (source === 'opencode') {
      // opencode gave up on the call: the turn is over, and its number joins the trend
      expect(ro.trend).toHaveLength(8);
      expect(ro.watch_number).toBe(Math.round((240_000 + 242_000 + 244_000 + 7 * 246_000) / 10));
    } else {
      // the router cannot know the 400 was the last try: the turn stays open until the next prompt
      expect(ro.trend).toHaveLength(7);
      expect(ro.current_per_call).toBe(Math.round((240_000 + 242_000 + 244_000 + 7 * 246_000) / 10));
    }
    expect(ro.retries_this_turn).toBe(6);
    expect(ro.empty_this_turn).toBe(6);
    expect(ro.findings.map((f) => f.rule)).toEqual(
      expect.arrayContaining([
        'empty_generation',
        'watch_number',
        'retry_amplification',
        'envelope',
        'image_over_100k',
        'resume_count',
      ]),
    );
    expect(s.last_error).toMatchObject({ prompt_tokens: 246_000, image_bytes: 756_000 });
    expect(s.last_error?.code).toBe('context_length_exceeded');
    expect(ro.envelope).toMatchObject({ model: MODEL, failures: 1 });
    expect(ro.envelope?.effective).toBe(244_000);
    const text = report(s, k, tracker.book);
    expect(text).toContain('143k -> 164k -> 175k -> 180k -> 185k -> 206k -> 230k');
    expect(text).toMatch(/^[\x20-\x7e\n]+$/);
  });
});

describe.each(['router', 'opencode'] as const)('a healthy session at 40k per call, reported by %s', (source) => {
  const healthy = CURVE.map(() => 40_000);

  it('raises nothing', () => {
    // the same turns, a day's worth of resumes spread out (at most 3 in any 24 h)
    const { changes, tracker } = run(replay(source, [...healthy, 40_000], 8 * HOUR, false).inputs);
    expect(changes).toEqual([]);
    expect(readout(tracker.state(SID)!, tracker.knobs).trend).toEqual([...healthy, 40_000]);
  });

  it("on thread B's own timeline, only the resume-count tell (info), never the watch number", () => {
    const { changes } = run(replay(source, [...healthy, 40_000], 90 * MIN, false).inputs);
    expect(changes.map((c) => [c.to, c.rule])).toEqual([['info', 'resume_count']]);
    expect(changes[0].reason).toMatch(/^4 resumes in 24h/);
  });
});
