import type { Deliverer, DeliverJob } from './deliverer.ts';

/**
 * The delivery queue: one lane per channel, so a hung channel delays only its own
 * alerts. `enqueue` returns false when a job with the same id was already accepted,
 * which is what keeps a retried enqueue from paging twice.
 */
export interface AlertQueue {
  readonly kind: 'memory' | 'bullmq';
  enqueue(job: DeliverJob): Promise<boolean>;
  /** Start consuming (the worker side). The service does both; a worker process only this. */
  start(deliverer: Deliverer): Promise<void>;
  /** Jobs waiting, delayed or active. */
  depth(): Promise<number>;
  /** When the oldest alert still queued was raised (epoch ms), if any is. */
  oldestAt(): Promise<number | undefined>;
  /** In-process queue: alerts read back from the spool at start and still waiting. */
  spooled?(): number;
  /** Resolves when nothing is waiting or running (tests and `vigil alert test`). */
  idle(timeoutMs?: number): Promise<boolean>;
  close(): Promise<void>;
}

export interface QueueTiming {
  concurrency: number;
  lockDurationMs: number;
  stalledIntervalMs: number;
  /** In-process queue: how long a clean stop waits for queued alerts to go out. */
  drainTimeoutMs?: number;
  /** In-process queue: where a clean stop writes the alerts it could not deliver (read back at start). */
  spoolFile?: string;
}
