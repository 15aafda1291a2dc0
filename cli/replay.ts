import { existsSync, readFileSync, statSync } from 'node:fs';
import cliProgress from 'cli-progress';
import { parse as parseYaml, stringify as toYaml } from 'yaml';
import { z } from 'zod';
import { replayReaders as readers } from '../builtins.ts';
import type { InputIssue } from '../core/replay.ts';
import type { VerdictLevel } from '../core/wire.ts';
import { type NoProgressKnobs, NoProgressKnobsSchema } from '../detectors/no-progress/knobs.ts';
import { detectKind, loadInput } from '../detectors/no-progress/replay/inputs.ts';
import {
  DEFAULT_SWEEP,
  type Labels,
  LabelsSchema,
  type ReplayResult,
  runReplay,
  runSweep,
  type SessionResult,
  type SweepRow,
  score,
} from '../detectors/no-progress/replay/replay.ts';
import { type LedgerRun, renderLedgerReplay, replayLedger } from './ledger-replay.ts';
import { table } from './remote.ts';

// `vigil replay INPUT`: the presentation of a replay (the judge and the JSONL reader live
// with the detector, the readers of the other formats with their sensors; builtins.ts
// lists them). Times are shown beside event indexes: an index alone says nothing to
// someone reading a night's log.
//
// Exit codes: 0 replayed; 1 replayed, but some input records were rejected (each named
// on stderr); 2 nothing replayed (missing input, bad options, bad knobs or labels file).

export interface Out {
  write(s: string): unknown;
  isTTY?: boolean;
}

export interface ReplayArgs {
  input: string;
  json?: boolean;
  labels?: string;
  sweep?: boolean | string;
  knobs?: string;
  /** Replay through the whole kernel in these modes and print the ledger. */
  ledger?: boolean;
  mode?: string[];
}

const iso = (ts: number | null | undefined) =>
  ts && ts > 0
    ? new Date(ts)
        .toISOString()
        .replace(/\.\d{3}Z$/, 'Z')
        .replace('T', ' ')
    : '-';

/** When a session was first flagged: the time of its first non-ok transition. */
export function firstFlaggedTs(s: SessionResult): number | null {
  return s.timeline.find((t) => t.to !== 'ok')?.ts ?? null;
}

export async function replay(a: ReplayArgs, io: { stdout: Out; stderr: Out }): Promise<number> {
  const err = (s: string) => io.stderr.write(`replay: ${s}\n`);
  if (!existsSync(a.input)) {
    err(`input not found: ${a.input}`);
    return 2;
  }
  let knobs: NoProgressKnobs;
  let labels: Labels | undefined;
  let grid = DEFAULT_SWEEP;
  try {
    knobs = a.knobs ? readKnobs(a.knobs) : NoProgressKnobsSchema.parse({});
    if (a.labels) labels = readJson(a.labels, 'labels file', LabelsSchema);
    if (a.sweep && !labels) throw new Error('--sweep needs --labels FILE');
    if (a.ledger && (a.sweep || labels)) throw new Error('--ledger replays through the kernel: no --labels or --sweep');
    if (typeof a.sweep === 'string') grid = readGrid(a.sweep);
  } catch (e) {
    err((e as Error).message);
    return 2;
  }

  if (a.ledger) return ledger(a, knobs, io, err);

  const st = statSync(a.input);
  const jsonl = st.isFile() && detectKind(a.input, readers) === 'jsonl';
  const big = st.isDirectory() || st.size > 5_000_000;
  // on a terminal, a bar for large inputs: lines of a JSONL file, or sessions loaded
  const bar = io.stderr.isTTY && big ? newBar(io.stderr, 'load', jsonl ? 'events' : 'sessions') : undefined;
  let started = false;
  const opts = {
    readers,
    onIssue: (i: InputIssue) => err(`${i.where}: ${i.field}: ${i.message}`),
    onProgress: bar
      ? (done: number, total: number) => {
          if (!started) bar.start(total, 0);
          started = true;
          bar.update(done);
        }
      : undefined,
  };

  if (a.sweep && labels) {
    let swept: Awaited<ReturnType<typeof runSweep>>;
    try {
      swept = await runSweep(a.input, labels, knobs, grid, opts);
    } catch (e) {
      bar?.stop();
      err(`cannot read ${a.input}: ${(e as Error).message}`);
      return 2;
    }
    bar?.stop();
    const rows = swept.rows;
    if (a.json) for (const r of rows) io.stdout.write(`${JSON.stringify({ knobs: r.knobs, ...r.score })}\n`);
    else io.stdout.write(renderSweep(rows, labels, grid));
    return swept.input.rejected ? 1 : 0;
  }

  let result: ReplayResult;
  try {
    result = await runReplay(a.input, { knobs, ...opts });
  } catch (e) {
    bar?.stop();
    err(`cannot read ${a.input}: ${(e as Error).message}`);
    return 2;
  }
  bar?.stop();
  if (a.json) {
    for (const s of result.sessions) {
      const { timeline: _t, ...line } = s;
      const t = firstFlaggedTs(s);
      io.stdout.write(`${JSON.stringify({ ...line, first_flagged_time: t ? new Date(t).toISOString() : null })}\n`);
    }
  } else {
    io.stdout.write(renderReplay(result));
  }
  if (labels) {
    const s = score(result.sessions, labels);
    const line = `labels: TP=${s.tp} FP=${s.fp} FN=${s.fn} TN=${s.tn} mean_delay=${s.mean_delay ?? '-'} events${s.missing ? ` missing=${s.missing}` : ''}\n`;
    (a.json ? io.stderr : io.stdout).write(line);
  }
  return result.rejected ? 1 : 0;
}

