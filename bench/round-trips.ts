// Redis round trips of `vigil serve` per progress event and per alert, counted with
// MONITOR on a redis-server of the bench's own (nothing else talks to it):
// - steady state: N plain tool calls of a session the service already knows, posted one
//   at a time; each event's window runs from a marker sent just before its POST to the
//   marker before the next one (so work the service does after answering is counted too);
// - alerts: a looping session (test/helpers/progress.ts) posted one event at a time; for
//   each POST that raises an alert, the commands from its marker until the command whose
//   script adds the delivery job (BullMQ's `XADD ... added` on the queue's event stream),
//   that command included: what it takes before the job exists.
// MONITOR shows each command a client sent (a round trip here; commands a client
// pipelines are counted one by one) and, marked `lua`, the commands run inside scripts:
// printed apart. Markers are ECHOs from the bench's own connection, not counted.
//   npm run bench:round-trips [-- --events 200 --looping 1 --gap 10 --show-args yes]
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { z } from 'zod';
import { loopingScript, toolEvent } from '../test/helpers/progress.ts';
import { WebhookReceiver, webhookChannel, webhookSecret } from '../test/helpers/webhook-receiver.ts';
import { benchArgs } from './args.ts';
import { ownRedis, vigilServe } from './serve.ts';

const args = benchArgs(
  z.strictObject({
    events: z.coerce.number().int().min(10).max(250).default(200),
    looping: z.coerce.number().int().min(1).max(20).default(1),
    /** ms between an answer and the next marker: time for work done after answering. */
    gap: z.coerce.number().int().min(0).max(1000).default(10),
    /** Print the last event's commit script arguments (long ones as their size). */
    'show-args': z.enum(['yes', 'no']).default('no'),
  }),
);

interface Line {
  /** MONITOR's timestamp, in microseconds. */
  us: number;
  source: string;
  args: string[];
}

/** The MONITOR stream, cut at the bench's markers. */
class Monitor {
  readonly lines: Line[] = [];
  private marks = new Map<string, number>();
  private waiters = new Map<string, () => void>();

  constructor(private readonly own: string) {}

  take(time: string, args: string[], source: string): void {
    if (source === this.own) {
      if (args[0]?.toLowerCase() === 'echo' && args[1]?.startsWith('mark:')) {
        this.marks.set(args[1], this.lines.length);
        this.waiters.get(args[1])?.();
      }
      return;
    }
    this.lines.push({ us: Math.round(Number(time) * 1e6), source, args });
  }

  /** Resolves once the marker went through the stream. */
  seen(mark: string): Promise<void> {
    if (this.marks.has(mark)) return Promise.resolve();
    return new Promise((r) => this.waiters.set(mark, r));
  }

  between(from: string, to: string): Line[] {
    return this.lines.slice(this.marks.get(from)!, this.marks.get(to)!);
  }
}

const isLua = (l: Line) => l.source === 'lua';

/**
 * Of `lines`, the client commands that waited for an answer: a command sent less than
 * PIPELINED_US after the one before it on the same connection is taken as pipelined
 * with it (Redis ran both in one read; a client that waits for an answer takes longer).
 */
const PIPELINED_US = 100;
function sequential(lines: readonly Line[]): number {
  const last = new Map<string, number>();
  let n = 0;
  for (const l of lines) {
    if (isLua(l)) continue;
    const prev = last.get(l.source);
    if (prev === undefined || l.us - prev >= PIPELINED_US) n++;
    last.set(l.source, l.us);
  }
  return n;
}
const addsJob = (l: Line) =>
  isLua(l) && l.args[0]?.toLowerCase() === 'xadd' && l.args.includes('added') && /:events$/.test(l.args[1] ?? '');

