// What vigil/router's gate costs a streaming model router, beside baselines measured in
// the same run:
//   npm run bench:router [-- --duration 5 --connections 10 --chunks 200]
// 1. The stream tap alone (CPU): one streamed answer (OpenAI chunks, usage last) pushed
//    through the tap in 1 KiB network chunks, against the same chunks through a bare
//    pass-through Transform (which does nothing: the ratio shows the reading's cost).
//    Goal: the tap's own cost <= 5 us per KiB of answer.
// 2. A fastify router proxying to a local streaming upstream (fetch, the body sent on as
//    a web stream), with vigilGate (memory backend, warn mode: the gate asked, the
//    answer tapped and recorded) against the same router without it. Goal: >= 0.8x
//    requests/s. The load generator, router and upstream share this process.
import 'reflect-metadata';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { PassThrough, Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import autocannon from 'autocannon';
import Fastify from 'fastify';
import { z } from 'zod';
import { createVigil } from '../index.ts';
import { tapAnswer } from '../service/router/tap.ts';
import { vigilGate } from '../service/router.ts';
import { benchArgs } from './args.ts';

const args = benchArgs(
  z.strictObject({
    duration: z.coerce.number().int().positive().default(5),
    connections: z.coerce.number().int().positive().default(10),
    chunks: z.coerce.number().int().min(1).max(10_000).default(200),
    rounds: z.coerce.number().int().min(1).max(20).default(3),
  }),
);

/** A streamed answer: `chunks` text deltas of about 20 characters, a finish chunk, the usage chunk. */
function answer(chunks: number): string {
  const head = { id: 'chatcmpl-bench', object: 'chat.completion.chunk', model: 'bench/model' };
  const line = (o: object) => `data: ${JSON.stringify({ ...head, ...o })}\n\n`;
  let s = line({ choices: [{ index: 0, delta: { role: 'assistant', content: '' } }] });
  for (let i = 0; i < chunks; i++)
    s += line({ choices: [{ index: 0, delta: { content: `word ${i} of the answer ` } }] });
  s += line({ choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] });
  s += line({ choices: [], usage: { prompt_tokens: 42_000, completion_tokens: chunks * 5, total_tokens: 0 } });
  return `${s}data: [DONE]\n\n`;
}

const ANSWER = answer(args.chunks);
const BYTES = Buffer.from(ANSWER);
const split = (b: Buffer) =>
  Array.from({ length: Math.ceil(b.length / 1024) }, (_, i) => b.subarray(i * 1024, (i + 1) * 1024));
const PIECES = split(BYTES);
/** The same answer without its usage chunk: read by the tap, nothing to record. */
const NO_USAGE = split(Buffer.from(ANSWER.replace(/data: \{[^\n]*"usage"[^\n]*\n\n/, '')));

// ---------------------------------------------------------------------------
// 1. the tap alone

async function through(tapped: boolean): Promise<void> {
  // A plain byte stream, as an upstream response is (Readable.from's iterator source costs more than the tap)
  let i = 0;
  const src = new Readable({
    read() {
      this.push(i < PIECES.length ? PIECES[i++] : null);
    },
  });
  let facts = 0;
  const out = tapped
    ? (tapAnswer(src, { contentType: () => 'text/event-stream', status: () => 200, adopt: () => {} }, () => {
        facts++;
      }) as Readable)
    : src.pipe(new Transform({ transform: (c, _e, cb) => cb(null, c) }));
  await pipeline(out, new PassThrough().resume());
  if (tapped && facts !== 1) throw new Error('the tap did not report');
}

async function perAnswer(tapped: boolean, n: number): Promise<number> {
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < n; i++) await through(tapped);
  return Number(process.hrtime.bigint() - t0) / 1e3 / n; // us per answer
}

const n = 2_000;
await perAnswer(true, 200); // warm up both paths
await perAnswer(false, 200);
let bare = Number.POSITIVE_INFINITY;
let tap = Number.POSITIVE_INFINITY;
for (let r = 0; r < 5; r++) {
  bare = Math.min(bare, await perAnswer(false, n));
  tap = Math.min(tap, await perAnswer(true, n));
}
console.log(
  `stream tap, one ${(BYTES.length / 1024).toFixed(1)} KiB answer in ${PIECES.length} chunks: ${tap.toFixed(1)} us` +
    `   bare pass-through ${bare.toFixed(1)} us   ratio ${(bare / tap).toFixed(2)}` +
    `   tap's own cost ${(tap - bare).toFixed(1)} us per answer, ${((tap - bare) / (BYTES.length / 1024)).toFixed(1)} us per KiB (goal <= 5)`,
);

