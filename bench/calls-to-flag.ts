// Calls to flag: how many calls of an unbroken run of one identical call with one
// result the judge needs before it flags the session (any level) and before it loops,
// with result fingerprints (the plugin's) beside the same runs without them (an older
// plugin) in the same run; and whether polls (the same call, its result changing every
// time) are flagged at all.
//   node bin/run-ts.mjs bench/calls-to-flag.ts [--cases N] [--seed N]
// Each case: a session doing some work (distinct calls, an edit landing now and then,
// one request record per call or none), then a run of 12 to 30 calls of one tool (read,
// grep, todoread, bash cat, a failing test, an MCP snapshot), then more work. A run's
// outputs differ only in volatile parts (timestamps, durations, a temp path), which the
// sensor's normalisation removes; a poll's outputs differ in their content. The calls
// are built as opencode 1.18 tool parts and converted by sensors/opencode/convert.ts, as the
// plugin and the history readers do. Goals: median calls to flag <= 5, max <= 8, no
// poll flagged.
import { z } from 'zod';
import type { ToolEvent } from '../core/wire.ts';
import { LEVELS, Tracker } from '../detectors/no-progress/judge.ts';
import { defaultKnobs } from '../detectors/no-progress/knobs.ts';
import { newLandedTracker, type OcToolPart, toolPartToEvent } from '../sensors/opencode/convert.ts';
import { rng } from '../test/fixtures/calibration.ts';
import { benchArgs } from './args.ts';

const args = benchArgs(
  z.strictObject({
    cases: z.coerce.number().int().min(6).max(100_000).default(600),
    seed: z.coerce.number().int().min(0).default(24),
  }),
  process.argv.slice(2),
);

const CWD = '/home/op/app';
interface Shape {
  tool: string;
  args: Record<string, unknown>;
  exit: number;
  /** the i-th output of the run (identical runs: volatile parts only differ) */
  out: (i: number, r: () => number) => string;
  /** the i-th output of a poll (its content moves; its exit 0: a failing poll is a failure streak) */
  poll: (i: number, r: () => number) => string;
}

const stamp = (r: () => number) =>
  `2026-11-30T${String(10 + Math.floor(r() * 10))}:${String(10 + Math.floor(r() * 50))}:${String(10 + Math.floor(r() * 50))}.${Math.floor(r() * 900 + 100)}Z`;
const ms = (r: () => number) => `${Math.floor(r() * 900) + 5}ms`;

const SHAPES: Shape[] = [
  {
    tool: 'read',
    args: { filePath: `${CWD}/src/config.ts` },
    exit: 0,
    out: () => `<path>${CWD}/src/config.ts</path>\n<content>\n1: export const rpm = 60;\n</content>`,
    poll: (i) => `<path>${CWD}/status.json</path>\n<content>\n1: {"step": ${i}}\n</content>`,
  },
  {
    tool: 'grep',
    args: { pattern: 'handleGate', path: `${CWD}/src` },
    exit: 0,
    out: () => 'Found 2 matches\nsrc/gate.ts:\n  Line 12: export function handleGate(',
    poll: (i) => `Found ${i + 1} matches\nlogs/app.log:\n  Line ${100 + i}: handleGate`,
  },
  {
    tool: 'todoread',
    args: {},
    exit: 0,
    out: () => '[{"content":"fix the gate","status":"in_progress"}]',
    poll: (i) => `[{"content":"fix the gate","status":"in_progress"},{"content":"step ${i}","status":"pending"}]`,
  },
  {
    tool: 'bash',
    args: { command: 'cat src/router/limits.json' },
    exit: 0,
    out: () => '{"rpm": 60, "burst": 10}',
    poll: (i) => `{"rpm": 60, "burst": 10, "seen": ${i * 7}}`,
  },
  {
    tool: 'bash',
    args: { command: 'npm test -- tests/gate.test.ts' },
    exit: 1,
    out: (_i, r) =>
      `FAIL tests/gate.test.ts (${ms(r)})\n  x returns 200 (${ms(r)})\nTests: 1 failed, 3 passed\nSnapshots: 0\nTime: ${(r() * 3).toFixed(2)} s\nRan at ${stamp(r)} in /tmp/jest_${Math.floor(r() * 1e6)}`,
    poll: (i, r) => `PASS ${i} of 40 suites so far (${ms(r)})`,
  },
  {
    tool: 'playwright_browser_snapshot',
    args: {},
    exit: 0,
    out: (_i, r) => `- Page URL: http://localhost:5173/\n- heading "Cockpit"\n- loaded at ${stamp(r)}`,
    poll: (i) => `- Page URL: http://localhost:5173/\n- progressbar "${i * 3}%"`,
  },
];

interface Result {
  tool: string;
  len: number;
  /** calls into the run when first flagged / looping (null: never) */
  flag: number | null;
  loop: number | null;
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.floor((s.length - 1) / 2)] : Number.NaN;
}

