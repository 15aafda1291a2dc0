// Enqueue-to-delivered latency through the Redis backend with a no-op channel, at a
// steady rate, beside raw BullMQ add-to-processed latency measured in the same run.
//   npm run bench:notifier [-- --rate 500 --count 3000]
import 'reflect-metadata';
import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { Queue, Worker } from 'bullmq';
import { Redis } from 'ioredis';
import { z } from 'zod';
import { createRegistry } from '../builtins.ts';
import type { ChannelPlugin } from '../core/contracts.ts';
import { RedisStore } from '../core/store/redis.ts';
import { createVigil } from '../index.ts';
import { benchArgs } from './args.ts';

const args = benchArgs(
  z.strictObject({
    rate: z.coerce.number().int().positive().default(500),
    count: z.coerce.number().int().positive().default(3000),
    url: z.string().default(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379'),
  }),
);

function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
}

/** Fires `count` calls of `fn(i)` at `rate` per second (paced in 10 ms ticks). */
async function paced(count: number, rate: number, fn: (i: number) => void): Promise<void> {
  const t0 = performance.now();
  let i = 0;
  while (i < count) {
    const due = Math.min(count, Math.floor(((performance.now() - t0) / 1000) * rate) + 1);
    while (i < due) fn(i++);
    await sleep(10);
  }
}

async function raw(): Promise<number[]> {
  const prefix = `bench-raw-${randomUUID().slice(0, 8)}`;
  const started = new Map<string, number>();
  const lat: number[] = [];
  const conn = new Redis(args.url, { maxRetriesPerRequest: null });
  const q = new Queue('deliver-noop', { connection: new Redis(args.url), prefix });

  const w = new Worker(
    'deliver-noop',
    async (job) => {
      lat.push(performance.now() - started.get(job.id!)!);
    },
    { connection: conn, prefix, concurrency: 1 },
  );
  await w.waitUntilReady();
  await paced(args.count, args.rate, (i) => {
    const id = `j${i}`;
    started.set(id, performance.now());
    void q.add('deliver', { i }, { jobId: id, attempts: 2, removeOnComplete: { age: 86_400, count: 5000 } });
  });
  while (lat.length < args.count) await sleep(20);
  await w.close();
  await q.obliterate({ force: true });
  await q.close();
  conn.disconnect();
  return lat;
}

async function vigil(): Promise<number[]> {
  const prefix = `bench-vigil-${randomUUID().slice(0, 8)}`;
  const started = new Map<string, number>();
  const lat: number[] = [];
  const noop: ChannelPlugin<Record<string, never>> = {
    kind: 'channel',
    type: 'noop',
    options: z.strictObject({}),
    create: (_c, _o, name) => ({
      type: 'noop',
      name,
      async send(a) {
        lat.push(performance.now() - started.get(a.dedup_key)!);
      },
    }),
  };
  const v = await createVigil({
    registry: createRegistry().register(noop),
    env: {},
    overlay: {
      store: { backend: 'redis', redis_url: args.url, key_prefix: prefix },
      notifications: {
        log_size: 1000,
        channels: [{ name: 'noop', type: 'noop', min_severity: 'info', rate_limit: { max: 1_000_000, window: '1h' } }],
      },
    },
  });
  await paced(args.count, args.rate, (i) => {
    const key = `ses_${i}`;
    started.set(key, performance.now());
    void v.notifier.notify({
      dedup_key: key,
      severity: 'warning',
      title: 'stalling',
      summary: 'bench',
      source: 'bench',
    });
  });
  while (lat.length < args.count) await sleep(20);
  await v.close();
  const s = new RedisStore({ url: args.url, prefix });
  await s.flushNamespace();
  await s.close();
  return lat;
}

const r = await raw();
const g = await vigil();
const row = (name: string, xs: number[]) =>
  `${name.padEnd(34)} p50 ${pct(xs, 50).toFixed(2).padStart(7)} ms   p99 ${pct(xs, 99).toFixed(2).padStart(7)} ms`;
console.log(`notifier bench: ${args.count} alerts at ${args.rate}/s, Redis ${args.url}, no-op channel, concurrency 1`);
console.log(row('raw BullMQ add -> processed', r));
console.log(row('vigil notify -> delivered', g));
console.log(
  `ratio (vigil / raw): p50 ${(pct(g, 50) / pct(r, 50)).toFixed(2)}x   p99 ${(pct(g, 99) / pct(r, 99)).toFixed(2)}x   (goal <= 1.5)`,
);
process.exit(0);
