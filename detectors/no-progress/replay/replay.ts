import { z } from 'zod';
import type { InputIssue, InputReader, InputSessionInfo, LoadedInput } from '../../../core/replay.ts';
import type { VerdictLevel } from '../../../core/wire.ts';
import { type JudgeInput, LEVELS, Tracker, verdictOf } from '../judge.ts';
import { type NoProgressKnobs, NoProgressKnobsSchema } from '../knobs.ts';
import { eachInput } from './inputs.ts';

// `vigil replay INPUT`: run the no-progress judge (the same code as the service and the
// watchdog) over recorded history and report, per session, the verdict timeline and
// the worst verdict reached. With `--labels FILE --sweep` it replays a grid of
// thresholds against labelled sessions to pick knobs (Phase 0 calibration). The
// command's presentation is cli/replay.ts.
//
// Streaming: inputs are judged as they are read (inputs.ts `eachInput`) and dropped;
// a sweep runs every knob set side by side in the same pass. What is kept is per
// session, so a JSONL file of any size replays in bounded memory.
//
// Counting: a session's `events` are its progress events (tool calls and continuation /
// compaction markers; request records are replayed but not counted), and
// `first_flagged_at` is the 0-based index of the last of its progress events applied
// when its verdict first left `ok` (0 when flagged before any; a parent flagged through
// a child's roll-up gets the index of its own latest event).

export interface TimelineEntry {
  index: number;
  ts: number;
  from: VerdictLevel;
  to: VerdictLevel;
  reason: string;
}

export interface SessionResult {
  session: string;
  agent: string | null;
  parent: string | null;
  events: number;
  /** the worst verdict reached */
  verdict: VerdictLevel;
  first_flagged_at: number | null;
  /** why the worst verdict was first reached (ok: the final state) */
  reason: string;
  timeline: TimelineEntry[];
}

export interface ReplayResult {
  kind: LoadedInput['kind'];
  inputs: number;
  /** rejected input records, all counted */
  rejected: number;
  /** the first of them (each was reported through onIssue as it was found) */
  issues: InputIssue[];
  sessions: SessionResult[];
}

export interface ReplayOptions {
  knobs?: NoProgressKnobs;
  /** Readers of the formats other than JSONL (core/replay.ts), asked in order. */
  readers?: readonly InputReader[];
  onIssue?: (i: InputIssue) => void;
  onProgress?: (done: number, total: number) => void;
}

/** Replay INPUT (a JSONL file, a path one of `opts.readers` claims, or inputs already loaded). */
export async function runReplay(input: string | LoadedInput, opts: ReplayOptions = {}): Promise<ReplayResult> {
  const knobs = opts.knobs ?? NoProgressKnobsSchema.parse({});
  const r = await replayInput(input, [knobs], opts);
  return { ...r.input, sessions: r.sessions[0] };
}

/**
 * Replay INPUT once per knob set, in one pass: each input is judged by every set as it
 * is read, then dropped. What is kept is per session (judge state, counters, verdict
 * changes), so memory follows the sessions, not the input's size.
 */
export async function replayInput(
  input: string | LoadedInput,
  knobSets: readonly NoProgressKnobs[],
  opts: Omit<ReplayOptions, 'knobs'> = {},
): Promise<{ input: Omit<ReplayResult, 'sessions'>; sessions: SessionResult[][] }> {
  const runs = knobSets.map((k) => new ReplayRun(k));
  const one = runs.length === 1 ? runs[0] : undefined;
  const each = one
    ? (i: JudgeInput) => one.apply(i)
    : (i: JudgeInput) => {
        for (const r of runs) r.apply(i);
      };
  let src: Omit<ReplayResult, 'sessions'> & { sessions: Map<string, InputSessionInfo> };
  if (typeof input === 'string') {
    src = await eachInput(input, each, { readers: opts.readers, onIssue: opts.onIssue, onProgress: opts.onProgress });
  } else {
    for (const i of input.inputs) each(i);
    src = {
      kind: input.kind,
      inputs: input.inputs.length,
      rejected: input.issues.length,
      issues: input.issues,
      sessions: input.sessions,
    };
  }
  const { sessions, ...rest } = src;
  return { input: rest, sessions: runs.map((r) => r.results(sessions)) };
}

