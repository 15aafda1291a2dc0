// The service's cost per progress event with no HTTP around it: vigil.ingest() on the
// memory backend in this process, as the /progress route calls it, single events and
// batches of 10 and 50, beside a one-shot sha256 of each event's body (the same unit as
// bench:judge's baseline), in one run. --off money,hygiene,breaker switches detectors
// off, so each one's share of an event's cost is a difference of two runs.
//   npm run bench:ingest [-- --events 100000 --batch 50 --off money]
import 'reflect-metadata';
import { createHash } from 'node:crypto';
import { z } from 'zod';
import { createRegistry } from '../builtins.ts';
import { silentLogger } from '../core/logger.ts';
import type { ProgressEvent } from '../core/wire.ts';
import { createVigil } from '../index.ts';
import { benchArgs } from './args.ts';

const args = benchArgs(
  z.strictObject({
    events: z.coerce.number().int().positive().default(100_000),
    batch: z.coerce.number().int().positive().optional(),
    /** Switch detectors off (comma list of config sections: money,hygiene,breaker,progress) to see each one's share. */
    off: z.string().default(''),
  }),
);

const calls = Array.from({ length: 20_000 }, (_, i) => ({
  session: `ses_bench_${i % 200}`,
  fingerprint: createHash('sha256').update(`read src/file${i}.ts`).digest('hex'),
  target: `src/file${i}.ts`,
  landed: i % 50 === 0,
}));
let id = 0;
const ev = (i: number): ProgressEvent => {
  const c = calls[i % calls.length];
  return {
    kind: 'tool',
    session_id: c.session,
    agent: 'build',
    tool: 'read',
    call_id: `call_${id++}`,
    fingerprint: c.fingerprint,
    target: c.target,
    exit: 0,
    landed: c.landed,
    ts: Date.now(),
  } as ProgressEvent;
};

const vigil = () =>
  createVigil({
    registry: createRegistry(),
    env: {},
    logger: silentLogger(),
    overlay: {
      store: { backend: 'memory' },
      ...Object.fromEntries(
        args.off
          .split(',')
          .filter(Boolean)
          .map((k) => [k, { enabled: false }]),
      ),
    },
  });

/** us per event of `n` events in batches of `batch`, on a Vigil of its own (warmed up first). */
async function run(batch: number, n: number): Promise<number> {
  const v = await vigil();
  await feed(v, batch, 10_000);
  const us = await feed(v, batch, n);
  return us;
}

async function feed(v: Awaited<ReturnType<typeof vigil>>, batch: number, n: number): Promise<number> {
  // A batch is one session's calls, as a sensor sends them.
  const t0 = process.hrtime.bigint();
  // Batch k goes to session k mod 200: every case spreads over all 200 sessions.
  for (let k = 0; k * batch < n; k++) {
    const evs: ProgressEvent[] = [];
    for (let j = 0; j < batch; j++) evs.push(ev((k % 200) + 200 * (Math.floor(k / 200) * batch + j)));
    await v.ingest(evs, {});
  }
  return Number(process.hrtime.bigint() - t0) / 1e3 / n;
}

function sha(n: number): number {
  const bodies = Array.from({ length: 1000 }, (_, i) => JSON.stringify(ev(i)));
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < n; i++)
    createHash('sha256')
      .update(bodies[i % 1000])
      .digest('hex');
  return Number(process.hrtime.bigint() - t0) / 1e3 / n;
}

const sizes = args.batch ? [args.batch] : [1, 10, 50];
const base = sha(args.events);
console.log(`ingest bench: memory backend, in process, ${args.events} events per case, node ${process.version}`);
console.log(`sha256 one-shot of the event body: ${base.toFixed(2)} us`);
for (const b of sizes) {
  const us = await run(b, args.events);
  console.log(`batch ${String(b).padStart(2)}: ${us.toFixed(2)} us/event  (${(base / us).toFixed(3)}x sha256)`);
}
