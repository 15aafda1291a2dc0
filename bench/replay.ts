// `vigil replay` over a large JSONL file: its rate beside a bare loop that reads the same
// file line by line and JSON.parses each line, and its peak memory at two input sizes.
//   node --expose-gc bin/run-ts.mjs bench/replay.ts [--lines N] [--factor N] [--rounds N] [--quick]
// The input is the calibration fixture's inputs (tool events, markers, request
// records) copied until `lines` (1x) and `lines x factor` (e.g. 4x) lines, each copy
// later in time; the larger file has the same sessions as the smaller, with longer
// histories. Every measurement runs in a child process of its own, so each peak
// (max RSS from process.resourceUsage, and the V8 heap sampled every 20 ms) is that
// run's alone. Rate: best of `rounds` on the 1x file, replay and bare rounds alternated.
// Goals: replay >= 0.3x the bare loop's lines/s; peak memory at 4x about that at 1x.
// Also printed: the peak of replay as it was (every input loaded into a list first).
import 'reflect-metadata';
import { spawnSync } from 'node:child_process';
import { createReadStream, createWriteStream, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { z } from 'zod';
import type { JudgeInput } from '../detectors/no-progress/judge.ts';
import { defaultKnobs } from '../detectors/no-progress/knobs.ts';
import { loadInput } from '../detectors/no-progress/replay/inputs.ts';
import { replayLoaded, runReplay } from '../detectors/no-progress/replay/replay.ts';
import { generateCalibration, toJsonl } from '../test/fixtures/calibration.ts';
import { benchArgs } from './args.ts';

const quick = process.argv.includes('--quick');
const args = benchArgs(
  z.strictObject({
    lines: z.coerce
      .number()
      .int()
      .min(1_000)
      .default(quick ? 100_000 : 250_000),
    factor: z.coerce.number().int().min(2).default(4),
    rounds: z.coerce
      .number()
      .int()
      .min(1)
      .default(quick ? 2 : 3),
    child: z.enum(['replay', 'bare', 'loaded']).optional(),
    file: z.string().optional(),
  }),
  process.argv.slice(2).filter((a) => a !== '--quick'),
);

interface Run {
  lines: number;
  ms: number;
  maxRssMb: number;
  heapPeakMb: number;
  sessions?: number;
}

// ---------------------------------------------------------------------------
// a child: one pass over the file, then its figures as one JSON line on stdout

async function child(mode: 'replay' | 'bare' | 'loaded', file: string): Promise<Run> {
  const gc = (globalThis as { gc?: () => void }).gc;
  gc?.();
  let heapPeak = process.memoryUsage().heapUsed;
  const sample = setInterval(() => {
    const h = process.memoryUsage().heapUsed;
    if (h > heapPeak) heapPeak = h;
  }, 20);
  const t0 = performance.now();
  let lines = 0;
  let sessions: number | undefined;
  if (mode === 'bare') {
    const rl = createInterface({ input: createReadStream(file, { encoding: 'utf8' }), crlfDelay: Infinity });
    for await (const line of rl) {
      if (line) JSON.parse(line);
      lines++;
    }
  } else if (mode === 'loaded') {
    // as replay did before: every input in one list, then the judge
    const r = replayLoaded(await loadInput(file), defaultKnobs());
    lines = r.inputs + r.rejected;
    sessions = r.sessions.length;
  } else {
    const r = await runReplay(file);
    lines = r.inputs + r.rejected;
    sessions = r.sessions.length;
  }
  const ms = performance.now() - t0;
  clearInterval(sample);
  const h = process.memoryUsage().heapUsed;
  if (h > heapPeak) heapPeak = h;
  return {
    lines,
    ms,
    // resourceUsage().maxRSS is in kilobytes
    maxRssMb: process.resourceUsage().maxRSS / 1024,
    heapPeakMb: heapPeak / 1024 / 1024,
    ...(sessions !== undefined ? { sessions } : {}),
  };
}

if (args.child) {
  if (!args.file) throw new Error('--child needs --file');
  console.log(JSON.stringify(await child(args.child, args.file)));
  process.exit(0);
}

// ---------------------------------------------------------------------------
// the parent: build the two files, run the children

const dir = mkdtempSync(join(tmpdir(), 'vigil-bench-replay-'));
const cal = generateCalibration().inputs;
const tsOf = (i: JudgeInput) => (i.type === 'progress' ? i.event.ts : i.type === 'request' ? i.record.ts : 0);
const span = Math.max(...cal.map(tsOf)) - Math.min(...cal.map(tsOf)) + 3_600_000;
const copies1x = Math.ceil(args.lines / cal.length);

/**
 * Copy c of the fixture, later by c spans: its sessions are those of copy c mod the 1x
 * count, so the larger file has the same sessions with longer histories (the memory
 * replay keeps is per session; the input's length must not add to it).
 */
function copy(c: number): string {
  const shifted = cal.map((i): JudgeInput => {
    if (i.type === 'progress') return { type: 'progress', event: { ...i.event, ts: i.event.ts + c * span } };
    if (i.type === 'request') return { type: 'request', record: { ...i.record, ts: i.record.ts + c * span } };
    return i;
  });
  return toJsonl(shifted).replaceAll('"ses_cal_', `"ses_c${c % copies1x}_`);
}

async function build(file: string, lines: number): Promise<number> {
  const out = createWriteStream(file);
  let n = 0;
  for (let c = 0; n < lines; c++) {
    if (!out.write(copy(c))) await new Promise<void>((r) => out.once('drain', () => r()));
    n += cal.length;
  }
  await new Promise<void>((r) => out.end(r));
  return n;
}

const small = join(dir, 'x1.jsonl');
const large = join(dir, `x${args.factor}.jsonl`);
const nSmall = await build(small, args.lines);
const nLarge = await build(large, args.lines * args.factor);

function run(mode: 'replay' | 'bare' | 'loaded', file: string): Run {
  const r = spawnSync(
    process.execPath,
    ['--expose-gc', 'bin/run-ts.mjs', 'bench/replay.ts', '--child', mode, '--file', file],
    { encoding: 'utf8', maxBuffer: 1 << 20 },
  );
  if (r.status !== 0) throw new Error(`child ${mode} failed: ${r.stderr}`);
  return JSON.parse(r.stdout.trim().split('\n').at(-1) ?? '{}') as Run;
}

const best = { replay: Number.POSITIVE_INFINITY, bare: Number.POSITIVE_INFINITY };
const at1: Record<'replay' | 'bare', Run[]> = { replay: [], bare: [] };
for (let i = 0; i < args.rounds; i++) {
  for (const mode of i % 2 ? (['bare', 'replay'] as const) : (['replay', 'bare'] as const)) {
    const r = run(mode, small);
    at1[mode].push(r);
    best[mode] = Math.min(best[mode], r.ms);
  }
}
const atN = { replay: run('replay', large), bare: run('bare', large) };
const before = { x1: run('loaded', small), xN: run('loaded', large) };
rmSync(dir, { recursive: true, force: true });

const k = (x: number) => (x >= 1e6 ? `${(x / 1e6).toFixed(2)}M` : `${(x / 1e3).toFixed(0)}k`);
const rate = (lines: number, ms: number) => (lines / ms) * 1000;
const replayRate = rate(nSmall, best.replay);
const bareRate = rate(nSmall, best.bare);
console.log(
  `replay lines/s (${k(nSmall)} lines, best of ${args.rounds})   ${k(replayRate).padStart(6)}   baseline ${k(bareRate).padStart(6)} readline + JSON.parse/s   ratio ${(replayRate / bareRate).toFixed(2)} (goal >= 0.3)`,
);
const peak = (xs: Run[], f: (r: Run) => number) => Math.max(...xs.map(f));
const mem = (label: string, n: number, rep: Run[], bare: Run[]) =>
  console.log(
    `${label.padEnd(22)} ${k(n).padStart(6)} lines: replay max RSS ${peak(rep, (r) => r.maxRssMb).toFixed(0)} MB, heap peak ${peak(rep, (r) => r.heapPeakMb).toFixed(0)} MB (${rep[0].sessions} sessions)   bare loop max RSS ${peak(bare, (r) => r.maxRssMb).toFixed(0)} MB, heap peak ${peak(bare, (r) => r.heapPeakMb).toFixed(0)} MB`,
  );
mem('memory at 1x', nSmall, at1.replay, at1.bare);
mem(`memory at ${args.factor}x`, nLarge, [atN.replay], [atN.bare]);
console.log(
  `replay at ${args.factor}x: ${k(rate(nLarge, atN.replay.ms))} lines/s; max RSS ${args.factor}x / 1x = ${(atN.replay.maxRssMb / peak(at1.replay, (r) => r.maxRssMb)).toFixed(2)} (goal about 1)`,
);
console.log(
  `before (every input loaded into one list, then judged): max RSS ${before.x1.maxRssMb.toFixed(0)} MB at 1x, ${before.xN.maxRssMb.toFixed(0)} MB at ${args.factor}x`,
);
