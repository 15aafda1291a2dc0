// The chaos end-to-end cases, run again and again, each run a fresh vitest process (its
// own redis-server, its own vigil serve): a guarantee that holds 19 runs of 20 does not
// hold. One line per run (passed or failed, which case failed, the cases' own summary
// lines), then the count. Exit 1 when any run failed. Logs of every run stay in a folder.
//   npm run chaos:20                       (20 runs)
//   npm run chaos:20 -- --runs 2 [--cases 'kill -9']
import { spawn } from 'node:child_process';
import { createWriteStream, existsSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { z } from 'zod';
import { benchArgs } from '../bench/args.ts';

const ROOT = resolve(import.meta.dirname, '..');

/** The cases: the delivery-guarantees chaos case and the kill during an outage. */
const FILES = ['test/delivery-guarantees.e2e.test.ts', 'test/kill-during-outage.e2e.test.ts'];
const CASES = 'chaos: Redis shut down|kill -9 of vigil serve during a Redis outage';
/** What the cases print about themselves (counts delivered, duplicates, retries). */
const SUMMARY = /^(chaos: \d+ transitions|kill during outage:)/;

const args = benchArgs(
  z.strictObject({
    runs: z.coerce.number().int().min(1).max(100).default(20),
    /** A vitest name pattern (-t) instead of the chaos cases, for one of them alone. */
    cases: z.string().min(1).default(CASES),
  }),
);

interface Report {
  testResults: {
    name: string;
    assertionResults: { fullName: string; status: string; failureMessages?: string[] }[];
  }[];
}

// biome-ignore lint/suspicious/noControlCharactersInRegex: the escape that starts a terminal color code
const ANSI = /\x1b\[[0-9;]*m/g;

interface Run {
  ok: boolean;
  ms: number;
  failed: string[];
  /** The first lines of each failure's message. */
  why: string[];
  summary: string[];
}

function run(i: number, dir: string): Promise<Run> {
  const log = join(dir, `run-${i}.log`);
  const json = join(dir, `run-${i}.json`);
  const t0 = Date.now();
  const child = spawn(
    process.execPath,
    [
      join(ROOT, 'node_modules/vitest/vitest.mjs'),
      'run',
      ...FILES,
      '-t',
      args.cases,
      '--reporter=default',
      '--reporter=json',
      `--outputFile.json=${json}`,
    ],
    { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, NO_COLOR: '1', FORCE_COLOR: '0' } },
  );
  const out = createWriteStream(log);
  child.stdout.pipe(out);
  child.stderr.pipe(out);
  return new Promise((done) =>
    child.on('exit', (code) => {
      out.end(() => {
        const text = readFileSync(log, 'utf8').replace(ANSI, '');
        const summary = text.split('\n').filter((l) => SUMMARY.test(l));
        const report: Report | undefined = existsSync(json) ? JSON.parse(readFileSync(json, 'utf8')) : undefined;
        const results = report?.testResults.flatMap((f) => f.assertionResults) ?? [];
        const bad = results.filter((r) => r.status === 'failed');
        const failed = bad.map((r) => r.fullName);
        const why = bad.flatMap((r) => (r.failureMessages?.[0] ?? '').replace(ANSI, '').split('\n').slice(0, 4));
        const passed = results.filter((r) => r.status === 'passed').length;
        // A run that ran no case (a bad pattern, a missing redis-server) is not a pass.
        done({ ok: code === 0 && passed > 0 && failed.length === 0, ms: Date.now() - t0, failed, why, summary });
      });
    }),
  );
}

const dir = mkdtempSync(join(tmpdir(), 'vigil-chaos-runs-'));
console.log(`${args.runs} runs of ${FILES.join(', ')} -t "${args.cases}"; logs in ${dir}`);
let passed = 0;
for (let i = 1; i <= args.runs; i++) {
  const r = await run(i, dir);
  if (r.ok) passed++;
  const what = r.ok ? 'passed' : `FAILED${r.failed.length ? `: ${r.failed.join('; ')}` : ''} (log: run-${i}.log)`;
  console.log(`run ${i}/${args.runs}: ${what}, ${(r.ms / 1000).toFixed(0)} s`);
  for (const s of [...r.summary, ...r.why]) console.log(`  ${s}`);
}
console.log(`${passed} of ${args.runs} runs passed`);
process.exit(passed === args.runs ? 0 : 1);
