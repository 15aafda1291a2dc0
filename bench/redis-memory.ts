// Redis memory per tracked session with full windows: a redis-server of its own (no
// persistence, nothing else in it), a Vigil on it, then N healthy sessions each fed
// enough distinct tool calls to fill the judge's window and enough request records to
// fill session hygiene's trend; `used_memory` from INFO before and after, divided by N.
// Beside it, what each session's keys hold (MEMORY USAGE, by key family) and the raw
// size of the values, measured in the same run. Input ids (one small key per event, so
// a retry is not judged twice) expire after 15 minutes: the per-session figure is taken
// again once they are gone (deleted here), which is what a session costs after that.
//   npm run bench:redis-memory [-- --sessions 500 --turns 40 --calls 4]
import 'reflect-metadata';
import { createHash } from 'node:crypto';
import { z } from 'zod';
import type { ProgressEventInput } from '../core/wire.ts';
import { createVigil } from '../index.ts';
import { benchArgs } from './args.ts';
import { ownRedis } from './serve.ts';

const args = benchArgs(
  z.strictObject({
    sessions: z.coerce.number().int().min(10).max(100_000).default(500),
    // 40 turns of 4 calls: the judge's window (60 calls) and hygiene's trend (32 turns) full.
    turns: z.coerce.number().int().min(1).max(10_000).default(40),
    calls: z.coerce.number().int().min(1).max(100).default(4),
  }),
);

const { url, client: r, used } = await ownRedis();

const vigil = await createVigil({
  env: {},
  overlay: {
    store: { backend: 'redis', redis_url: url, key_prefix: 'vigil' },
    detection: { tick_interval: 0 },
    notifications: { channels: [] },
  },
});
// The service's own keys (knobs, queues' metadata) are there before any session.
await vigil.engine.progress([
  {
    kind: 'tool',
    session_id: 'ses_warm',
    tool: 'read',
    call_id: 'w',
    fingerprint: 'f'.repeat(64),
    target: 'x',
    landed: false,
    ts: Date.now(),
  },
]);
const before = await used();

const hex = (s: string) => createHash('sha256').update(s).digest('hex');
const t0 = Date.now() - 3_600_000;
// Each turn: a prompt, a few tool calls, a model request, the answer that ends it.
for (let k = 0; k < args.sessions; k++) {
  const session = `ses_mem_${k.toString().padStart(6, '0')}`;
  let ts = t0;
  const tick = () => {
    ts += 1000;
    return ts;
  };
  let call = 0;
  for (let turn = 0; turn < args.turns; turn++) {
    const evs: ProgressEventInput[] = [
      { kind: 'prompt', session_id: session, call_id: `u${turn}`, resume: false, ts: tick() },
    ];
    for (let c = 0; c < args.calls; c++, call++) {
      evs.push({
        kind: 'tool',
        session_id: session,
        agent: 'build',
        tool: call % 3 === 0 ? 'bash' : 'read',
        call_id: `c${call}`,
        fingerprint: hex(`${session} call ${call}`),
        target: `src/file${call % 40}.ts`,
        exit: 0,
        // Healthy: a landed change now and then.
        landed: call % 15 === 0,
        ts: tick(),
      });
    }
    await vigil.engine.requests([
      {
        session_id: session,
        request_id: `r${turn}`,
        model: 'provider/model-a',
        prompt_tokens: 20_000 + turn * 500,
        ts: tick(),
      },
    ]);
    evs.push({
      kind: 'assistant',
      session_id: session,
      call_id: `a${turn}`,
      model: 'provider/model-a',
      input_tokens: 2_000,
      output_tokens: 300,
      cache_read_tokens: 18_000 + turn * 500,
      finish: 'stop',
      visible_output: true,
      ts: tick(),
    });
    await vigil.progress(evs);
  }
}
const after = await used();

// What a session's keys hold, by family (the session part of the key replaced by *).
const families = new Map<string, { n: number; bytes: number }>();
const sampled = new Set<string>();
let stream = '0';
do {
  const [next, keys] = await r.scan(stream, 'MATCH', '*ses_mem_000*', 'COUNT', 1000);
  stream = next;
  for (const key of keys) {
    sampled.add(/ses_mem_\d+/.exec(key)?.[0] ?? '');
    // (an input id: one key per event, the session and the event's id in its name)
    const fam = key.includes(':in:') ? key.replace(/ses_mem_\d+\n.*/s, '*') : key.replace(/ses_mem_\d+/, '*');
    const f = families.get(fam) ?? { n: 0, bytes: 0 };
    f.n++;
    f.bytes += Number(await r.memory('USAGE', key));
    families.set(fam, f);
  }
} while (stream !== '0');
const keysTotal = await r.dbsize();
// The input ids, all of them (not only the sampled sessions'), then used_memory without them.
let inputKeys = 0;
stream = '0';
do {
  const [next, keys] = await r.scan(stream, 'MATCH', '*:in:*', 'COUNT', 1000);
  stream = next;
  inputKeys += keys.length;
  if (keys.length) await r.del(...keys);
} while (stream !== '0');
// (Redis shrinks its key tables on its timer, a few times a second: wait until it did)
let afterInputs = await used();
for (let i = 0; i < 20; i++) {
  await new Promise((res) => setTimeout(res, 250));
  const now = await used();
  if (now >= afterInputs) break;
  afterInputs = now;
}
if (process.env.BENCH_SHOW)
  for (const k of await r.keys('*ses_mem_000001*'))
    console.log(k, (await r.getBuffer(k))?.length, String(await r.get(k)).slice(0, 1500));

await vigil.close();
await r.quit();

const per = (after - before) / args.sessions;
console.log(
  `redis memory bench: ${args.sessions} sessions x ${args.turns} turns (prompt, ${args.calls} tool calls, a request, an answer), redis-server of its own`,
);
console.log(
  `used_memory before ${before} B, after ${after} B: ${per.toFixed(0)} B per session, the input ids of its events included`,
);
console.log(
  `without the input ids (${inputKeys}, kept 15 minutes: ${((after - afterInputs) / Math.max(1, inputKeys)).toFixed(0)} B each): ${((afterInputs - before) / args.sessions).toFixed(0)} B per session`,
);
// (the steadier figure: used_memory after the deletes still holds key-table room Redis
// gives back only gradually)
const stateBytes = [...families]
  .filter(([fam]) => !fam.includes(':in:'))
  .reduce((a, [, f]) => a + f.bytes / sampled.size, 0);
console.log(`a session's own keys (MEMORY USAGE summed, no input ids): ${stateBytes.toFixed(0)} B   (goal <= 4096 B)`);
console.log(`keys in Redis: ${keysTotal} (${(keysTotal / args.sessions).toFixed(1)} per session)`);
console.log('per-session keys by family (MEMORY USAGE, mean over the sessions sampled):');
for (const [fam, f] of [...families].sort((a, b) => b[1].bytes - a[1].bytes)) {
  const per = fam.includes(':in:') ? `${(f.n / sampled.size).toFixed(0)} per session, each` : '';
  console.log(`  ${fam.padEnd(44)} ${per} ${(f.bytes / f.n).toFixed(0).padStart(6)} B   (${f.n} sampled)`);
}
process.exit(0);
