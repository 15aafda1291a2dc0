// `vigil serve` as shipped (its own process, default config and log level) under load,
// each figure beside its baseline measured in the same run:
// - POST /progress on the memory backend vs a bare fastify route with the same bodies;
// - the same with each session's key (X-Vigil-Session-Key, as the plugin sends it) vs
//   without, per backend;
// - the same on Redis vs memory, and N instances on one Redis vs one;
// - the gate's p99 while a channel hangs for 30 s vs a channel that answers at once
//   (an embedding with such a channel, bench/service-server.ts).
// Load from autocannon in this process; with N instances the connections are spread
// over them.
//   npm run bench:service [-- --backend memory|redis|both --instances 2 --duration 10 --connections 10]
import { type ChildProcess, spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import autocannon from 'autocannon';
import { z } from 'zod';
import { sessionKey } from '../core/session-key.ts';
import { benchArgs } from './args.ts';
import { deleteKeys, track, vigilServe } from './serve.ts';

const args = benchArgs(
  z.strictObject({
    backend: z.enum(['memory', 'redis', 'both']).default('both'),
    instances: z.coerce.number().int().min(1).max(8).default(2),
    duration: z.coerce.number().int().positive().default(10),
    connections: z.coerce.number().int().positive().default(10),
    redis: z.url({ protocol: /^redis$/ }).default('redis://127.0.0.1:6379'),
    gate: z.enum(['yes', 'no']).default('yes'),
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
const t0 = Date.now() - 60_000;
// Each session's key from a secret of this run, as the plugin derives it.
const secret = randomBytes(32);
const keyOf = new Map(calls.slice(0, 200).map((c) => [c.session, `${c.session}=${sessionKey(secret, c.session)}`]));
const keyed = (i: number) => ({ 'x-vigil-session-key': keyOf.get(calls[i % calls.length].session) as string });
const ev = (i: number) => {
  const c = calls[i % calls.length];
  return `{"session_id":"${c.session}","agent":"build","tool":"read","call_id":"call_${i}","fingerprint":"${c.fingerprint}","target":"${c.target}","exit":0,"landed":${c.landed},"ts":${t0 + (i % 60_000)}}`;
};

interface Load {
  rps: number;
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
async function load(
  urls: string[],
  path: string,
  body: (i: number) => string,
  headers?: (i: number) => Record<string, string>,
): Promise<Load> {
  const n = urls.length;
  const per = Math.max(1, Math.round(args.connections / n));
  const rs = await Promise.all(
    urls.map((url, k) => {
      let i = k;
      const next = (req: { headers?: Record<string, string> }) => {
        const b = { ...req, body: body(i), ...(headers ? { headers: { ...req.headers, ...headers(i) } } : {}) };
        i += n;
        return b;
      };
      return autocannon({
        url: `${url}${path}`,
        method: 'POST',
        connections: per,
        duration: args.duration,
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

async function measure(
  start: () => Promise<{ url: string; child: ChildProcess }[]>,
  path: string,
  body: (i: number) => string,
  headers?: (i: number) => Record<string, string>,
): Promise<Load> {
  const servers = await start();
  try {
    const urls = servers.map((s) => s.url);
    await load(urls, path, body, headers).catch(() => undefined); // warm-up
    const cpu = () => servers.reduce((a, s) => a + (cpuOf(s.child.pid) ?? Number.NaN), 0);
    const before = cpu();
    const r = await load(urls, path, body, headers);
    const used = cpu() - before;
    return { ...r, ...(Number.isFinite(used) && r.requests ? { cpuUs: used / r.requests } : {}) };
  } finally {
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

/** Each Redis run in a key prefix of its own, deleted afterwards. */
let runs = 0;
const prefixes: string[] = [];
function redisConfig(): Record<string, unknown> {
  const prefix = `vigilbench${process.pid}x${++runs}`;
  prefixes.push(prefix);
  return { server, store: { backend: 'redis', redis_url: args.redis, key_prefix: prefix } };
}

// The default per-address rate limit (3000 a minute) would answer most of this load
// 429 from one address: it stays on (its cost is measured) with a ceiling above the load.
const server = { rate_limit: { max: 100_000_000 } };
const memory = { server, store: { backend: 'memory' } };
const out: string[] = [
  `service bench: vigil serve as shipped (server.rate_limit.max raised), ${args.connections} connections, ${args.duration} s each, node ${process.version}`,
];
try {
  const bare = await measure(async () => [await embedded('bare')], '/progress', ev);
  out.push(line('bare fastify POST (same bodies)', bare));
  let mem: Load | undefined;
  if (args.backend !== 'redis') {
    mem = await measure(async () => [await vigilServe(memory)], '/progress', ev);
    out.push(line('vigil serve, memory: POST /progress', mem));
    out.push(`  memory vs bare fastify: ${ratio(mem, bare)}   (goal >= 0.8x)`);
    const memKeyed = await measure(async () => [await vigilServe(memory)], '/progress', ev, keyed);
    out.push(line('vigil serve, memory: with session keys', memKeyed));
    out.push(`  memory, keys vs none: ${ratio(memKeyed, mem)}`);
  }
  if (args.backend !== 'memory') {
    const one = await measure(async () => [await vigilServe(redisConfig())], '/progress', ev);
    out.push(line('vigil serve, redis x1: POST /progress', one));
    out.push(`  redis x1 vs bare fastify: ${ratio(one, bare)}`);
    if (mem) out.push(`  redis x1 vs memory: ${ratio(one, mem)}   (goal >= 0.5x)`);
    const oneKeyed = await measure(async () => [await vigilServe(redisConfig())], '/progress', ev, keyed);
    out.push(line('vigil serve, redis x1: with session keys', oneKeyed));
    out.push(`  redis x1, keys vs none: ${ratio(oneKeyed, one)}`);
    if (args.instances > 1) {
      const n = args.instances;
      const many = await measure(
        async () => {
          const cfg = redisConfig();
          return Promise.all(Array.from({ length: n }, () => vigilServe(cfg)));
        },
        '/progress',
        ev,
      );
      out.push(line(`vigil serve, redis x${n} (one Redis)`, many));
      out.push(`  redis x${n} vs x1: ${(many.rps / one.rps).toFixed(2)}x   (goal >= 1.7x for 2)`);
    }
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
  await deleteKeys(args.redis, prefixes).catch((e) =>
    out.push(`(could not delete the bench keys: ${(e as Error).message})`),
  );
}
console.log(out.join('\n'));
process.exit(0);
