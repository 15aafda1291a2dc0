// Detection latency as an operator meets it: `vigil serve` in its own process, a loop
// fed through POST /progress, and from the POST of the event that turns the session
// `looping` to (a) the router gate refusing it (POST /gate, auto_recover) and (b) a
// local webhook receiver getting the alert; p50/p99 on the memory backend and on Redis,
// against the budget (a looping event to the webhook within 100 ms at p99, on Redis).
// One session at a time, so the figures are latency, not queueing.
//   npm run bench:latency [-- --sessions 100 --redis redis://127.0.0.1:6379]
import { createHash, randomBytes, randomUUID } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import { performance } from 'node:perf_hooks';
import { z } from 'zod';
import { benchArgs } from './args.ts';
import { deleteKeys, vigilServe } from './serve.ts';

const args = benchArgs(
  z.strictObject({
    sessions: z.coerce.number().int().min(5).max(1000).default(100),
    redis: z.url({ protocol: /^redis$/ }).default('redis://127.0.0.1:6379'),
  }),
);

function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
}

/** A webhook receiver: when each dedup_key first arrived (performance.now() of this process). */
class Receiver {
  readonly got = new Map<string, number>();
  private waiters = new Map<string, () => void>();
  private server: Server | undefined;
  port = 0;

  async start(): Promise<void> {
    this.server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const at = performance.now();
        const body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
        // An alert is known by its incident and its verdict (the title starts with it):
        // the stalling trigger of the same incident comes first.
        const d = body.data;
        const key = d ? `${d.dedup_key}|${String(d.title).split(':')[0]}` : String(body.key);
        if (!this.got.has(key)) this.got.set(key, at);
        this.waiters.get(key)?.();
        res.writeHead(204).end();
      });
    });
    await new Promise<void>((r) => this.server!.listen(0, '127.0.0.1', r));
    this.port = (this.server.address() as { port: number }).port;
  }

  /** Resolves with the arrival time of `key` (already there, or when it comes). */
  when(key: string, timeoutMs = 30_000): Promise<number> {
    const at = this.got.get(key);
    if (at !== undefined) return Promise.resolve(at);
    return new Promise((resolve, reject) => {
      const t = setTimeout(() => reject(new Error(`no alert for ${key} in ${timeoutMs} ms`)), timeoutMs);
      this.waiters.set(key, () => {
        clearTimeout(t);
        this.waiters.delete(key);
        resolve(this.got.get(key)!);
      });
    });
  }

  close(): void {
    this.server?.closeAllConnections();
    this.server?.close();
  }
}

const SECRET = `whsec_${randomBytes(24).toString('base64')}`;

/** `vigil serve` in auto_recover, its one channel a webhook to the receiver. */
function serveWithHook(store: Record<string, unknown>, hookPort: number) {
  return vigilServe(
    {
      store,
      server: { rate_limit: { max: 100_000_000 } },
      modes: { mode: 'auto_recover' },
      notifications: {
        channels: [
          { name: 'desktop', remove: true },
          {
            name: 'hook',
            type: 'webhook',
            url: `http://127.0.0.1:${hookPort}/hook`,
            secret_env: 'BENCH_HOOK_SECRET',
            // auto_recover acts on a loop: its recovery incident is info (a hard stop is critical).
            min_severity: 'info',
            quiet_window: 0,
            rate_limit: { max: 1_000_000, window: '1m' },
          },
        ],
      },
    },
    { BENCH_HOOK_SECRET: SECRET },
  );
}

const post = async (url: string, body: unknown) => {
  const r = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return r.json() as Promise<Record<string, unknown>>;
};

/** A loop from the incident this tool was built for: a failing check, then one file read, over and over. */
function loopEvent(session: string, n: number) {
  const check = n % 2 === 0;
  return {
    session_id: session,
    agent: 'build',
    tool: check ? 'bash' : 'read',
    call_id: `call_${n}`,
    fingerprint: createHash('sha256')
      .update(check ? 'bash sh check.sh' : 'read docs/spec.md')
      .digest('hex'),
    target: check ? 'sh check.sh' : 'docs/spec.md',
    exit: check ? 1 : 0,
    landed: false,
    ts: Date.now(),
  };
}

interface Run {
  refuse: number[];
  alert: number[];
  events: number;
}

async function detection(store: Record<string, unknown>, receiver: Receiver): Promise<Run> {
  const s = await serveWithHook(store, receiver.port);
  const run: Run = { refuse: [], alert: [], events: 0 };
  try {
    for (let k = 0; k < args.sessions + 3; k++) {
      const session = `ses_lat_${randomUUID().slice(0, 8)}`;
      let t0 = 0;
      for (let n = 1; n <= 500; n++) {
        const start = performance.now();
        const r = await post(`${s.url}/progress`, loopEvent(session, n));
        const vs = (r.verdicts as { to: string }[] | undefined) ?? [];
        if (vs.some((v) => v.to === 'looping')) {
          t0 = start;
          run.events = n;
          break;
        }
      }
      if (!t0) throw new Error(`${session} never looped`);
      // The gate refuses from the moment the answer came back; checked back to back.
      let refusedAt = 0;
      for (let i = 0; i < 10_000 && !refusedAt; i++) {
        const g = await post(`${s.url}/gate`, { conversation: session });
        if (g.action === 'refuse') refusedAt = performance.now();
      }
      // In auto_recover the loop's page is the recovery incident, raised with the refusal.
      const hookAt = await receiver.when(`${session}:recovery|recovering (stage 1)`);
      if (k < 3) continue; // warm-up
      run.refuse.push(refusedAt - t0);
      run.alert.push(hookAt - t0);
    }
  } finally {
    s.child.kill('SIGTERM');
    await new Promise((r) => s.child.once('exit', r));
  }
  return run;
}

const receiver = new Receiver();
await receiver.start();
const prefix = `vigillat${process.pid}`;
const mem = await detection({ backend: 'memory' }, receiver);
let red: Run;
try {
  red = await detection({ backend: 'redis', redis_url: args.redis, key_prefix: prefix }, receiver);
} finally {
  await deleteKeys(args.redis, [prefix]);
}
receiver.close();

const row = (name: string, xs: number[]) =>
  `${name.padEnd(44)} p50 ${pct(xs, 50).toFixed(2).padStart(7)} ms   p99 ${pct(xs, 99).toFixed(2).padStart(7)} ms`;
console.log(
  `latency bench: vigil serve (auto_recover, a webhook receiver), ${args.sessions} sessions one at a time, ` +
    `the loop turns looping on event ${mem.events}; Redis ${args.redis}`,
);
console.log(row('memory: looping event -> gate refuses', mem.refuse));
console.log(row('memory: looping event -> alert received', mem.alert));
console.log(row('redis:  looping event -> gate refuses', red.refuse));
console.log(row('redis:  looping event -> alert received', red.alert));
console.log(`  refusal p99, redis / memory: ${(pct(red.refuse, 99) / pct(mem.refuse, 99)).toFixed(2)}x   (goal <= 5x)`);
const p99 = pct(red.alert, 99);
console.log(
  `budget: a looping event to the webhook receiver, Redis, p99 ${p99.toFixed(1)} ms (budget <= 100 ms): ${p99 <= 100 ? 'met' : 'NOT MET'}`,
);
process.exit(0);
