import { inject, injectable } from 'tsyringe';
import type { Alert } from '../alert.ts';
import type { Clock } from '../clock.ts';
import type { VigilConfig } from '../config-schema.ts';
import type { Channel } from '../contracts.ts';
import { isDeliveryError, isRetryable } from '../errors.ts';
import { type Logger, scrub } from '../logger.ts';
import type { Metrics } from '../metrics.ts';
import { keys, TTL } from '../store/keys.ts';
import type { Store } from '../store/store.ts';
import { TOKENS } from '../tokens.ts';
import type { Delivered, DeliveryLog, DeliveryRecord } from './delivery-log.ts';
import type { Incident } from './lifecycle.ts';
import { nextRetry, type RetryPolicy } from './retry.ts';

/** Queue job data: the channel's name and the alert, never a secret (BullMQ stores it in clear). */
export interface DeliverJob {
  id: string;
  channel: string;
  alert: Alert;
}

/**
 * What one attempt came to. `final: false` asks the queue to run the job again after
 * `delayMs`; everything else is the job's end (and has its row in the delivery log).
 */
export type AttemptOutcome =
  | { ok: true; superseded?: boolean }
  | { ok: false; final: true; reason: string }
  | { ok: false; final: false; reason: string; delayMs: number };

type SendResult =
  | { ok: true }
  | { ok: false; retryable: boolean; reason: string; retryAfterMs?: number; gone?: boolean };

/** How long a delivered job's row and sent mark wait for others to share their write, ms. */
const FLUSH_MS = 2;

/** A channel answered that its endpoint is gone (HTTP 410): the notifier disables it and says so. */
export type OnGone = (channel: string, reason: string) => Promise<void>;

/**
 * The deliver stage: one attempt with the delivery timeout, then the retry decision
 * (backoff with jitter, Retry-After, until max_age) and a delivery-log row for every
 * attempt. Both queue backends call this, so retry and logging rules exist once.
 */
@injectable()
export class Deliverer {
  onGone: OnGone | undefined;
  private readonly timeoutMs: number;
  private readonly policy: RetryPolicy;

  constructor(
    @inject(TOKENS.Channels) private readonly channels: ReadonlyMap<string, Channel>,
    @inject(TOKENS.DeliveryLog) private readonly log: DeliveryLog,
    @inject(TOKENS.Config) config: VigilConfig,
    @inject(TOKENS.Logger) private readonly logger: Logger,
    @inject(TOKENS.Clock) private readonly clock: Clock,
    @inject(TOKENS.Store) private readonly store: Store,
    @inject(TOKENS.Metrics) private readonly metrics?: Metrics,
  ) {
    const n = config.notifications;
    this.timeoutMs = n.delivery_timeout as number;
    this.policy = {
      baseMs: n.retry_delay as number,
      maxDelayMs: n.retry_max_delay as number,
      maxAgeMs: n.max_age as number,
      maxAttempts: n.max_attempts as number,
    };
    log.holdsRows(() => this.written());
  }

  /** The last write of held rows and marks (its errors are logged). */
  private lastWrite: Promise<unknown> = Promise.resolve();

  /** Writes the held rows and marks now and waits for them (not for deliveries in flight). */
  private async written(): Promise<void> {
    this.flush();
    await this.lastWrite;
  }

  /** Writes after a delivery still in flight. */
  private readonly inflight = new Set<Promise<unknown>>();

  private track(p: Promise<unknown>): void {
    this.inflight.add(p);
    void p.finally(() => this.inflight.delete(p));
  }

  /**
   * Delivered jobs whose row and sent mark are not written yet: they go as one write
   * within FLUSH_MS (a batch costs one round trip, not two per delivery).
   */
  private pending: Delivered[] = [];
  private flushTimer: NodeJS.Timeout | undefined;

  /** Resolves once every delivery's sent mark and log row are written (their errors are logged, not thrown). */
  async settled(): Promise<void> {
    for (;;) {
      this.flush();
      if (!this.inflight.size) return;
      await Promise.all(this.inflight);
    }
  }

