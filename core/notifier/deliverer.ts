import type { Alert } from '../alert.ts';
import type { Clock } from '../clock.ts';
import type { Channel } from '../contracts.ts';
import { isRetryable } from '../errors.ts';
import type { Logger } from '../logger.ts';
import type { Store } from '../store/store.ts';
import type { DeliveryLog } from './delivery-log.ts';

/** Queue job data: the channel's name and the alert, never a secret (BullMQ stores it in clear). */
export interface DeliverJob {
  id: string;
  channel: string;
  alert: Alert;
}

/** Exactly one retry: the first try plus one. */
export const MAX_ATTEMPTS = 2;

export type AttemptOutcome = { ok: true; superseded?: boolean } | { ok: false; retryable: boolean; reason: string };

/**
 * Runs one delivery attempt with the delivery timeout and writes the log row when the
 * job is finished (delivered, permanently failed, or failed on its last attempt).
 * Both queue backends call this, so retry and logging rules exist once.
 */
export class Deliverer {
  constructor(
    private readonly channels: ReadonlyMap<string, Channel>,
    private readonly log: DeliveryLog,
    private readonly timeoutMs: number,
    private readonly logger: Logger,
    private readonly clock: Clock,
    private readonly store: Store,
  ) {}

  channelNames(): string[] {
    return [...this.channels.keys()];
  }

  /**
   * `attempt` counts failed tries (it drives the one retry); `started` counts every start,
   * including one cut short by a crash, and is what the log shows.
   */
  async attempt(job: DeliverJob, attempt: number, outer?: AbortSignal, started = attempt): Promise<AttemptOutcome> {
    const ch = this.channels.get(job.channel);
    let outcome: AttemptOutcome;
    if (await this.superseded(job, attempt, started)) {
      // This channel already delivered a later transition of the incident (a retry that
      // lost the race with the next message): sending it now would reorder the story.
      await this.log.record({
        ...this.row(job, ch?.type),
        outcome: 'suppressed',
        attempts: attempt - 1,
        reason: 'superseded: a later transition was already delivered',
      });
      return { ok: true, superseded: true };
    }
    if (!ch) {
      outcome = { ok: false, retryable: false, reason: `channel "${job.channel}" is not configured` };
    } else {
      outcome = await this.send(ch, job.alert, outer);
    }
    const final = outcome.ok || !outcome.retryable || attempt >= MAX_ATTEMPTS;
    const log = this.logger.child({
      channel: job.channel,
      dedup_key: job.alert.dedup_key,
      state: job.alert.state,
      attempt,
    });
    if (outcome.ok) log.info('alert delivered');
    else log.warn({ reason: outcome.reason, retryable: outcome.retryable, final }, 'alert delivery failed');
    // Bookkeeping after the send runs in parallel: it is what a single-lane channel waits on.
    await Promise.all([
      outcome.ok && !job.alert.test ? this.markSent(job) : undefined,
      final
        ? this.log.record({
            ...this.row(job, ch?.type),
            outcome: outcome.ok ? 'delivered' : 'failed',
            attempts: Math.max(attempt, started),
            ...(outcome.ok ? {} : { reason: outcome.reason }),
          })
        : undefined,
    ]);
    return outcome;
  }

  private row(job: DeliverJob, type = 'unknown') {
    return {
      job_id: job.id,
      at: this.clock.now(),
      channel: job.channel,
      type,
      dedup_key: job.alert.dedup_key,
      state: job.alert.state,
      severity: job.alert.severity,
      title: job.alert.title,
      ...(job.alert.test ? { test: true } : {}),
    };
  }

  /**
   * Only a retried or recovered job can find a later transition already delivered: the
   * queue hands out a channel's jobs in order, so a first attempt was picked before any
   * later job and the read could not change its fate. It is skipped then.
   */
  private async superseded(job: DeliverJob, attempt: number, started: number): Promise<boolean> {
    if (job.alert.test || (attempt === 1 && started <= 1)) return false;
    const sent = await this.store.get<number>(`sent:${job.channel}:${job.alert.dedup_key}`).catch(() => undefined);
    return sent !== undefined && sent > job.alert.seq;
  }

  private async markSent(job: DeliverJob): Promise<void> {
    await this.store
      .update<number, void>(`sent:${job.channel}:${job.alert.dedup_key}`, (cur) => ({
        value: Math.max(cur ?? 0, job.alert.seq),
        result: undefined,
        ttlMs: 30 * 86_400_000,
      }))
      .catch((err) => this.logger.warn({ err: (err as Error).message }, 'could not record the delivered transition'));
  }

  private async send(ch: Channel, alert: Alert, outer?: AbortSignal): Promise<AttemptOutcome> {
    const timeout = AbortSignal.timeout(this.timeoutMs);
    const signal = outer ? AbortSignal.any([outer, timeout]) : timeout;
    // Race the send against the signal: a channel that ignores its signal still
    // cannot hold the worker past the timeout.
    let onAbort: (() => void) | undefined;
    const aborted = new Promise<never>((_, reject) => {
      onAbort = () =>
        reject(
          timeout.aborted
            ? Object.assign(new Error(`timed out after ${this.timeoutMs} ms`), { retryable: true })
            : new Error('delivery cancelled'),
        );
      if (signal.aborted) onAbort();
      else signal.addEventListener('abort', onAbort, { once: true });
    });
    try {
      await Promise.race([ch.send(alert, signal), aborted]);
      return { ok: true };
    } catch (e) {
      const timedOut = timeout.aborted;
      return {
        ok: false,
        retryable: timedOut || isRetryable(e),
        reason: timedOut ? `timed out after ${this.timeoutMs} ms` : errorReason(e),
      };
    } finally {
      if (onAbort) signal.removeEventListener('abort', onAbort);
      aborted.catch(() => {});
    }
  }
}

function errorReason(e: unknown): string {
  const msg = e instanceof Error ? e.message : String(e);
  return msg.split('\n')[0].slice(0, 300);
}
