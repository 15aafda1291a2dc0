// The notifier on Redis (a redis-server of the bench's own unless --url names one), a
// no-op channel, concurrency 1 (the default lane), against its budget (at least 1,000
// alerts/s sustained on one instance):
//   latency   notify -> delivered at --rate alerts/s (p50, p99)
//   capacity  the highest offered rate (a ladder of steps, --step-ms each, then
//             bisections of the last gap; a step that misses runs once more) whose p99
//             stays within 1 s
//   cost      Redis server CPU and Node CPU per alert (INFO cpu and process.cpuUsage
//             deltas over the latency run), and the commands Redis ran per alert
// --runs runs; the last line gives the range and the budget.
//   npm run bench:notifier [-- --rate 500 --count 3000 --runs 3]
import 'reflect-metadata';
import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { z } from 'zod';
import { createRegistry } from '../builtins.ts';
import type { ChannelPlugin } from '../core/contracts.ts';
import { RedisStore } from '../core/store/redis.ts';
import { createVigil } from '../index.ts';
import { benchArgs } from './args.ts';
import { ownRedis } from './serve.ts';

const args = benchArgs(
  z.strictObject({
    rate: z.coerce.number().int().positive().default(500),
    count: z.coerce.number().int().positive().default(3000),
    runs: z.coerce.number().int().positive().default(3),
    'step-ms': z.coerce.number().int().positive().default(2000),
    capacity: z.enum(['on', 'off']).default('on'),
    url: z.string().optional(),
  }),
);

const url = args.url ?? (await ownRedis()).url;
const admin = new Redis(url);

function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] ?? Number.NaN;
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

/** Redis server CPU seconds so far (user + sys of the server). */
async function redisCpu(): Promise<number> {
  const info = await admin.info('cpu');
  const f = (name: string) => Number(new RegExp(`${name}:([\\d.]+)`).exec(info)?.[1] ?? 0);
  return f('used_cpu_user') + f('used_cpu_sys');
}

/** Commands Redis ran since the last reset, by name (a Lua script's inner commands counted too). */
async function commandCalls(): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  for (const m of (await admin.info('commandstats')).matchAll(/cmdstat_([^:]+):calls=(\d+)/g)) {
    if (!/^(info|config)/.test(m[1])) out.set(m[1], Number(m[2]));
  }
  return out;
}

/** One system under test: `fire(key)` raises alert `key`; `delivered(key, ms)` is called when it arrives. */
interface System {
  fire(key: string): void;
  close(): Promise<void>;
}
type Make = (onDelivered: (key: string) => void) => Promise<System>;

const vigilNotifier: Make = async (onDelivered) => {
  const prefix = `bench-vigil-${randomUUID().slice(0, 8)}`;
  const noop: ChannelPlugin<Record<string, never>> = {
    kind: 'channel',
    type: 'noop',
    options: z.strictObject({}),
    create: (_c, _o, name) => ({
      type: 'noop',
      name,
      async send(a) {
        onDelivered(a.dedup_key);
      },
    }),
  };
  const v = await createVigil({
    registry: createRegistry().register(noop),
    env: {},
    overlay: {
      store: { backend: 'redis', redis_url: url, key_prefix: prefix },
      notifications: {
        log_size: 1000,
        channels: [{ name: 'noop', type: 'noop', min_severity: 'info', rate_limit: { max: 1_000_000, window: '1h' } }],
      },
    },
  });
  return {
    fire(key) {
      void v.notifier.notify({
        dedup_key: key,
        severity: 'warning',
        title: 'stalling',
        summary: 'bench',
        source: 'bench',
      });
    },
    async close() {
      await v.close();
      const s = new RedisStore({ url, prefix });
      await s.flushNamespace();
      await s.close();
    },
  };
};

interface Step {
  p50: number;
  p99: number;
  /** Redis server CPU and this process's CPU per alert, us. */
  redisUs: number;
  nodeUs: number;
  /** Commands Redis ran per alert, by name. */
  commands: Map<string, number>;
  /** Every alert arrived within the wait. */
  complete: boolean;
}

