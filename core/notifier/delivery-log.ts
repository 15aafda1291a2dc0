import type { EventEmitter } from 'node:events';
import type { Cluster, Redis } from 'ioredis';
import type { AlertState, Severity } from '../alert.ts';
import { keys } from '../store/keys.ts';
import { RedisStore } from '../store/redis.ts';
import { storeError } from '../store/redis-errors.ts';
import { luaScript } from '../store/scripts.ts';
import type { Store } from '../store/store.ts';
import { UnitStore } from '../unit.ts';

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

/** A channel's sent mark: the highest seq of an incident it delivered (the superseded check reads it). */
export interface SentMark {
  key: string;
  seq: number;
  ttlMs: number;
}

// Delivered jobs' rows and sent marks in one step: core/store/lua/delivered.lua.
const DELIVERED = luaScript('delivered');

/** One delivered job: its row and, unless it is a test alert, its channel's sent mark. */
export interface Delivered {
  row: DeliveryRecord;
  sent: SentMark | undefined;
}

type DeliveredClient = (Redis | Cluster) & {
  vigilDelivered(numKeys: number, ...keysThenArgs: (string | number)[]): Promise<number>;
};

/**
 * Recent deliveries and failures, capped. Written by the worker itself (not from
 * queue events, which a listener can miss), so what is shown is what happened.
 */
export class DeliveryLog {
  /** Redis: the row and the sent mark go as one script. */
  private readonly redis: RedisStore | undefined;

  constructor(
    private readonly store: Store,
    private readonly cap: number,
    private readonly events?: EventEmitter,
  ) {
    const base = store instanceof UnitStore ? store.base : store;
    if (base instanceof RedisStore) {
      this.redis = base;
      base.client.defineCommand('vigilDelivered', { lua: DELIVERED });
    }
  }

  async record(r: DeliveryRecord): Promise<void> {
    await this.store.pushCapped(KEY, r, this.cap);
    this.events?.emit('delivery', r);
  }

  /** Delivered jobs' rows and sent marks, in order (on Redis one script for all). */
  async delivered(batch: readonly Delivered[]): Promise<void> {
    if (!this.redis) {
      // (all issued at once, in order)
      await Promise.all(
        batch.flatMap(({ row, sent }) => [
          sent &&
            this.store.update<number, void>(sent.key, (cur) => ({
              value: Math.max(cur ?? 0, sent.seq),
              result: undefined,
              ttlMs: sent.ttlMs,
            })),
          this.store.pushCapped(KEY, row, this.cap),
        ]),
      );
    } else if (batch.length) {
      const s = this.redis;
      const ks = [s.redisKey(KEY)];
      const args: (string | number)[] = [this.cap];
      for (const { row, sent } of batch) {
        if (sent) ks.push(s.redisKey(sent.key));
        args.push(JSON.stringify(row), sent ? ks.length : 0, sent?.seq ?? 0, sent?.ttlMs ?? 0);
      }
      await (s.client as unknown as DeliveredClient).vigilDelivered(ks.length, ...ks, ...args).catch((err: unknown) => {
        throw storeError(err);
      });
    }
    for (const { row } of batch) this.events?.emit('delivery', row);
  }

  /** What a writer that holds rows back to batch them (the deliverer) gives to write them now. */
  private heldRows: (() => Promise<void>) | undefined;

  /** Registers the writer's flush: a read first writes the rows held back, so it sees every delivery made before it. */
  holdsRows(flush: () => Promise<void>): void {
    this.heldRows = flush;
  }

  async recent(limit = 100): Promise<DeliveryRecord[]> {
    await this.heldRows?.();
    return this.store.list<DeliveryRecord>(KEY, Math.min(limit, this.cap));
  }

  /** The final record of one job (delivered, failed or suppressed), if it has one yet. */
  async find(jobId: string): Promise<DeliveryRecord | undefined> {
    return (await this.recent(this.cap)).find((r) => r.job_id === jobId && r.outcome !== 'retried');
  }
}
