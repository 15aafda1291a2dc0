import { existsSync, readFileSync, statSync } from 'node:fs';
import cliProgress from 'cli-progress';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import type { VerdictLevel } from '../../../core/wire.ts';
import { LEVELS, Tracker, verdictOf } from '../judge.ts';
import { type NoProgressKnobs, NoProgressKnobsSchema } from '../knobs.ts';
import { type InputIssue, type LoadedInput, loadInput } from './inputs.ts';

// `vigil replay INPUT`: run the no-progress judge (the same code as the service and the
// watchdog) over recorded history and report, per session, the verdict timeline and
// the worst verdict reached. With `--labels FILE --sweep` it replays a grid of
// thresholds against labelled sessions to pick knobs (Phase 0 calibration).
//
// Counting: a session's `events` are its progress events (tool calls and continuation /
// compaction markers; request records are replayed but not counted), and
// `first_flagged_at` is the 0-based index of the last of its progress events applied
// when its verdict first left `ok` (0 when flagged before any; a parent flagged through
// a child's roll-up gets the index of its own latest event).
//
// Exit codes: 0 replayed; 1 replayed, but some input records were rejected (each named
// on stderr: where, field, message); 2 nothing replayed (missing input, bad options,
// bad knobs or labels file).

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
  issues: InputIssue[];
  sessions: SessionResult[];
}

export interface ReplayOptions {
  knobs?: NoProgressKnobs;
  onIssue?: (i: InputIssue) => void;
  onProgress?: (done: number, total: number) => void;
}

/** Load INPUT (JSONL file, opencode export folder or opencode.db) and replay it. */
export async function runReplay(input: string | LoadedInput, opts: ReplayOptions = {}): Promise<ReplayResult> {
  const loaded =
    typeof input === 'string' ? await loadInput(input, { onIssue: opts.onIssue, onProgress: opts.onProgress }) : input;
  return replayLoaded(loaded, opts.knobs ?? NoProgressKnobsSchema.parse({}));
}

interface Acc {
  session: string;
  events: number;
  worst: number;
  first: number | null;
  reason: string;
  timeline: TimelineEntry[];
}