interface Acc {
  session: string;
  events: number;
  worst: number;
  first: number | null;
  reason: string;
  timeline: TimelineEntry[];
}

/**
 * One replay's state, fed one input at a time: the judge's sessions (a Tracker) and per
 * session its event count, worst level, first flag and verdict changes.
 */
export class ReplayRun {
  private readonly tracker: Tracker;
  private readonly acc = new Map<string, Acc>();

  constructor(readonly knobs: NoProgressKnobs) {
    this.tracker = new Tracker(knobs);
  }

  private get(id: string): Acc {
    let a = this.acc.get(id);
    if (a === undefined) {
      a = { session: id, events: 0, worst: 0, first: null, reason: '', timeline: [] };
      this.acc.set(id, a);
    }
    return a;
  }

  apply(input: JudgeInput): void {
    let ts = 0;
    if (input.type === 'progress') {
      this.get(input.event.session_id).events++;
      ts = input.event.ts;
    } else if (input.type === 'request') {
      this.get(input.record.session_id);
      ts = input.record.ts;
    }
    for (const c of this.tracker.apply(input)) {
      const a = this.get(c.session_id);
      const index = Math.max(0, a.events - 1);
      a.timeline.push({ index, ts, from: c.from, to: c.to, reason: c.verdict.reason });
      const level = LEVELS.indexOf(c.to);
      if (level > a.worst) {
        a.worst = level;
        a.reason = c.verdict.reason;
      }
      if (level > 0 && a.first === null) a.first = index;
    }
  }

  /** Per session in order of first appearance; `info` is what the source says about sessions. */
  results(info: ReadonlyMap<string, InputSessionInfo>): SessionResult[] {
    const sessions: SessionResult[] = [];
    for (const a of this.acc.values()) {
      const s = this.tracker.state(a.session);
      const i = info.get(a.session);
      sessions.push({
        session: a.session,
        agent: s?.agent ?? i?.agent ?? null,
        parent: s?.parent ?? i?.parent ?? this.tracker.parentOf(a.session) ?? null,
        events: a.events,
        verdict: LEVELS[a.worst],
        first_flagged_at: a.first,
        reason: a.worst > 0 || s === undefined ? a.reason : verdictOf(s, this.knobs).reason,
        timeline: a.timeline,
      });
    }
    return sessions;
  }
}

/** The pure part: replay already loaded inputs with one set of knobs. */
export function replayLoaded(loaded: LoadedInput, knobs: NoProgressKnobs): ReplayResult {
  const run = new ReplayRun(knobs);
  for (const input of loaded.inputs) run.apply(input);
  return {
    kind: loaded.kind,
    inputs: loaded.inputs.length,
    rejected: loaded.issues.length,
    issues: loaded.issues,
    sessions: run.results(loaded.sessions),
  };
}

// ---------------------------------------------------------------------------
// labels and sweep

/** Labels file: a JSON object {"<session id>": "loop" | "ok"}; other sessions are not scored. */
export const LabelsSchema = z.record(z.string().min(1), z.enum(['loop', 'ok']));
export type Labels = z.output<typeof LabelsSchema>;

export interface Score {
  tp: number;
  fp: number;
  fn: number;
  tn: number;
  /** mean first_flagged_at over true positives (events into the session), null without any */
  mean_delay: number | null;
  /** labelled sessions the input did not contain */
  missing: number;
}

export function score(sessions: readonly SessionResult[], labels: Labels): Score {
  const by = new Map(sessions.map((s) => [s.session, s]));
  const sc: Score = { tp: 0, fp: 0, fn: 0, tn: 0, mean_delay: null, missing: 0 };
  let delay = 0;
  for (const [id, label] of Object.entries(labels)) {
    const s = by.get(id);
    if (s === undefined) {
      sc.missing++;
      continue;
    }
    const flagged = s.verdict !== 'ok';
    if (label === 'loop' && flagged) {
      sc.tp++;
      delay += s.first_flagged_at ?? 0;
    } else if (label === 'loop') sc.fn++;
    else if (flagged) sc.fp++;
    else sc.tn++;
  }
  if (sc.tp) sc.mean_delay = Math.round((delay / sc.tp) * 10) / 10;
  return sc;
}