// ---------------------------------------------------------------------------
// 2. a streaming router, with and without the gate

const upstream = createServer((req, res) => {
  req.resume();
  req.on('end', () => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    for (const p of req.url?.includes('nousage') ? NO_USAGE : PIECES) res.write(p);
    res.end();
  });
});
await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', r));
const upstreamUrl = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`;

const vigil = await createVigil({
  overlay: {
    store: { backend: 'memory' },
    modes: { mode: 'warn' },
    notifications: { channels: [] },
    detection: { tick_interval: 0 },
  },
  env: {},
});

/**
 * `untapped`: the gate asks, but the answer goes out as octet-stream (neither read nor
 * recorded); `nousage`: the answer is read but carries no usage (nothing recorded).
 */
async function routerWith(gate: boolean, o: { untapped?: boolean; nousage?: boolean } = {}) {
  const untapped = o.untapped ?? false;
  const app = Fastify();
  if (gate) await app.register(vigilGate, { vigil, costOf: (_m, u) => u.prompt_tokens * 3e-6 });
  app.post('/v1/chat/completions', async (req, reply) => {
    const r = await fetch(`${upstreamUrl}/v1/chat/completions${o.nousage ? '?nousage' : ''}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(req.body),
    });
    const type = untapped ? 'application/octet-stream' : (r.headers.get('content-type') ?? 'text/event-stream');
    return reply.code(r.status).type(type).send(r.body);
  });
  return { app, url: await app.listen({ host: '127.0.0.1', port: 0 }) };
}

let conv = 0;
async function load(url: string) {
  const r = await autocannon({
    url: `${url}/v1/chat/completions`,
    method: 'POST',
    connections: args.connections,
    duration: args.duration,
    requests: [
      {
        setupRequest: (req) => ({
          ...req,
          // 100 conversations, as a router sees them
          headers: { 'content-type': 'application/json', 'x-session-id': `ses_bench_${conv++ % 100}` },
          body: JSON.stringify({ model: 'bench/model', stream: true, messages: [{ role: 'user', content: 'go on' }] }),
        }),
      },
    ],
  });
  if (r.non2xx) throw new Error(`${r.non2xx} answers were not 2xx`);
  return { rps: r.requests.average, p99: r.latency.p99 };
}

const plain = await routerWith(false);
const gated = await routerWith(true);
const asked = await routerWith(true, { untapped: true });
const read = await routerWith(true, { nousage: true });
const none = () => ({ rps: 0, p99: Number.POSITIVE_INFINITY });
const best = { plain: none(), gated: none(), asked: none(), read: none() };
// Interleaved rounds: both see the same machine load (the bench machine is shared).
for (let r = 0; r < args.rounds; r++) {
  for (const [k, x] of [
    ['plain', plain],
    ['gated', gated],
    ['asked', asked],
    ['read', read],
  ] as const) {
    const m = await load(x.url);
    best[k] = { rps: Math.max(best[k].rps, m.rps), p99: Math.min(best[k].p99, m.p99) };
  }
}
const recorded = (await vigil.engine.sessionRows()).filter((x) => x.session.startsWith('ses_bench_')).length;
console.log(
  `streaming router with vigilGate: ${best.gated.rps.toFixed(0)} req/s, p99 ${best.gated.p99} ms` +
    `   without: ${best.plain.rps.toFixed(0)} req/s, p99 ${best.plain.p99} ms` +
    `   ratio ${(best.gated.rps / best.plain.rps).toFixed(2)} (goal >= 0.8x)   conversations recorded: ${recorded}`,
);
console.log(
  `  of which the gate check alone (answer not read): ${best.asked.rps.toFixed(0)} req/s, p99 ${best.asked.p99} ms` +
    `   ratio to without ${(best.asked.rps / best.plain.rps).toFixed(2)}`,
);
console.log(
  `  gate check + reading the stream (no usage, nothing recorded): ${best.read.rps.toFixed(0)} req/s` +
    `   ratio to the gate check alone ${(best.read.rps / best.asked.rps).toFixed(2)}` +
    `; recording the usage: ratio ${(best.gated.rps / best.read.rps).toFixed(2)}`,
);
await plain.app.close();
await gated.app.close();
await asked.app.close();
await read.app.close();
await vigil.close();
upstream.close();