/** The ledger replay: the input loaded once, replayed per mode, printed side by side (or one JSON line per mode). */
async function ledger(
  a: ReplayArgs,
  knobs: NoProgressKnobs,
  io: { stdout: Out; stderr: Out },
  err: (s: string) => void,
): Promise<number> {
  let loaded: Awaited<ReturnType<typeof loadInput>>;
  try {
    loaded = await loadInput(a.input, { readers, onIssue: (i) => err(`${i.where}: ${i.field}: ${i.message}`) });
  } catch (e) {
    err(`cannot read ${a.input}: ${(e as Error).message}`);
    return 2;
  }
  const runs: LedgerRun[] = [];
  try {
    for (const m of a.mode?.length ? a.mode : LEDGER_MODES) runs.push(await replayLedger(loaded.inputs, m, { knobs }));
  } catch (e) {
    err((e as Error).message);
    return 2;
  }
  if (a.json) for (const r of runs) io.stdout.write(`${JSON.stringify({ mode: r.mode, ...r.view })}\n`);
  else io.stdout.write(renderLedgerReplay(runs));
  return loaded.issues.length ? 1 : 0;
}

/** What a ledger replay compares by default: warnings only, and the mode that recovers. */
export const LEDGER_MODES = ['warn', 'auto_recover'];

function newBar(stream: Out, what: string, unit: string): cliProgress.SingleBar {
  return new cliProgress.SingleBar(
    {
      stream: stream as NodeJS.WritableStream,
      format: `${what} [{bar}] {percentage}% {value}/{total} ${unit}`,
      clearOnComplete: true,
      hideCursor: false,
    },
    cliProgress.Presets.legacy,
  );
}

/** Each session's verdict timeline (time and event index), then a summary table. */
export function renderReplay(r: ReplayResult): string {
  let out = '';
  for (const s of r.sessions) {
    const who = [s.agent, s.parent ? `child of ${s.parent}` : null].filter(Boolean).join(', ');
    out += `${s.session}${who ? ` (${who})` : ''}: ${s.events} events, worst ${s.verdict}\n`;
    for (const t of s.timeline) out += `  ${iso(t.ts)}  event #${t.index}  ${t.from} -> ${t.to}  ${t.reason}\n`;
  }
  const rows = r.sessions.map((s) => [
    s.session,
    s.agent,
    s.parent,
    s.events,
    s.verdict,
    s.first_flagged_at === null ? null : `${iso(firstFlaggedTs(s))} (#${s.first_flagged_at})`,
    s.reason.length > 90 ? `${s.reason.slice(0, 87)}...` : s.reason,
  ]);
  out += `\n${table(['SESSION', 'AGENT', 'PARENT', 'EVENTS', 'VERDICT', 'FIRST FLAGGED', 'REASON'], rows)}`;
  const n = (lv: VerdictLevel) => r.sessions.filter((s) => s.verdict === lv).length;
  out += `\n${r.sessions.length} sessions: ${n('ok')} ok, ${n('stalling')} stalling, ${n('looping')} looping; ${r.inputs} inputs`;
  out += r.rejected ? `, ${r.rejected} rejected (see stderr)\n` : '\n';
  return out;
}

/** The ranked grid with a header, the best set, and the YAML to paste into a config file. */
export function renderSweep(rows: SweepRow[], labels: Labels, grid: Record<string, number[]>): string {
  const loops = Object.values(labels).filter((l) => l === 'loop').length;
  const keys = Object.keys(grid);
  let out = `sweep: ${rows.length} threshold sets over ${Object.keys(labels).length} labelled sessions (${loops} loop, ${Object.keys(labels).length - loops} ok)\n`;
  out += 'ranked by errors (FP + FN), then by mean delay (events into a loop before its first flag)\n\n';
  out += table(
    [...keys, 'TP', 'FP', 'FN', 'TN', 'DELAY'],
    rows.map((r) => [
      ...keys.map((k) => r.knobs[k]),
      r.score.tp,
      r.score.fp,
      r.score.fn,
      r.score.tn,
      r.score.mean_delay,
    ]),
  );
  const best = rows[0];
  if (!best) return out;
  const s = best.score;
  out += `\nbest: ${keys.map((k) => `${k}=${best.knobs[k]}`).join(' ')}  (${s.fp + s.fn} errors: FP=${s.fp} FN=${s.fn}; mean delay ${s.mean_delay ?? '-'} events)\n`;
  out += '\npaste into your config file (or PATCH /knobs):\n\n';
  out += toYaml({ progress: best.knobs }).replace(/^/gm, '    ').trimEnd();
  return `${out}\n`;
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

function readJson<S extends z.ZodType>(file: string, what: string, schema: S): z.output<S> {
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(file, 'utf8'));
  } catch (e) {
    throw new Error(`${what} ${file}: ${(e as Error).message}`);
  }
  const r = schema.safeParse(raw);
  if (!r.success) throw new Error(`${what} ${file}: ${z.prettifyError(r.error).replace(/\n/g, '; ')}`);
  return r.data;
}

function readGrid(file: string): Record<string, number[]> {
  const g = readJson(file, 'sweep grid', z.record(z.string(), z.array(z.number()).min(1).max(20)));
  const known = new Set(Object.keys(NoProgressKnobsSchema.parse({})));
  for (const k of Object.keys(g)) if (!known.has(k)) throw new Error(`sweep grid ${file}: unknown knob ${k}`);
  return g;
}