  /** Writes the pending rows and marks now (one step; ahead of any later read on the store's connection). */
  private flush(): void {
    clearTimeout(this.flushTimer);
    this.flushTimer = undefined;
    if (!this.pending.length) return;
    const batch = this.pending;
    this.pending = [];
    this.lastWrite = this.log
      .delivered(batch)
      .catch((err) =>
        this.logger.warn(
          { err: (err as Error).message, rows: batch.length },
          'could not write the delivery log and sent marks',
        ),
      );
    this.track(this.lastWrite);
  }

  channelNames(): string[] {
    return [...this.channels.keys()];
  }

  /**
   * `attempt` counts tries of this job (1 first); `started` counts every start,
   * including one cut short by a crash, and is what the log shows.
   */
  async attempt(job: DeliverJob, attempt: number, outer?: AbortSignal, started = attempt): Promise<AttemptOutcome> {
    const ch = this.channels.get(job.channel);
    const dropped = await this.dropped(job, attempt, started);
    if (dropped) {
      await this.record(job, ch?.type, 'suppressed', attempt - 1, dropped);
      return { ok: true, superseded: true };
    }
    const sent: SendResult = ch
      ? await this.send(ch, job.alert, outer)
      : { ok: false, retryable: false, reason: `channel "${job.channel}" is not configured` };
    const tries = Math.max(attempt, started);
    // (the fields of every line about this attempt; no child logger per delivery, which costs more)
    const about = { channel: job.channel, dedup_key: job.alert.dedup_key, state: job.alert.state, attempt };
    if (sent.ok) {
      this.logger.info(about, 'alert delivered');
      this.metrics?.deliverySeconds.observe({ channel: job.channel }, (this.clock.now() - job.alert.at) / 1000);
      // The sent mark and the log row go out within FLUSH_MS, with those of the deliveries
      // around it (one script on Redis), and the lane does not wait for them: its next job
      // starts at once. A read of the marks (dropped) writes them first, and settled()
      // (the queue's idle and close) waits for them.
      this.delivered(job, ch?.type, tries);
      return { ok: true };
    }
    if (sent.gone && !job.alert.test) await this.onGone?.(job.channel, sent.reason);
    const next =
      sent.retryable && !sent.gone
        ? nextRetry(this.policy, attempt, this.clock.now() - job.alert.at, sent.retryAfterMs)
        : undefined;
    if (next?.retry) {
      this.logger.warn(
        { ...about, reason: sent.reason, retry_in_ms: next.delayMs },
        'alert delivery failed, will retry',
      );
      await this.record(job, ch?.type, 'retried', tries, sent.reason, next.delayMs);
      return { ok: false, final: false, reason: sent.reason, delayMs: next.delayMs };
    }
    // The last failure is the reason; running out of time says so (running out of attempts is the count).
    const why = next?.retry === false && next.why === 'age' ? `${sent.reason} (gave up at max_age)` : sent.reason;
    this.logger.warn({ ...about, reason: why, retryable: sent.retryable }, 'alert delivery failed');
    await this.record(job, ch?.type, 'failed', tries, why);
    return { ok: false, final: true, reason: why };
  }

  private async record(
    job: DeliverJob,
    type = 'unknown',
    outcome: 'delivered' | 'retried' | 'failed' | 'suppressed',
    attempts: number,
    reason?: string,
    retryInMs?: number,
  ): Promise<void> {
    this.metrics?.deliveries.inc({ channel: job.channel, outcome });
    // (rows pending go first: the log keeps the order things happened in)
    this.flush();
    await this.log
      .record(row(job, this.clock.now(), type, outcome, attempts, reason, retryInMs))
      .catch((err) => this.logger.warn({ err: (err as Error).message }, 'could not write the delivery log'));
  }

  /** A delivery's log row and, unless it is a test alert, its channel's sent mark: pending for the next flush. */
  private delivered(job: DeliverJob, type = 'unknown', attempts: number): void {
    this.metrics?.deliveries.inc({ channel: job.channel, outcome: 'delivered' });
    const sent = job.alert.test
      ? undefined
      : { key: keys.sent(job.channel, job.alert.dedup_key), seq: job.alert.seq, ttlMs: TTL.sent };
    this.pending.push({ row: row(job, this.clock.now(), type, 'delivered', attempts), sent });
    if (!this.flushTimer) {
      this.flushTimer = setTimeout(() => this.flush(), FLUSH_MS);
      this.flushTimer.unref();
    }
  }

