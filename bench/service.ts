// `vigil serve` as shipped (its own process, default config and log level) under load,
// against the speed budgets from real load (agents per service core and per Redis core
// at one tool call every --calls-per-agent seconds, batches of 50 against single events):
// - POST /progress on the memory backend and on Redis, single events;
// - the same with each session's key (X-Vigil-Session-Key, as the plugin sends it) vs
//   without, per backend;
// - the gate's p99 while a channel hangs for 30 s vs a channel that answers at once
//   (an embedding with such a channel, bench/service-server.ts).
// - batches: the same events posted 10 and 50 to a request (the plugin's batch form),
//   events/s per service core beside single-event requests;
// - conflicts: the same single events and batches on Redis to a Vigil in this process,
//   counting its units' commits and those refused for a conflict (judged again), by key;
// - scale on paper: Redis server CPU per progress event (INFO cpu delta over the
//   measured load; INFO commandstats says which commands), service CPU per event, and
//   what one Redis core and one service core sustain at that cost (docs/development.md).
// Load from autocannon in this process. Redis: a redis-server of the bench's own unless
// --redis names one.
//   npm run bench:service [-- --backend memory|redis|both --duration 10 --connections 10 --rate 1000]
import 'reflect-metadata';
import { type ChildProcess, spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import autocannon from 'autocannon';
import { Redis } from 'ioredis';
import { z } from 'zod';
import { createRegistry } from '../builtins.ts';
import { silentLogger } from '../core/logger.ts';
import { sessionKey } from '../core/session-key.ts';
import { createVigil } from '../index.ts';
import { buildServer } from '../service/server.ts';
import { benchArgs } from './args.ts';
import { deleteKeys, ownRedis, track, vigilServe } from './serve.ts';

const args = benchArgs(
  z.strictObject({
    backend: z.enum(['memory', 'redis', 'both']).default('both'),
    duration: z.coerce.number().int().positive().default(10),
    connections: z.coerce.number().int().positive().default(10),
    redis: z.url({ protocol: /^redis$/ }).optional(),
    gate: z.enum(['yes', 'no']).default('yes'),
    batches: z.enum(['yes', 'no']).default('yes'),
    conflicts: z.enum(['yes', 'no']).default('yes'),
    /** Tool calls per agent per second while it works, for the agents-per-Redis figure. */
    'calls-per-agent': z.coerce.number().positive().default(0.2),
    /** Offered requests/s of every load (all instances together); unset: as fast as answered. */
    rate: z.coerce.number().int().positive().optional(),
  }),
);

/** The embedded servers of bench/service-server.ts (bare fastify, the gate with a channel). */
async function embedded(mode: string): Promise<{ url: string; child: ChildProcess }> {
  const child = track(
    spawn(process.execPath, ['bin/run-ts.mjs', 'bench/service-server.ts', mode], {
      stdio: ['ignore', 'pipe', 'inherit'],
    }),
  );
  const url = await new Promise<string>((resolve, reject) => {
    child.stdout!.on('data', (d) => {
      const m = /ready (\S+)/.exec(String(d));
      if (m) resolve(m[1]);
    });
    child.once('exit', (c) => reject(new Error(`server ${mode} exited ${c}`)));
  });
  return { url, child };
}

// Progress events over 200 sessions (fingerprints as the plugin sends them): healthy
// traffic, 20,000 distinct calls with a landed change now and then, so the figure is the
// per-event hot path. Every request has a call id of its own: the service drops a call
// id it has judged already (a client's retry), which would otherwise be measured.
// (A looping stream also carries its pending directives back in every answer until the
// plugin acknowledges them.)
const calls = Array.from({ length: 20_000 }, (_, i) => ({
  session: `ses_bench_${i % 200}`,
  fingerprint: createHash('sha256').update(`read src/file${i}.ts`).digest('hex'),
  target: `src/file${i}.ts`,
  landed: i % 50 === 0,
}));
// Each session's key from a secret of this run, as the plugin derives it.
const secret = randomBytes(32);
const keyOf = new Map(calls.slice(0, 200).map((c) => [c.session, `${c.session}=${sessionKey(secret, c.session)}`]));
const keyed = (i: number) => ({ 'x-vigil-session-key': keyOf.get(calls[i % calls.length].session) as string });
const ev = (i: number, id = i) => {
  const c = calls[i % calls.length];
  return `{"session_id":"${c.session}","agent":"build","tool":"read","call_id":"call_${id}","fingerprint":"${c.fingerprint}","target":"${c.target}","exit":0,"landed":${c.landed},"ts":${Date.now()}}`;
};

interface Load {
  rps: number;
  /** Events per request. */
  batch?: number;
  /** Redis server CPU per event (us) and the commands it ran per event (measured load only). */
  redisUs?: number;
  commands?: [string, number][];
  p50: number;
  p99: number;
  errors: number;
  /** Server CPU (user + system, every instance) per request, microseconds. */
  cpuUs?: number;
  requests?: number;
}

/** CPU time a process has used, in microseconds (Linux /proc; undefined elsewhere). */
function cpuOf(pid: number | undefined): number | undefined {
  try {
    const f = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const rest = f.slice(f.lastIndexOf(')') + 2).split(' ');
    // utime and stime are fields 14 and 15 (clock ticks, 100 a second on Linux).
    return ((Number(rest[11]) + Number(rest[12])) / 100) * 1e6;
  } catch {
    return undefined;
  }
}

/**
 * autocannon on every url at once, the connections spread over them; requests/s summed.
 * Each session's events go to one instance (the k-th url gets the sessions k mod N), as
 * a plugin that keeps its connection to one instance sends them.
 */
/** The next request number no load has used yet. */
let issued = 0;

async function load(
  urls: string[],
  path: string,
  body: (i: number) => string,
  headers?: (i: number) => Record<string, string>,
): Promise<Load> {
  const n = urls.length;
  const per = Math.max(1, Math.round(args.connections / n));
  // Request numbers go on from the last load (the warm-up's included): a number used
  // again would be a call id the service has judged already, a retry dropped before any
  // judging. A multiple of 1000 keeps each session on its instance (200 sessions, n <= 8).
  const base = Math.ceil(issued / 1000) * 1000;
  const rs = await Promise.all(
    urls.map((url, k) => {
      let i = base + k;
      const next = (req: { headers?: Record<string, string> }) => {
        const b = { ...req, body: body(i), ...(headers ? { headers: { ...req.headers, ...headers(i) } } : {}) };
        i += n;
        issued = Math.max(issued, i);
        return b;
      };
      return autocannon({
        url: `${url}${path}`,
        method: 'POST',
        connections: per,
        duration: args.duration,
        ...(args.rate ? { overallRate: args.rate / n } : {}),
        headers: { 'content-type': 'application/json' },
        requests: [{ setupRequest: (req) => next(req as { headers?: Record<string, string> }) as typeof req }],
      });
    }),
  );
  return {
    requests: rs.reduce((a, r) => a + r.requests.total, 0),
    rps: rs.reduce((a, r) => a + r.requests.average, 0),
    p50: Math.max(...rs.map((r) => r.latency.p50)),
    p99: Math.max(...rs.map((r) => r.latency.p99)),
    errors: rs.reduce((a, r) => a + r.errors + r.non2xx, 0),
  };
}

/** Redis server CPU seconds so far (user + sys). */
async function redisCpu(r: Redis): Promise<number> {
  const info = await r.info('cpu');
  const f = (name: string) => Number(new RegExp(`${name}:([\\d.]+)`).exec(info)?.[1] ?? 0);
  return f('used_cpu_user') + f('used_cpu_sys');
}

/** Commands Redis ran since the last reset (a script's inner commands too), most first. */
async function commandCalls(r: Redis): Promise<[string, number][]> {
  const out: [string, number][] = [];
  for (const m of (await r.info('commandstats')).matchAll(/cmdstat_([^:]+):calls=(\d+)/g))
    if (!/^(info|config)/.test(m[1])) out.push([m[1], Number(m[2])]);
  return out.sort((a, b) => b[1] - a[1]);
}

async function measure(
  start: () => Promise<{ url: string; child: ChildProcess }[]>,
  path: string,
  body: (i: number) => string,
  o: { batch?: number; redis?: string; headers?: (i: number) => Record<string, string> } = {},
): Promise<Load> {
  const servers = await start();
  const admin = o.redis ? new Redis(o.redis) : undefined;
  const headers = o.headers;
  try {
    const urls = servers.map((s) => s.url);
    await load(urls, path, body, headers).catch(() => undefined); // warm-up
    const cpu = () => servers.reduce((a, s) => a + (cpuOf(s.child.pid) ?? Number.NaN), 0);
    if (admin) await admin.config('RESETSTAT');
    const r0 = admin ? await redisCpu(admin) : 0;
    const before = cpu();
    const r = await load(urls, path, body, headers);
    const used = cpu() - before;
    const batch = o.batch ?? 1;
    const events = (r.requests ?? 0) * batch;
    const out: Load = { ...r, batch, ...(Number.isFinite(used) && r.requests ? { cpuUs: used / r.requests } : {}) };
    if (admin && events) {
      out.redisUs = (((await redisCpu(admin)) - r0) * 1e6) / events;
      out.commands = (await commandCalls(admin)).map(([k, n]) => [k, n / events]);
    }
    return out;
  } finally {
    admin?.disconnect();
    for (const s of servers) s.child.kill('SIGTERM');
    await Promise.all(
      servers.map((s) => (s.child.exitCode !== null ? undefined : new Promise((r) => s.child.once('exit', r)))),
    );
  }
}

const line = (name: string, r: Load) =>
  `${name.padEnd(40)} ${String(Math.round(r.rps)).padStart(7)} req/s   p50 ${r.p50} ms   p99 ${r.p99} ms   errors ${r.errors}${r.cpuUs !== undefined ? `   server CPU ${r.cpuUs.toFixed(0)} us/req` : ''}`;
// Throughput, and (the steadier figure on a shared machine, where the load generator
// takes a core too) server CPU per request, inverted so that higher is better.
const ratio = (a: Load, b: Load) =>
  `${(a.rps / b.rps).toFixed(2)}x` +
  (a.cpuUs !== undefined && b.cpuUs !== undefined ? ` (CPU per request: ${(b.cpuUs / a.cpuUs).toFixed(2)}x)` : '');

/**
 * Unit commits and conflicts (a commit refused because a key it read changed: the unit is
 * judged again) of `body` on Redis, counted at the unit layer of a Vigil in this process
 * (the service's own process cannot be asked), with the conflicting keys by name
 * (session and call numbers folded).
 */
async function conflictRun(body: (i: number) => string): Promise<string> {
  const v = await createVigil({
    registry: createRegistry(),
    env: {},
    logger: silentLogger(),
    overlay: redisConfig(),
  });
  const base = v.store.base;
  const commit = base.commitUnit.bind(base);
  let commits = 0;
  let refused = 0;
  const byKey = new Map<string, number>();
  base.commitUnit = async (plan) => {
    const r = await commit(plan);
    commits++;
    if (!r.ok && 'conflicts' in r) {
      refused++;
      for (const [key] of r.conflicts) {
        const name = key.replace(/ses_bench_\d+/g, '<session>').replace(/call_\d+/g, '<call>');
        byKey.set(name, (byKey.get(name) ?? 0) + 1);
      }
    }
    return r;
  };
  const app = await buildServer(v);
  try {
    const url = await app.listen({ host: '127.0.0.1', port: 0 });
    const r = await load([url], '/progress', body);
    const top = [...byKey].sort((a, b) => b[1] - a[1]).slice(0, 3);
    return `  unit commits (in-process run, ${r.requests} requests): ${commits}, refused for a conflict ${refused} (${((refused / Math.max(1, commits)) * 100).toFixed(1)}%)${top.length ? `; keys: ${top.map(([k, n]) => `${k} ${n}`).join(', ')}` : ''}`;
  } finally {
    await app.close();
    await v.close();
  }
}

/** Each Redis run in a key prefix of its own, deleted afterwards. */
let runs = 0;
const prefixes: string[] = [];
const redisUrl = args.backend === 'memory' ? '' : (args.redis ?? (await ownRedis()).url);
function redisConfig(): Record<string, unknown> {
  const prefix = `vigilbench${process.pid}x${++runs}`;
  prefixes.push(prefix);
  return { server, store: { backend: 'redis', redis_url: redisUrl, key_prefix: prefix } };
}

/**
 * `k` events to a request: the batch form of POST /progress, as a sensor sends it (the
 * calls of one agent's session; concurrent requests are of different sessions).
 */
const batchOf = (k: number) => (i: number) => {
  // Request i is session i mod 200's next k calls: the calls it gets as single events
  // (every 200th, so it lands as often), with call ids of their own.
  const s = i % 200;
  const first = Math.floor(i / 200) * k;
  return `[${Array.from({ length: k }, (_, j) => ev((first + j) * 200 + s, i * k + j)).join(',')}]`;
};
/** Events per second one service core sustains at this load's CPU per request. */
const perCore = (r: Load) => (r.cpuUs ? ((r.batch ?? 1) * 1e6) / r.cpuUs : Number.NaN);
const k = (x: number) => (x >= 10_000 ? `${Math.round(x / 1000)}k` : String(Math.round(x)));

// The default per-address rate limit (3000 a minute) would answer most of this load
// 429 from one address: it stays on (its cost is measured) with a ceiling above the load.
const server = { rate_limit: { max: 100_000_000 } };
const memory = { server, store: { backend: 'memory' } };
/** Tool calls per second of one working agent the budgets count with (one every 5 s). */
const AGENT_RATE = 0.2;
const budgets: string[] = [];
const out: string[] = [
  `service bench: vigil serve as shipped (server.rate_limit.max raised), ${args.connections} connections, ${args.duration} s each, node ${process.version}`,
];
try {
  let mem: Load | undefined;
  if (args.backend !== 'redis') {
    mem = await measure(async () => [await vigilServe(memory)], '/progress', ev);
    out.push(line('vigil serve, memory: POST /progress', mem));
    if (args.batches === 'yes') {
      for (const b of [10, 50]) {
        const mb = await measure(async () => [await vigilServe(memory)], '/progress', batchOf(b), { batch: b });
        out.push(
          `vigil serve, memory: batches of ${b}`.padEnd(40) +
            ` ${k(mb.rps * b)} events/s   p99 ${mb.p99} ms   errors ${mb.errors}   service CPU ${((mb.cpuUs ?? 0) / b).toFixed(0)} us/event`,
        );
        out.push(
          `  events/s per service core, batches of ${b} vs single: ${(perCore(mb) / perCore(mem)).toFixed(2)}x${b === 50 ? '   (budget >= 5x)' : ''}`,
        );
      }
    }
    const memKeyed = await measure(async () => [await vigilServe(memory)], '/progress', ev, { headers: keyed });
    out.push(line('vigil serve, memory: with session keys', memKeyed));
    out.push(`  memory, keys vs none: ${ratio(memKeyed, mem)}`);
  }
  if (args.backend !== 'memory') {
    const one = await measure(async () => [await vigilServe(redisConfig())], '/progress', ev, { redis: redisUrl });
    out.push(line('vigil serve, redis x1: POST /progress', one));
    if (args.conflicts === 'yes') out.push(await conflictRun(ev));
    if (mem) out.push(`  redis x1 vs memory: ${ratio(one, mem)}`);
    // Scale on paper: what limits N instances is the one Redis behind them.
    const rUs = one.redisUs ?? Number.NaN;
    const perRedisCore = 1e6 / rUs;
    out.push(
      `  Redis server CPU per progress event ${rUs.toFixed(1)} us; commands per event: ${(one.commands ?? [])
        .slice(0, 8)
        .map(([c, n]) => `${c} ${n.toFixed(2)}`)
        .join(', ')}`,
    );
    out.push(
      `  service CPU per event ${one.cpuUs?.toFixed(0)} us: one service core ${k(perCore(one))} events/s; one Redis core ${k(perRedisCore)} events/s, so about ${Math.floor(perRedisCore / perCore(one))} service cores per Redis`,
    );
    out.push(
      `  one Redis serves about ${k(perRedisCore / args['calls-per-agent'])} working agents at ${args['calls-per-agent']} tool calls/s each (single events; batches below)`,
    );
    // The speed budgets (from real load: an agent makes a tool call every few seconds).
    const agentsPerCore = (us: number | undefined) => (us ? 1e6 / us / AGENT_RATE : Number.NaN);
    const svc = agentsPerCore(one.cpuUs);
    const red = agentsPerCore(one.redisUs);
    budgets.push(
      `  agents per service core, one tool call every ${1 / AGENT_RATE} s, Redis, single events: ${k(svc)} (${one.cpuUs?.toFixed(0)} us of service CPU per event; budget >= 5k, <= 1 ms): ${svc >= 5_000 ? 'met' : 'NOT MET'}`,
      `  agents per Redis core, same: ${k(red)} (${rUs.toFixed(0)} us of Redis CPU per event; budget >= 33k, <= 150 us): ${red >= 33_000 ? 'met' : 'NOT MET'}`,
    );
    if (args.batches === 'yes') {
      for (const b of [10, 50]) {
        const rb = await measure(async () => [await vigilServe(redisConfig())], '/progress', batchOf(b), {
          batch: b,
          redis: redisUrl,
        });
        out.push(
          `vigil serve, redis x1: batches of ${b}`.padEnd(40) +
            ` ${k(rb.rps * b)} events/s   p99 ${rb.p99} ms   errors ${rb.errors}   service CPU ${((rb.cpuUs ?? 0) / b).toFixed(0)} us/event   Redis CPU ${rb.redisUs?.toFixed(1)} us/event`,
        );
        out.push(
          `  events/s per service core, batches of ${b} vs single: ${(perCore(rb) / perCore(one)).toFixed(2)}x${b === 50 ? '   (budget >= 5x)' : ''}; per Redis core: ${(rUs / (rb.redisUs ?? Number.NaN)).toFixed(2)}x`,
        );
        if (b === 50) {
          const x = perCore(rb) / perCore(one);
          budgets.push(
            `  Redis batches of 50 per service core vs single events: ${x.toFixed(2)}x (budget >= 5x): ${x >= 5 ? 'met' : 'NOT MET'}`,
          );
        }
        // (scripts: the unit commits, and BullMQ's for the alerts a batch raises)
        const per = (c: string) => (rb.commands?.find(([n]) => n === c)?.[1] ?? 0) * b;
        out.push(`  per request: scripts ${per('evalsha').toFixed(2)}, get ${per('get').toFixed(2)}`);
        if (args.conflicts === 'yes') out.push(await conflictRun(batchOf(b)));
      }
    }
    const oneKeyed = await measure(async () => [await vigilServe(redisConfig())], '/progress', ev, {
      headers: keyed,
      redis: redisUrl,
    });
    out.push(line('vigil serve, redis x1: with session keys', oneKeyed));
    out.push(`  redis x1, keys vs none: ${ratio(oneKeyed, one)}`);
  }
  if (args.gate === 'yes') {
    const gateBody = (i: number) => JSON.stringify({ conversation: `ses_bench_${i % 200}`, model: 'fake/loop-model' });
    const gateOk = await measure(async () => [await embedded('vigil-ok')], '/gate', gateBody);
    const gateHang = await measure(async () => [await embedded('vigil-hang')], '/gate', gateBody);
    out.push(line('gate, channel answering at once', gateOk));
    out.push(line('gate, channel hanging 30 s', gateHang));
    out.push(
      `  gate p99 hanging / answering: ${(gateHang.p99 / Math.max(gateOk.p99, 0.001)).toFixed(2)}x   (goal <= 1.5x)`,
    );
  }
} finally {
  await deleteKeys(redisUrl, prefixes).catch((e) =>
    out.push(`(could not delete the bench keys: ${(e as Error).message})`),
  );
}
if (budgets.length) out.push('budgets', ...budgets);
console.log(out.join('\n'));
process.exit(0);