/** A command's shape for the breakdown: its name and first key, ids and the prefix generalised. */
function shape(l: Line, prefix: string): string {
  const name = l.args[0]?.toLowerCase() ?? '?';
  const key = name === 'evalsha' || name === 'eval' || name === 'fcall' ? l.args[3] : l.args[1];
  const k = (key ?? '')
    .replace(prefix, '<p>')
    .replace(/ses_[A-Za-z0-9_]+/g, '<s>')
    .replace(/[0-9a-f]{16,}/g, '<h>')
    .replace(/\d+/g, 'N');
  return `${name} ${k}`.trim();
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

async function main(): Promise<void> {
  const redis = await ownRedis();
  const prefix = `rt-${randomUUID().slice(0, 8)}`;
  const receiver = new WebhookReceiver();
  await receiver.start();
  const secret = webhookSecret();
  const svc = await vigilServe(
    {
      store: { backend: 'redis', key_prefix: prefix },
      server: { rate_limit: { max: 100_000_000 } },
      notifications: { channels: [{ name: 'desktop', remove: true }, webhookChannel(receiver.port, 'BENCH_HOOK')] },
    },
    { REDIS_URL: redis.url, BENCH_HOOK: secret },
  );
  const marker = new Redis(redis.url);
  await marker.ping();
  // The markers' own connection, as MONITOR names it (addr=host:port).
  const own = /addr=(\S+)/.exec(String(await marker.call('CLIENT', 'INFO')))?.[1];
  if (!own) throw new Error('CLIENT INFO gave no addr');
  const mon = new Monitor(own);
  const monitor = await new Redis(redis.url).monitor();
  monitor.on('monitor', (time: string, a: string[], source: string) => mon.take(time, a, source));
  let m = 0;
  const mark = async () => {
    const name = `mark:${m++}`;
    await marker.echo(name);
    await mon.seen(name);
    return name;
  };
  const post = async (body: unknown) => {
    const r = await fetch(`${svc.url}/progress`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    if (r.status !== 202) throw new Error(`POST /progress answered ${r.status}: ${await r.text()}`);
    return (await r.json()) as { verdicts: { from: string; to: string }[] };
  };

  // Background: what the service sends with no input (the worker waiting, timers).
  const idle0 = await mark();
  await sleep(2_000);
  const idle = mon.between(idle0, await mark()).filter((l) => !isLua(l)).length / 2;

  // Steady state: a known session, plain tool calls (no verdict changes).
  const steady = `ses_rt_${randomUUID().slice(0, 8)}`;
  const t0 = Date.now() - (args.events + 10) * 1_000;
  for (let n = 1; n <= 5; n++)
    await post(toolEvent(steady, n, { tool: 'read', target: `src/w${n}.ts` }, t0 + n * 1_000));
  const perEvent: { client: number; seq: number; lua: number; lines: Line[] }[] = [];
  let from = await mark();
  for (let n = 6; n < 6 + args.events; n++) {
    const r = await post(toolEvent(steady, n, { tool: 'read', target: `src/f${n}.ts` }, t0 + n * 1_000));
    if (r.verdicts.length) throw new Error(`a plain tool call changed the verdict: ${JSON.stringify(r.verdicts)}`);
    if (args.gap) await sleep(args.gap);
    const to = await mark();
    const lines = mon.between(from, to);
    perEvent.push({
      client: lines.filter((l) => !isLua(l)).length,
      seq: sequential(lines),
      lua: lines.filter(isLua).length,
      lines,
    });
    from = to;
  }

  // Alerts: each POST of a looping session whose answer has a transition.
  const perAlert: { to: string; client: number; seq: number; lua: number; lines: Line[] }[] = [];
  for (let k = 0; k < args.looping; k++) {
    const s = `ses_rtloop_${k}_${randomUUID().slice(0, 8)}`;
    for (const ev of loopingScript(s)) {
      const start = await mark();
      const before = receiver.got.length;
      const r = await post(ev);
      if (!r.verdicts.length) continue;
      const t = Date.now();
      while (receiver.got.length === before) {
        if (Date.now() - t > 30_000) throw new Error(`no webhook for ${s} ${JSON.stringify(r.verdicts)}`);
        await sleep(5);
      }
      const lines = mon.between(start, await mark());
      const at = lines.findIndex(addsJob);
      if (at < 0) throw new Error(`no job added between the markers of ${s}`);
      const upTo = lines.slice(0, at + 1);
      perAlert.push({
        to: r.verdicts.map((v) => v.to).join('+'),
        client: upTo.filter((l) => !isLua(l)).length,
        seq: sequential(upTo),
        lua: upTo.filter(isLua).length,
        lines: upTo,
      });
    }
  }

  const breakdown = (lines: Line[], per: number) => {
    const c = new Map<string, number>();
    for (const l of lines) if (!isLua(l)) c.set(shape(l, prefix), (c.get(shape(l, prefix)) ?? 0) + 1);
    return [...c]
      .sort((a, b) => b[1] - a[1])
      .map(([k, n]) => `    ${(n / per).toFixed(2).padStart(6)}  ${k}`)
      .join('\n');
  };
  const clients = perEvent.map((e) => e.client);
  const luas = perEvent.map((e) => e.lua);
  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
  const gapMs = args.gap;
  console.log(
    `background with no input: ${idle.toFixed(1)} client commands/s (what may fall into a window below by chance)`,
  );
  console.log(
    `progress event (known session, plain tool call; ${args.events} events, ${gapMs} ms after each answer counted): ` +
      `round trips (client-issued commands) mean ${mean(clients).toFixed(2)}, median ${median(clients)}, min ${Math.min(...clients)}, max ${Math.max(...clients)}; ` +
      `of them waiting for an answer (not pipelined) mean ${mean(perEvent.map((e) => e.seq)).toFixed(2)}; ` +
      `in-script commands mean ${mean(luas).toFixed(2)}`,
  );
  console.log(
    `  per event, by command:\n${breakdown(
      perEvent.flatMap((e) => e.lines),
      perEvent.length,
    )}`,
  );
  // Inside the scripts, by command, and what the client sent (argument bytes): the server's
  // cost per event grows with both.
  const lua = new Map<string, number>();
  let sent = 0;
  for (const e of perEvent)
    for (const l of e.lines) {
      if (isLua(l)) lua.set(shape(l, prefix).split(' ')[0], (lua.get(shape(l, prefix).split(' ')[0]) ?? 0) + 1);
      else sent += l.args.reduce((n, a) => n + Buffer.byteLength(a), 0);
    }
  console.log(
    `  in-script, by command: ${[...lua]
      .sort((a, b) => b[1] - a[1])
      .map(([k, n]) => `${k} ${(n / perEvent.length).toFixed(2)}`)
      .join(', ')}; argument bytes sent per event: mean ${Math.round(sent / perEvent.length)}`,
  );
  if (args['show-args'] === 'yes') {
    const ev = perEvent[perEvent.length - 1].lines.find((l) => l.args[0]?.toLowerCase() === 'evalsha');
    console.log(
      ev?.args.map((a) => (a.length > 60 ? `<${Buffer.byteLength(a)}B>` : a.replace(prefix, '<p>'))).join(' | '),
    );
  }
  const plain = median(clients);
  const plainSeq = median(perEvent.map((e) => e.seq));
  for (const a of perAlert) {
    console.log(
      `alert (${a.to}): round trips before its job exists ${a.client} (the same POST without an alert: ${plain}, so the alert's own: ${a.client - plain}); ` +
        `of them not pipelined ${a.seq} (without an alert: ${plainSeq}); in-script commands ${a.lua}`,
    );
    const order = a.lines.filter((l) => !isLua(l));
    const gaps = order.map((l, i) => {
      const prev = order
        .slice(0, i)
        .reverse()
        .find((x) => x.source === l.source);
      return prev && l.us - prev.us < PIPELINED_US ? ' (pipelined)' : '';
    });
    console.log(`  by command, in order:\n${order.map((l, i) => `    ${shape(l, prefix)}${gaps[i]}`).join('\n')}`);
  }
  monitor.disconnect();
  marker.disconnect();
  redis.client.disconnect();
  await receiver.stop();
  svc.child.kill('SIGTERM');
  process.exit(0);
}

await main();