  /**
   * Why a retried or recovered job should not go out any more: this channel already
   * delivered a later transition of the incident (sending it now would reorder the
   * story), or the incident was resolved meanwhile (a trigger after its resolve is
   * noise). A first attempt was picked before any later job, so it is not checked.
   */
  private async dropped(job: DeliverJob, attempt: number, started: number): Promise<string | undefined> {
    if (job.alert.test || (attempt === 1 && started <= 1)) return undefined;
    // (marks still pending go first, so the reads below see them)
    this.flush();
    const [sent, incident] = await Promise.all([
      this.store.get<number>(keys.sent(job.channel, job.alert.dedup_key)).catch(() => undefined),
      job.alert.state === 'resolve'
        ? undefined
        : this.store.get<Incident>(keys.incident(job.alert.dedup_key)).catch(() => undefined),
    ]);
    if (sent !== undefined && sent > job.alert.seq) return 'superseded: a later transition was already delivered';
    if (incident && !incident.open && incident.seq > job.alert.seq) return 'dropped: the incident was resolved first';
    return undefined;
  }

  private async send(ch: Channel, alert: Alert, outer?: AbortSignal): Promise<SendResult> {
    // One controller and one timer per delivery (AbortSignal.timeout and .any cost
    // several times more per call, and a worker makes one per alert).
    const ac = new AbortController();
    let timedOut = false;
    // Race the send against the signal: a channel that ignores its signal still
    // cannot hold the worker past the timeout.
    let fail: ((e: Error) => void) | undefined;
    const aborted = new Promise<never>((_, reject) => {
      fail = reject;
    });
    const onTimeout = () => {
      timedOut = true;
      ac.abort(new Error(`timed out after ${this.timeoutMs} ms`));
      fail?.(Object.assign(new Error(`timed out after ${this.timeoutMs} ms`), { retryable: true }));
    };
    const onOuter = () => {
      ac.abort(outer?.reason);
      fail?.(new Error('delivery cancelled'));
    };
    const timer = setTimeout(onTimeout, this.timeoutMs);
    if (outer?.aborted) onOuter();
    else outer?.addEventListener('abort', onOuter, { once: true });
    try {
      await Promise.race([ch.send(alert, ac.signal), aborted]);
      return { ok: true };
    } catch (e) {
      const d = isDeliveryError(e) ? e : undefined;
      return {
        ok: false,
        retryable: timedOut || isRetryable(e),
        reason: timedOut ? `timed out after ${this.timeoutMs} ms` : errorReason(e),
        ...(d?.retryAfterMs !== undefined ? { retryAfterMs: d.retryAfterMs } : {}),
        ...(d?.gone ? { gone: true } : {}),
      };
    } finally {
      clearTimeout(timer);
      outer?.removeEventListener('abort', onOuter);
      aborted.catch(() => {});
    }
  }
}

/** One delivery-log row of a job. */
function row(
  job: DeliverJob,
  at: number,
  type: string,
  outcome: DeliveryRecord['outcome'],
  attempts: number,
  reason?: string,
  retryInMs?: number,
): DeliveryRecord {
  return {
    job_id: job.id,
    at,
    channel: job.channel,
    type,
    dedup_key: job.alert.dedup_key,
    state: job.alert.state,
    severity: job.alert.severity,
    title: job.alert.title,
    ...(job.alert.test ? { test: true } : {}),
    outcome,
    attempts,
    ...(reason !== undefined ? { reason } : {}),
    ...(retryInMs !== undefined ? { retry_in_ms: retryInMs } : {}),
  };
}

/** A failure as the delivery log, the test-alert answer and the log show it: one line, every known secret scrubbed. */
function errorReason(e: unknown): string {
  const msg = e instanceof Error ? e.message : String(e);
  return scrub(msg.split('\n')[0]).slice(0, 300);
}
