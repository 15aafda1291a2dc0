import { setTimeout as sleep } from 'node:timers/promises';
import { type Deliverer, type DeliverJob, MAX_ATTEMPTS } from './deliverer.ts';
import type { AlertQueue, QueueTiming } from './queue.ts';

interface Lane {
  pending: DeliverJob[];
  active: number;
}

/** In-process queue for the embedded default: same contract as BullMQ, not durable across a crash. */
export class MemoryQueue implements AlertQueue {
  readonly kind = 'memory' as const;
  private readonly lanes = new Map<string, Lane>();
  /** Ids already accepted (bounded, oldest forgotten first), the in-process dedup. */
  private readonly seen = new Set<string>();
  private deliverer?: Deliverer;
  private inflight = 0;
  private closed = false;
  private readonly waiters: (() => void)[] = [];

  constructor(
    private readonly timing: QueueTiming,
    private readonly seenCap = 10_000,
  ) {}

  async enqueue(job: DeliverJob): Promise<boolean> {
    if (this.seen.has(job.id)) return false;
    this.seen.add(job.id);
    if (this.seen.size > this.seenCap) this.seen.delete(this.seen.values().next().value as string);
    const lane = this.lane(job.channel);
    lane.pending.push(job);
    this.inflight++;
    this.pump(job.channel);
    return true;
  }

  async start(deliverer: Deliverer): Promise<void> {
    this.deliverer = deliverer;
    for (const name of this.lanes.keys()) this.pump(name);
  }

  async depth(): Promise<number> {
    return this.inflight;
  }

  async idle(timeoutMs = 30_000): Promise<boolean> {
    if (this.inflight === 0) return true;
    return Promise.race([
      new Promise<boolean>((r) => this.waiters.push(() => r(true))),
      sleep(timeoutMs, false, { ref: false }),
    ]);
  }

  async close(): Promise<void> {
    this.closed = true;
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
      const job = lane.pending.shift()!;
      lane.active++;
      void this.run(d, job).finally(() => {
        lane.active--;
        this.inflight--;
        if (this.inflight === 0) for (const w of this.waiters.splice(0)) w();
        this.pump(name);
      });
    }
  }

  private async run(d: Deliverer, job: DeliverJob): Promise<void> {
    for (let attempt = 1; attempt <= MAX_ATTEMPTS; attempt++) {
      const out = await d.attempt(job, attempt).catch(() => ({ ok: false, retryable: false }) as const);
      if (out.ok || !out.retryable) return;
      if (attempt < MAX_ATTEMPTS) await sleep(this.timing.retryDelayMs);
    }
  }
}
