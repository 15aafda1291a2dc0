import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from '../logger.ts';
import type { Deliverer, DeliverJob } from './deliverer.ts';
import type { AlertQueue, QueueTiming } from './queue.ts';

interface Lane {
  pending: { job: DeliverJob; attempt: number }[];
  active: number;
}

/**
 * In-process queue for the embedded default: the BullMQ contract in one process. A
 * job waiting for its retry sits on a timer, not in its lane, so the channel's other
 * alerts go on. Not durable across a crash: on a clean stop it drains what it can
 * within the drain timeout and logs every alert it could not send.
 */
export class MemoryQueue implements AlertQueue {
  readonly kind = 'memory' as const;
  private readonly lanes = new Map<string, Lane>();
  /** Ids already accepted (bounded, oldest forgotten first), the in-process dedup. */
  private readonly seen = new Set<string>();
  private readonly waiting = new Map<NodeJS.Timeout, { job: DeliverJob; attempt: number }>();
  private readonly running = new Set<DeliverJob>();
  private deliverer?: Deliverer;
  private inflight = 0;
  private draining = false;
  private closed = false;
  private readonly waiters: (() => void)[] = [];

  constructor(
    private readonly timing: QueueTiming,
    private readonly logger?: Logger,
    private readonly seenCap = 10_000,
  ) {}

  async enqueue(job: DeliverJob): Promise<boolean> {
    if (this.seen.has(job.id)) return false;
    this.seen.add(job.id);
    if (this.seen.size > this.seenCap) this.seen.delete(this.seen.values().next().value as string);
    this.inflight++;
    this.push(job, 1);
    return true;
  }

  async start(deliverer: Deliverer): Promise<void> {
    this.deliverer = deliverer;
    for (const name of this.lanes.keys()) this.pump(name);
  }

  async depth(): Promise<number> {
    return this.inflight;
  }

  async oldestAt(): Promise<number | undefined> {
    let min: number | undefined;
    const see = (j: DeliverJob) => {
      if (min === undefined || j.alert.at < min) min = j.alert.at;
    };
    for (const l of this.lanes.values()) for (const p of l.pending) see(p.job);
    for (const w of this.waiting.values()) see(w.job);
    for (const j of this.running) see(j);
    return min;
  }

  async idle(timeoutMs = 30_000): Promise<boolean> {
    if (this.inflight === 0) return true;
    return Promise.race([
      new Promise<boolean>((r) => this.waiters.push(() => r(true))),
      sleep(timeoutMs, false, { ref: false }),
    ]);
  }

  /**
   * Stops taking new work and drains: jobs waiting for a retry get their attempt now,
   * everything runs until done or `drain_timeout`; what is still undelivered then is
   * logged, one line per alert, so nothing is lost silently.
   */
  async close(): Promise<void> {
    if (this.draining) return;
    this.draining = true;
    for (const [t, w] of this.waiting) {
      clearTimeout(t);
      this.push(w.job, w.attempt);
    }
    this.waiting.clear();
    const drained = await this.idle(this.timing.drainTimeoutMs ?? 0);
    this.closed = true;
    if (drained) return;
    for (const lane of this.lanes.values()) for (const { job } of lane.pending.splice(0)) this.lost(job);
  }

  private lost(job: DeliverJob): void {
    this.logger?.error(
      { channel: job.channel, dedup_key: job.alert.dedup_key, state: job.alert.state, job_id: job.id },
      'alert not delivered before shutdown',
    );
  }

  private push(job: DeliverJob, attempt: number): void {
    this.lane(job.channel).pending.push({ job, attempt });
    this.pump(job.channel);
  }

  private lane(name: string): Lane {
    let l = this.lanes.get(name);
    if (!l) {
      l = { pending: [], active: 0 };
      this.lanes.set(name, l);
    }
    return l;
  }

  private pump(name: string): void {
    const d = this.deliverer;
    const lane = this.lane(name);
    while (d && !this.closed && lane.active < this.timing.concurrency && lane.pending.length) {
      const next = lane.pending.shift()!;
      lane.active++;
      void this.run(d, next.job, next.attempt).finally(() => {
        lane.active--;
        this.pump(name);
      });
    }
  }

  private async run(d: Deliverer, job: DeliverJob, attempt: number): Promise<void> {
    this.running.add(job);
    const out = await d
      .attempt(job, attempt)
      .catch((e) => ({ ok: false, final: true, reason: (e as Error).message }) as const)
      .finally(() => this.running.delete(job));
    if (!out.ok && !out.final && this.draining) this.lost(job);
    else if (!out.ok && !out.final) {
      const t = setTimeout(() => {
        this.waiting.delete(t);
        this.push(job, attempt + 1);
      }, out.delayMs);
      t.unref();
      this.waiting.set(t, { job, attempt: attempt + 1 });
      return;
    }
    this.inflight--;
    if (this.inflight === 0) for (const w of this.waiters.splice(0)) w();
  }
}
