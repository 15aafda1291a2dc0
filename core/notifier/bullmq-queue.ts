import { setTimeout as sleep } from 'node:timers/promises';
import { type JobsOptions, Queue, UnrecoverableError, Worker } from 'bullmq';
import type { Cluster, Redis } from 'ioredis';
import type { Logger } from '../logger.ts';
import { parseRedisUrl, type RedisTarget, redisClient } from '../store/redis-connect.ts';
import type { Deliverer, DeliverJob } from './deliverer.ts';
import type { AlertQueue, QueueTiming } from './queue.ts';

export interface BullQueueOptions extends QueueTiming {
  /** The store's URL: one server, a cluster or a Sentinel-managed primary (core/store/redis-connect.ts). */
  url: string;
  /**
   * Key prefix (BullMQ's own `prefix`; ioredis keyPrefix is not supported by BullMQ).
   * On a cluster it carries the store's hash tag, so every queue's keys share one slot.
   */
  prefix: string;
  logger: Logger;
}

const COUNT_STATES = ['wait', 'active', 'delayed', 'prioritized', 'waiting-children'] as const;
/** The deliverer decides when to stop (max_age, max_attempts); BullMQ only needs a ceiling. */
const ATTEMPTS_CEILING = 100_000;

/** A failed attempt carrying the deliverer's retry delay to the backoff strategy. */
class RetryLater extends Error {
  constructor(
    reason: string,
    readonly delayMs: number,
  ) {
    super(reason);
  }
}

/**
 * BullMQ on ioredis: durable across a crash or a Redis restart (with persistence).
 * One queue per channel; the job id is the transition's identity, so a second enqueue
 * of the same transition is ignored while the job is kept (completed jobs are kept a
 * day for exactly this). A worker killed mid-delivery loses its lock and the job runs
 * again on the next worker (at least once).
 */
/** Jobs of each state read to find the oldest (for the queue-age gauge). */
const OLDEST_SCAN = 50;

export class BullQueue implements AlertQueue {
  readonly kind = 'bullmq' as const;
  private readonly producer: Redis | Cluster;
  private readonly queues = new Map<string, Queue>();
  private readonly workers: Worker[] = [];
  private readonly target: RedisTarget;
  private deliverer: Deliverer | undefined;
  readonly url: string;

  constructor(private readonly o: BullQueueOptions) {
    this.url = o.url;
    this.target = parseRedisUrl(o.url);
    // Producers fail fast when Redis is down instead of buffering forever.
    this.producer = redisClient(this.target, { maxRetriesPerRequest: 2, enableOfflineQueue: true });
    this.producer.on('error', (err) => o.logger.warn({ err: err.message }, 'redis (queue producer) error'));
  }

  private queue(channel: string): Queue {
    let q = this.queues.get(channel);
    if (!q) {
      q = new Queue(queueName(channel), { connection: this.producer, prefix: this.o.prefix });
      q.on('error', (err) => this.o.logger.warn({ err: err.message, channel }, 'queue error'));
      this.queues.set(channel, q);
    }
    return q;
  }

  async enqueue(job: DeliverJob): Promise<boolean> {
    const q = this.queue(job.channel);
    // Both commands go out on one connection back to back (one round trip), so the
    // existence check runs before the add. BullMQ itself ignores a second add of a kept
    // jobId; the check is what tells the caller it was a duplicate.
    const [existing, added] = await Promise.allSettled([q.getJob(job.id), q.add('deliver', job, jobOpts(job.id))]);
    if (added.status === 'rejected') {
      // BullMQ stores the job's hash before it queues the id: an add that failed after
      // that would make every retry a duplicate (an add that reaches its error got past
      // BullMQ's own duplicate check, so the hash is this add's). Deleted, the retry adds it.
      if (existing.status === 'fulfilled' && existing.value === undefined)
        await this.producer.del(q.toKey(job.id)).catch(() => {});
      throw added.reason;
    }
    if (existing.status === 'rejected') throw existing.reason;
    return existing.value === undefined;
  }