/**
 * The default grid (243 sets): the thresholds of the newest rules, fitted on synthetic
 * shapes only (runs of one call with one result, short cycles, monologues, an
 * orchestrator's rhythm), each at its default and a neighbour either side. The earlier
 * default grid sweeps with a grid file: {"landed_repeat_warn": [8, 12, 16],
 * "lookup_run_warn": [3, 5, 8], "run_warn": [8, 12, 20], "tree_grace_turns": [120, 240,
 * 360]}; the prototype's thresholds likewise, e.g. {"dup_warn": [0.2, 0.25, 0.3],
 * "top_warn": [10, 12, 14], "session_repeat_warn": [12, 15, 18], "stall_turns": [15, 20, 30]}.
 */
export const DEFAULT_SWEEP: Record<string, number[]> = {
  result_lookup_run_warn: [2, 3, 4],
  result_run_warn: [3, 5, 8],
  cycle_warn: [3, 4, 6],
  monologue_warn: [2, 3, 4],
  tree_rhythm_factor: [1.25, 2, 3],
};

const LOOP_OF: Record<string, string> = {
  stall_turns: 'loop_turns',
  stall_usd: 'loop_usd',
  dup_warn: 'dup_loop',
  fail_warn: 'fail_loop',
  top_warn: 'top_loop',
  top_ro_warn: 'top_ro_loop',
  session_repeat_warn: 'session_repeat_loop',
  continuation_warn: 'continuation_loop',
  landed_repeat_warn: 'landed_repeat_loop',
  lookup_run_warn: 'lookup_run_loop',
  run_warn: 'run_loop',
  result_lookup_run_warn: 'result_lookup_run_loop',
  result_run_warn: 'result_run_loop',
  cycle_warn: 'cycle_loop',
  monologue_warn: 'monologue_loop',
};

/** Every combination of the grid over the base knobs (a loop threshold is raised to its warn one when below). */
export function sweepGrid(base: NoProgressKnobs, grid: Record<string, number[]>): NoProgressKnobs[] {
  let sets: Record<string, number>[] = [{}];
  for (const [key, values] of Object.entries(grid)) {
    sets = sets.flatMap((s) => values.map((v) => ({ ...s, [key]: v })));
  }
  return sets.map((combo) => {
    const k: Record<string, unknown> = { ...base, ...combo };
    for (const [warn, loop] of Object.entries(LOOP_OF)) {
      if (typeof k[warn] === 'number' && (k[loop] as number) < (k[warn] as number)) k[loop] = k[warn];
    }
    return NoProgressKnobsSchema.parse(k);
  });
}

export interface SweepRow {
  knobs: Record<string, number>;
  score: Score;
}

/**
 * Every combination of the grid over INPUT, in one pass (replayInput), scored against
 * the labels and ranked: fewest errors first, then the earliest detection.
 */
export async function runSweep(
  input: string | LoadedInput,
  labels: Labels,
  base: NoProgressKnobs,
  grid: Record<string, number[]>,
  opts: Omit<ReplayOptions, 'knobs'> = {},
): Promise<{ input: Omit<ReplayResult, 'sessions'>; rows: SweepRow[] }> {
  const sets = sweepGrid(base, grid);
  const keys = Object.keys(grid);
  const r = await replayInput(input, sets, opts);
  const rows = sets.map((k, i) => ({
    knobs: Object.fromEntries(keys.map((key) => [key, (k as Record<string, unknown>)[key] as number])),
    score: score(r.sessions[i], labels),
  }));
  rows.sort(
    (a, b) =>
      a.score.fp + a.score.fn - (b.score.fp + b.score.fn) ||
      (a.score.mean_delay ?? Number.POSITIVE_INFINITY) - (b.score.mean_delay ?? Number.POSITIVE_INFINITY),
  );
  return { input: r.input, rows };
}