/** The pure part: replay already loaded inputs with one set of knobs. */
export function replayLoaded(loaded: LoadedInput, knobs: NoProgressKnobs): ReplayResult {
  const tracker = new Tracker(knobs);
  const acc = new Map<string, Acc>();
  const get = (id: string): Acc => {
    let a = acc.get(id);
    if (a === undefined) {
      a = { session: id, events: 0, worst: 0, first: null, reason: '', timeline: [] };
      acc.set(id, a);
    }
    return a;
  };
  for (const input of loaded.inputs) {
    let ts = 0;
    if (input.type === 'progress') {
      get(input.event.session_id).events++;
      ts = input.event.ts;
    } else if (input.type === 'request') {
      get(input.record.session_id);
      ts = input.record.ts;
    }
    for (const c of tracker.apply(input)) {
      const a = get(c.session_id);
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
  const sessions: SessionResult[] = [];
  for (const a of acc.values()) {
    const s = tracker.state(a.session);
    const info = loaded.sessions.get(a.session);
    sessions.push({
      session: a.session,
      agent: s?.agent ?? info?.agent ?? null,
      parent: s?.parent ?? info?.parent ?? tracker.parentOf(a.session) ?? null,
      events: a.events,
      verdict: LEVELS[a.worst],
      first_flagged_at: a.first,
      reason: a.worst > 0 || s === undefined ? a.reason : verdictOf(s, knobs).reason,
      timeline: a.timeline,
    });
  }
  return { kind: loaded.kind, inputs: loaded.inputs.length, issues: loaded.issues, sessions };
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
 * The default grid (81 sets): the thresholds fitted on synthetic shapes only (repeat
 * landings, identical lookups, identical other calls such as polls, an orchestrator's
 * grace), each at its default and a neighbour either side. The prototype's thresholds
 * sweep with a grid file, e.g. {"dup_warn": [0.2, 0.25, 0.3], "top_warn": [10, 12, 14],
 * "session_repeat_warn": [12, 15, 18], "stall_turns": [15, 20, 30]}.
 */
export const DEFAULT_SWEEP: Record<string, number[]> = {
  landed_repeat_warn: [8, 12, 16],
  lookup_run_warn: [3, 5, 8],
  run_warn: [8, 12, 20],
  tree_grace_turns: [120, 240, 360],
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

export function runSweep(
  loaded: LoadedInput,
  labels: Labels,
  base: NoProgressKnobs,
  grid: Record<string, number[]>,
  onProgress?: (done: number, total: number) => void,
): SweepRow[] {
  const sets = sweepGrid(base, grid);
  const keys = Object.keys(grid);
  const rows = sets.map((k, i) => {
    const r = replayLoaded(loaded, k);
    onProgress?.(i + 1, sets.length);
    return {
      knobs: Object.fromEntries(keys.map((key) => [key, (k as Record<string, unknown>)[key] as number])),
      score: score(r.sessions, labels),
    };
  });
  // fewest errors first, then the earliest detection
  return rows.sort(
    (a, b) =>
      a.score.fp + a.score.fn - (b.score.fp + b.score.fn) ||
      (a.score.mean_delay ?? Number.POSITIVE_INFINITY) - (b.score.mean_delay ?? Number.POSITIVE_INFINITY),
  );
}

// ---------------------------------------------------------------------------
// the command

export interface Out {
  write(s: string): unknown;
  isTTY?: boolean;
}

export interface ReplayCommandOptions {
  /** INPUT: a JSONL file, an opencode export folder, or an opencode.db */
  input: string;
  /** one JSON line per session instead of the timeline and table */
  json?: boolean;
  /** labels file (JSON {session: "loop" | "ok"}): score the verdicts */
  labels?: string;
  /** replay a threshold grid against the labels; a string is a JSON grid file {knob: [values]} */
  sweep?: boolean | string;
  /** knobs file (YAML or JSON): the `progress` section, or a config with a `progress` key */
  knobs?: string;
}

/** The testable body of `vigil replay INPUT`; returns the exit code. */
export async function replayCommand(opts: ReplayCommandOptions, io: { stdout: Out; stderr: Out }): Promise<number> {
  const err = (s: string) => io.stderr.write(`replay: ${s}\n`);
  if (!opts.input || !existsSync(opts.input)) {
    err(`input not found: ${opts.input ?? '(none)'}`);
    return 2;
  }
  let knobs: NoProgressKnobs;
  let labels: Labels | undefined;
  let grid = DEFAULT_SWEEP;
  try {
    knobs = opts.knobs ? readKnobs(opts.knobs) : NoProgressKnobsSchema.parse({});
    if (opts.labels) labels = readLabels(opts.labels);
    if (opts.sweep && !labels) throw new Error('--sweep needs --labels FILE');
    if (typeof opts.sweep === 'string') grid = readGrid(opts.sweep);
  } catch (e) {
    err((e as Error).message);
    return 2;
  }

  const tty = io.stderr.isTTY === true;
  const big = statSync(opts.input).isDirectory() || statSync(opts.input).size > 5_000_000;
  const bar = tty && big ? newBar(io.stderr, 'load') : undefined;
  let started = false;
  let loaded: LoadedInput;
  try {
    loaded = await loadInput(opts.input, {
      onIssue: (i) => err(`${i.where}: ${i.field}: ${i.message}`),
      onProgress: bar
        ? (done, total) => {
            if (!started) bar.start(total, 0);
            started = true;
            bar.update(done);
          }
        : undefined,
    });
  } catch (e) {
    bar?.stop();
    err(`cannot read ${opts.input}: ${(e as Error).message}`);
    return 2;
  }
  bar?.stop();

  if (opts.sweep && labels) {
    const sbar = tty ? newBar(io.stderr, 'sweep') : undefined;
    const rows = runSweep(loaded, labels, knobs, grid, (done, total) => {
      if (done === 1) sbar?.start(total, 0);
      sbar?.update(done);
    });
    sbar?.stop();
    for (const r of rows) {
      if (opts.json) {
        io.stdout.write(`${JSON.stringify({ knobs: r.knobs, ...r.score })}\n`);
      } else {
        const k = Object.entries(r.knobs)
          .map(([key, v]) => `${key}=${v}`)
          .join(' ');
        const s = r.score;
        io.stdout.write(`${k}  TP=${s.tp} FP=${s.fp} FN=${s.fn} TN=${s.tn} mean_delay=${s.mean_delay ?? '-'}\n`);
      }
    }
    return loaded.issues.length ? 1 : 0;
  }

  const result = replayLoaded(loaded, knobs);
  if (opts.json) {
    for (const s of result.sessions) {
      const { timeline: _t, ...line } = s;
      io.stdout.write(`${JSON.stringify(line)}\n`);
    }
  } else {
    io.stdout.write(renderText(result));
  }
  if (labels) {
    const s = score(result.sessions, labels);
    const line = `labels: TP=${s.tp} FP=${s.fp} FN=${s.fn} TN=${s.tn} mean_delay=${s.mean_delay ?? '-'}${s.missing ? ` missing=${s.missing}` : ''}`;
    if (opts.json) io.stderr.write(`${line}\n`);
    else io.stdout.write(`${line}\n`);
  }
  return loaded.issues.length ? 1 : 0;
}

function newBar(stream: Out, what: string): cliProgress.SingleBar {
  return new cliProgress.SingleBar(
    {
      stream: stream as NodeJS.WritableStream,
      format: `${what} [{bar}] {percentage}% {value}/{total}`,
      clearOnComplete: true,
      hideCursor: false,
    },
    cliProgress.Presets.legacy,
  );
}

function readKnobs(file: string): NoProgressKnobs {
  let raw: unknown;
  try {
    raw = parseYaml(readFileSync(file, 'utf8'));
  } catch (e) {
    throw new Error(`knobs file ${file}: ${(e as Error).message}`);
  }
  const section =
    raw !== null && typeof raw === 'object' && 'progress' in raw ? (raw as { progress: unknown }).progress : raw;
  const r = NoProgressKnobsSchema.safeParse(section ?? {});
  if (!r.success) throw new Error(`knobs file ${file}: ${z.prettifyError(r.error).replace(/\n/g, '; ')}`);
  return r.data;
}

function readLabels(file: string): Labels {
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(file, 'utf8'));
  } catch (e) {
    throw new Error(`labels file ${file}: ${(e as Error).message}`);
  }
  const r = LabelsSchema.safeParse(raw);
  if (!r.success) throw new Error(`labels file ${file}: ${z.prettifyError(r.error).replace(/\n/g, '; ')}`);
  return r.data;
}

function readGrid(file: string): Record<string, number[]> {
  const r = z.record(z.string(), z.array(z.number()).min(1).max(20)).safeParse(JSON.parse(readFileSync(file, 'utf8')));
  if (!r.success) throw new Error(`sweep grid ${file}: ${z.prettifyError(r.error).replace(/\n/g, '; ')}`);
  const known = new Set(Object.keys(NoProgressKnobsSchema.parse({})));
  for (const k of Object.keys(r.data)) if (!known.has(k)) throw new Error(`sweep grid ${file}: unknown knob ${k}`);
  return r.data;
}

const pad = (s: string, n: number) => (s.length >= n ? s : s + ' '.repeat(n - s.length));
const iso = (ts: number) => (ts > 0 ? new Date(ts).toISOString().replace('.000Z', 'Z') : '-');

/** The verdict timeline per session, then the summary table. */
export function renderText(r: ReplayResult): string {
  let out = '';
  for (const s of r.sessions) {
    const who = [s.agent, s.parent ? `child of ${s.parent}` : null].filter(Boolean).join(', ');
    out += `${s.session}${who ? ` (${who})` : ''}: ${s.events} events, worst ${s.verdict}\n`;
    for (const t of s.timeline) out += `  #${t.index} ${iso(t.ts)} ${t.from} -> ${t.to}  ${t.reason}\n`;
  }
  const rows = r.sessions.map((s) => [
    s.session,
    s.agent ?? '-',
    s.parent ?? '-',
    String(s.events),
    s.verdict,
    s.first_flagged_at === null ? '-' : String(s.first_flagged_at),
    s.reason.length > 90 ? `${s.reason.slice(0, 87)}...` : s.reason,
  ]);
  const head = ['SESSION', 'AGENT', 'PARENT', 'EVENTS', 'VERDICT', 'FIRST', 'REASON'];
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((row) => row[i].length)));
  const line = (cells: string[]) =>
    `${cells
      .map((c, i) => (i === cells.length - 1 ? c : pad(c, widths[i])))
      .join('  ')
      .trimEnd()}\n`;
  out += `\n${line(head)}`;
  for (const row of rows) out += line(row);
  const n = (lv: VerdictLevel) => r.sessions.filter((s) => s.verdict === lv).length;
  out += `\n${r.sessions.length} sessions: ${n('ok')} ok, ${n('stalling')} stalling, ${n('looping')} looping; ${r.inputs} inputs`;
  out += r.issues.length ? `, ${r.issues.length} rejected (see stderr)\n` : '\n';
  return out;
}
