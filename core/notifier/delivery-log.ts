import type { EventEmitter } from 'node:events';
import type { AlertState, Severity } from '../alert.ts';
import { keys } from '../store/keys.ts';
import type { Store } from '../store/store.ts';

/** One row of the delivery log: what the worker did with one queued transition. */
export interface DeliveryRecord {
  job_id: string;
  at: number;
  channel: string;
  type: string;
  dedup_key: string;
  state: AlertState;
  severity: Severity;
  title: string;
  /**
   * delivered; retried (an attempt failed, another follows: `retry_in_ms`); failed
   * (permanent, or retries spent); suppressed (rate limit, quiet window, or dropped
   * because the incident moved on before delivery).
   */
  outcome: 'delivered' | 'retried' | 'failed' | 'suppressed';
  /** retried: when the next attempt runs, ms from `at`. */
  retry_in_ms?: number;
  attempts: number;
  reason?: string;
  test?: boolean;
}

const KEY = keys.deliveries;

/**
 * Recent deliveries and failures, capped. Written by the worker itself (not from
 * queue events, which a listener can miss), so what is shown is what happened.
 */
export class DeliveryLog {
  constructor(
    private readonly store: Store,
    private readonly cap: number,
    private readonly events?: EventEmitter,
  ) {}

  async record(r: DeliveryRecord): Promise<void> {
    await this.store.pushCapped(KEY, r, this.cap);
    this.events?.emit('delivery', r);
  }

  recent(limit = 100): Promise<DeliveryRecord[]> {
    return this.store.list<DeliveryRecord>(KEY, Math.min(limit, this.cap));
  }

  /** The final record of one job (delivered, failed or suppressed), if it has one yet. */
  async find(jobId: string): Promise<DeliveryRecord | undefined> {
    return (await this.recent(this.cap)).find((r) => r.job_id === jobId && r.outcome !== 'retried');
  }
}