/** One case: work, a run (or a poll) of one call, more work; each tool part through the converter. */
function runCase(seed: number, shape: Shape, mode: 'run' | 'poll', results: boolean): Result {
  const r = rng(seed);
  const k = defaultKnobs();
  const t = new Tracker(k);
  const id = `ses_bench_${seed}`;
  const withRequests = r() < 0.5;
  let tr = newLandedTracker();
  let ts = 1_790_000_000_000;
  let n = 0;
  const call = (tool: string, callArgs: Record<string, unknown>, exit: number, output: string, diff = false) => {
    ts += 2_000 + Math.floor(r() * 8_000);
    if (withRequests) {
      t.applyRequest({ session_id: id, request_id: `r${n}`, model: 'p/m', prompt_tokens: 40_000, cost_usd: 0.003, ts });
    }
    const metadata =
      tool === 'bash' ? { exit } : diff ? { diff: '--- a\n+++ b\n@@ -1 +1 @@\n-x\n+y\n' } : { truncated: false };
    const part: OcToolPart = {
      type: 'tool',
      callID: `call_${n++}`,
      tool,
      state: { status: 'completed', input: callArgs, output, metadata, time: { start: ts - 50, end: ts } },
    };
    const res = toolPartToEvent(part, { session_id: id, agent: 'build', cwd: CWD }, tr, ts);
    if (res === null) return 0;
    tr = res.tracker;
    const ev: ToolEvent = { ...(res.event as ToolEvent) };
    if (!results) delete ev.result_fingerprint;
    t.applyProgress(ev);
    return t.state(id)?.level ?? 0;
  };
  const work = (count: number) => {
    for (let i = 0; i < count; i++) {
      const f = `src/m${seed}_${n}.ts`;
      if (r() < 0.12)
        call('edit', { filePath: `${CWD}/${f}`, oldString: 'a', newString: 'b' }, 0, 'Edit applied.', true);
      else if (r() < 0.5) call('read', { filePath: `${CWD}/${f}` }, 0, `<content>${f}</content>`);
      else call('bash', { command: `git log --oneline -${3 + n} -- ${f}` }, 0, `abc123 change ${f}`);
    }
  };
  work(5 + Math.floor(r() * 30));
  const before = t.state(id)?.level ?? 0;
  const len = 12 + Math.floor(r() * 19);
  let flag: number | null = null;
  let loop: number | null = null;
  for (let i = 1; i <= len; i++) {
    const out = mode === 'run' ? shape.out(i, r) : shape.poll(i, r);
    const level = call(shape.tool, shape.args, mode === 'run' ? shape.exit : 0, out);
    if (flag === null && level > before) flag = i;
    if (loop === null && LEVELS[level] === 'looping') loop = i;
  }
  work(5);
  return {
    tool: shape.tool === 'bash' ? `bash ${String(shape.args.command).split(' ')[0]}` : shape.tool,
    len,
    flag,
    loop,
  };
}

const cases = Array.from({ length: args.cases }, (_, i) => ({
  seed: args.seed * 100_000 + i,
  shape: SHAPES[i % SHAPES.length],
}));
const withRes = cases.map((c) => runCase(c.seed, c.shape, 'run', true));
const without = cases.map((c) => runCase(c.seed, c.shape, 'run', false));
const polls = cases.map((c) => runCase(c.seed, c.shape, 'poll', true));

const fmt = (xs: (number | null)[]) => {
  const got = xs.filter((x): x is number => x !== null);
  return got.length === 0
    ? 'never'
    : `median ${median(got)}, max ${Math.max(...got)}${got.length < xs.length ? `, ${xs.length - got.length} never` : ''}`;
};
console.log(
  `calls to flag an unbroken run of one call with one result (${args.cases} runs of 12 to 30 calls, seed ${args.seed})`,
);
console.log("calls are counted from the run's first call (1 = its first call)\n");
const rows: string[][] = [['run of', 'runs', 'with results: flag', 'loop', 'without (older plugin): flag', 'loop']];
for (const name of [...new Set(withRes.map((x) => x.tool)), 'all']) {
  const pick = (xs: Result[]) => (name === 'all' ? xs : xs.filter((x) => x.tool === name));
  const a = pick(withRes);
  const b = pick(without);
  rows.push([
    name,
    String(a.length),
    fmt(a.map((x) => x.flag)),
    fmt(a.map((x) => x.loop)),
    fmt(b.map((x) => x.flag)),
    fmt(b.map((x) => x.loop)),
  ]);
}
const widths = rows[0].map((_, j) => Math.max(...rows.map((row) => row[j].length)));
for (const row of rows)
  console.log(
    row
      .map((c, j) => c.padEnd(widths[j]))
      .join('  ')
      .trimEnd(),
  );
const flags = withRes.map((x) => x.flag).filter((x): x is number => x !== null);
const base = without.map((x) => x.flag).filter((x): x is number => x !== null);
const pollsFlagged = polls.filter((p) => p.flag !== null).length;
console.log(
  `\nwith results: median ${median(flags)}, max ${Math.max(...flags)} calls to flag (goal <= 5, <= 8), ${withRes.length - flags.length} never flagged; ` +
    `without: median ${median(base)}, max ${Math.max(...base)}; ratio of medians ${(median(flags) / median(base)).toFixed(2)}`,
);
console.log(
  `polls (the same call, its result changing every time): ${pollsFlagged} of ${polls.length} flagged (goal 0)`,
);
if (median(flags) > 5 || Math.max(...flags) > 8 || flags.length < withRes.length || pollsFlagged > 0)
  process.exitCode = 1;