/** `count` alerts at `rate`/s through a fresh system; latency from fire to delivery. */
async function step(make: Make, rate: number, count: number, tag: string): Promise<Step> {
  const started = new Map<string, number>();
  const lat: number[] = [];
  const sys = await make((key) => {
    const t = started.get(key);
    if (t !== undefined) lat.push(performance.now() - t);
  });
  // A warm-up alert: scripts loaded, queues set up.
  started.set(`${tag}-warm`, performance.now());
  sys.fire(`${tag}-warm`);
  for (let i = 0; i < 200 && lat.length < 1; i++) await sleep(10);
  lat.length = 0;
  await admin.config('RESETSTAT');
  const cpu0 = await redisCpu();
  const node0 = process.cpuUsage();
  await paced(count, rate, (i) => {
    const key = `${tag}-${i}`;
    started.set(key, performance.now());
    sys.fire(key);
  });
  const until = performance.now() + 30_000;
  while (lat.length < count && performance.now() < until) await sleep(20);
  const node = process.cpuUsage(node0);
  const redisUs = ((await redisCpu()) - cpu0) * 1e6;
  const calls = await commandCalls();
  const complete = lat.length >= count;
  await sys.close();
  return {
    p50: pct(lat, 50),
    p99: complete ? pct(lat, 99) : Number.POSITIVE_INFINITY,
    redisUs: redisUs / count,
    nodeUs: (node.user + node.system) / count,
    commands: new Map([...calls].map(([k, n]) => [k, n / count])),
    complete,
  };
}

/**
 * Whether `rate` is sustained (p99 within 1 s). A step that misses is run once more: on
 * a shared 2-core machine one scheduling stall can push a single step's p99 past the
 * line, and that should not end the ladder.
 */
async function sustained(make: Make, rate: number, tag: string): Promise<Step | undefined> {
  for (let t = 0; t < 2; t++) {
    const s = await step(make, rate, Math.round((rate * args['step-ms']) / 1000), `${tag}-${rate}-${t}`);
    if (s.p99 <= 1000) return s;
  }
  return undefined;
}

/**
 * The highest sustained rate: a ladder x1.4 from 500/s up to the first rate missed,
 * then BISECTIONS halvings of the gap between the last rate held and that one (0: not
 * even the first step).
 */
const BISECTIONS = 3;
async function capacity(run: number): Promise<{ rate: number; p99: number }> {
  let best = { rate: 0, p99: Number.NaN };
  let missed: number | undefined;
  for (let rate = 500; rate <= 40_000 && missed === undefined; rate = Math.round(rate * 1.4)) {
    const s = await sustained(vigilNotifier, rate, `vc${run}`);
    if (s) best = { rate, p99: s.p99 };
    else missed = rate;
  }
  for (let i = 0; i < BISECTIONS && missed !== undefined && best.rate > 0; i++) {
    const rate = Math.round((best.rate + missed) / 2);
    const s = await sustained(vigilNotifier, rate, `vc${run}`);
    if (s) best = { rate, p99: s.p99 };
    else missed = rate;
  }
  return best;
}

const ms = (x: number) => `${x.toFixed(2).padStart(7)} ms`;
const top = (c: Map<string, number>) =>
  [...c]
    .sort((a, b) => b[1] - a[1])
    .slice(0, 6)
    .map(([k, n]) => `${k} ${n.toFixed(1)}`)
    .join(', ');

console.log(
  `notifier bench: ${args.count} alerts at ${args.rate}/s, ${args.url ? `Redis ${args.url}` : 'a redis-server of its own'}, no-op channel, concurrency 1, ${args.runs} runs`,
);
const held: number[] = [];
for (let run = 1; run <= args.runs; run++) {
  const g = await step(vigilNotifier, args.rate, args.count, `v${run}`);
  console.log(`run ${run}`);
  console.log(`  notify -> delivered   p50 ${ms(g.p50)}   p99 ${ms(g.p99)}`);
  console.log(
    `  per alert: Redis CPU ${g.redisUs.toFixed(0)} us, Node CPU ${g.nodeUs.toFixed(0)} us; commands: ${top(g.commands)}`,
  );
  if (args.capacity === 'on') {
    const c = await capacity(run);
    held.push(c.rate);
    console.log(
      `  sustained (p99 <= 1 s; a ladder x1.4 from 500/s, then ${BISECTIONS} bisections; ${args['step-ms']} ms steps, a miss tried twice): ${c.rate}/s (p99 ${c.p99.toFixed(0)} ms)`,
    );
  }
}
if (held.length)
  console.log(
    `budget: the notifier sustains ${Math.min(...held)}-${Math.max(...held)} alerts/s on one instance with p99 <= 1 s (budget >= 1,000/s): ${Math.min(...held) >= 1_000 ? 'met' : 'NOT MET'}`,
  );
admin.disconnect();
process.exit(0);
