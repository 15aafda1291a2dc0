// /progress requests/s beside a bare fastify route with the same bodies, and the gate's
// p99 while a channel hangs for 30 s vs. a channel that answers at once; each pair in
// the same run. Load from autocannon in this process, the server in a child process.
//   npm run bench:service [-- --duration 10 --connections 10]
import { type ChildProcess, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import autocannon from 'autocannon';
import { z } from 'zod';
import { benchArgs } from './args.ts';

const args = benchArgs(
  z.strictObject({
    duration: z.coerce.number().int().positive().default(10),
    connections: z.coerce.number().int().positive().default(10),
  }),
);

async function server(mode: string): Promise<{ url: string; child: ChildProcess }> {
  const child = spawn(process.execPath, ['bin/run-ts.mjs', 'bench/service-server.ts', mode], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const url = await new Promise<string>((resolve, reject) => {
    child.stdout!.on('data', (d) => {
      const m = /ready (\S+)/.exec(String(d));
      if (m) resolve(m[1]);
    });
    child.once('exit', (c) => reject(new Error(`server ${mode} exited ${c}`)));
  });
  return { url, child };
}

// 20,000 distinct progress events over 200 sessions (fingerprints as the plugin sends
// them): healthy traffic, distinct calls with a landed change now and then, so the
// figure is the per-event hot path. (A looping stream also carries its pending
// directives back in every answer until the plugin acknowledges them.)
const bodies = Array.from({ length: 20_000 }, (_, i) =>
  JSON.stringify({
    session_id: `ses_bench_${i % 200}`,
    agent: 'build',
    tool: 'read',
    call_id: `call_${i}`,
    fingerprint: createHash('sha256').update(`read src/file${i}.ts`).digest('hex'),
    target: `src/file${i}.ts`,
    exit: 0,
    landed: i % 50 === 0,
    ts: Date.now() - 60_000 + i,
  }),
);

async function load(url: string, path: string, body: (i: number) => string): Promise<autocannon.Result> {
  let i = 0;
  return autocannon({
    url: `${url}${path}`,
    method: 'POST',
    connections: args.connections,
    duration: args.duration,
    headers: { 'content-type': 'application/json' },
    requests: [{ setupRequest: (req) => ({ ...req, body: body(i++) }) }],
  });
}

async function measure(mode: string, path: string, body: (i: number) => string): Promise<autocannon.Result> {
  const s = await server(mode);
  try {
    await load(s.url, path, body).catch(() => undefined); // warm-up
    return await load(s.url, path, body);
  } finally {
    s.child.kill('SIGTERM');
  }
}

const gateBody = (i: number) => JSON.stringify({ conversation: `ses_bench_${i % 200}`, model: 'fake/loop-model' });
const ev = (i: number) => bodies[i % bodies.length];

const bare = await measure('bare', '/progress', ev);
const vigil = await measure('vigil', '/progress', ev);
const gateOk = await measure('vigil-ok', '/gate', gateBody);
const gateHang = await measure('vigil-hang', '/gate', gateBody);

const line = (name: string, r: autocannon.Result) =>
  `${name.padEnd(38)} ${String(Math.round(r.requests.average)).padStart(7)} req/s   p50 ${r.latency.p50} ms   p99 ${r.latency.p99} ms   errors ${r.errors + r.non2xx}`;
console.log(`service bench: ${args.connections} connections, ${args.duration} s each, memory backend`);
console.log(line('bare fastify POST (same bodies)', bare));
console.log(line('vigil POST /progress', vigil));
console.log(
  `  /progress throughput vs bare: ${((vigil.requests.average / bare.requests.average) * 100).toFixed(0)}%   (goal >= 70%)`,
);
console.log(line('gate, channel answering at once', gateOk));
console.log(line('gate, channel hanging 30 s', gateHang));
console.log(
  `  gate p99 hanging / answering: ${(gateHang.latency.p99 / Math.max(gateOk.latency.p99, 0.001)).toFixed(2)}x   (goal <= 1.5x)`,
);
process.exit(0);