  async start(deliverer: Deliverer): Promise<void> {
    this.deliverer = deliverer;
    for (const channel of deliverer.channelNames()) {
      // Per-process concurrency only: BullMQ's global concurrency made pickup latency
      // spiky (hundreds of ms). Order across instances is kept by the superseded check.
      this.queue(channel);
      const w = new Worker<DeliverJob>(
        queueName(channel),
        // No third parameter (the job's abort signal): BullMQ then makes no AbortController
        // per job. Nothing here cancels a BullMQ job (close waits for the active one, and
        // the delivery timeout bounds it), so that signal never fired.
        async (job) => {
          const attempt = job.attemptsMade + 1;
          const out = await deliverer.attempt(job.data, attempt, undefined, job.attemptsStarted);
          if (out.ok) return;
          if (out.final) throw new UnrecoverableError(out.reason);
          throw new RetryLater(out.reason, out.delayMs);
        },
        {
          // The delay the deliverer chose (backoff with jitter, or the provider's Retry-After).
          settings: { backoffStrategy: (_n, _type, err) => (err instanceof RetryLater ? err.delayMs : 1_000) },
          connection: redisClient(this.target, { maxRetriesPerRequest: null }),
          prefix: this.o.prefix,
          concurrency: this.o.concurrency,
          lockDuration: this.o.lockDurationMs,
          stalledInterval: this.o.stalledIntervalMs,
          maxStalledCount: 2,
        },
      );
      w.on('error', (err) => this.o.logger.warn({ err: err.message, channel }, 'worker error'));
      this.workers.push(w);
    }
    await Promise.all(this.workers.map((w) => w.waitUntilReady()));
  }

  async depth(): Promise<number> {
    let n = 0;
    for (const q of this.queues.values()) {
      const c = await q.getJobCounts(...COUNT_STATES);
      for (const v of Object.values(c)) n += v;
    }
    return n;
  }

  async oldestAt(): Promise<number | undefined> {
    // Waiting jobs are in arrival order, but delayed ones in due order (retries carry
    // jitter), so a few of each are read: exact unless a backlog holds more than that.
    let min: number | undefined;
    for (const q of this.queues.values()) {
      for (const j of await q.getJobs(['wait', 'active', 'delayed', 'prioritized'], 0, OLDEST_SCAN - 1, true)) {
        const at = (j?.data as DeliverJob | undefined)?.alert.at;
        if (at !== undefined && (min === undefined || at < min)) min = at;
      }
    }
    return min;
  }

  async idle(timeoutMs = 30_000): Promise<boolean> {
    const until = Date.now() + timeoutMs;
    while (Date.now() < until) {
      if ((await this.depth()) === 0) {
        // The last deliveries' log rows too.
        await this.deliverer?.settled();
        return true;
      }
      await sleep(25);
    }
    return false;
  }

  async close(): Promise<void> {
    await Promise.all(this.workers.map((w) => w.close().catch(() => {})));
    await this.deliverer?.settled();
    for (const w of this.workers) {
      const c = (w as unknown as { opts: { connection: Redis | Cluster } }).opts.connection;
      c?.disconnect?.();
    }
    await Promise.all([...this.queues.values()].map((q) => q.close().catch(() => {})));
    await this.producer.quit().catch(() => this.producer.disconnect());
  }
}

/** Every delivery job's options: its id the transition's, retries decided by the deliverer. */
function jobOpts(id: string): JobsOptions {
  return {
    jobId: id,
    attempts: ATTEMPTS_CEILING,
    backoff: { type: 'vigil' },
    removeOnComplete: { age: 86_400, count: 5_000 },
    removeOnFail: { age: 7 * 86_400, count: 5_000 },
  };
}

export function queueName(channel: string): string {
  return `deliver-${channel}`;
}
