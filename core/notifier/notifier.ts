import { createHash } from 'node:crypto';
import { type Alert, type AlertInput, AlertInputSchema, type AlertState, severityRank } from '../alert.ts';
import type { Clock } from '../clock.ts';
import type { ChannelEntry } from '../config.ts';
import { AppError } from '../errors.ts';
import type { Logger } from '../logger.ts';
import type { Store } from '../store/store.ts';
import type { DeliverJob } from './deliverer.ts';
import type { DeliveryLog } from './delivery-log.ts';
import { type Incident, transition } from './lifecycle.ts';
import type { AlertQueue } from './queue.ts';

export type RouteOutcome = 'queued' | 'duplicate' | 'filtered' | 'suppressed' | 'error';

export interface NotifyResult {
  /** The transition this call fired, if any (none for a repeat). */
  fired?: AlertState;
  seq?: number;
  channels: { name: string; outcome: RouteOutcome; reason?: string; job_id?: string }[];
}

/** Job ids: BullMQ custom ids must not contain ':' nor be all digits, so hash the tuple. */
export function jobIdFor(channel: string, a: Pick<Alert, 'dedup_key' | 'state' | 'seq'>): string {
  return `j${createHash('sha1').update(`${channel}\n${a.dedup_key}\n${a.state}\n${a.seq}`).digest('hex')}`;
}

/**
 * The notifier pipeline (DESIGN.md "Data flow"): lifecycle transition per dedup_key
 * (durable, compare-and-set, so several instances page once), then per channel:
 * enabled and min_severity, resolve_messages, quiet window, rate limit, and one queue
 * job per (channel, transition) with a claimed id. Delivery happens in the worker;
 * notify() never waits for a channel.
 */
export class Notifier {
  private readonly entries = new Map<string, ChannelEntry>();

  constructor(
    entries: readonly ChannelEntry[],
    private readonly store: Store,
    private readonly queue: AlertQueue,
    private readonly log: DeliveryLog,
    private readonly clock: Clock,
    private readonly logger: Logger,
  ) {
    for (const e of entries) this.entries.set(e.name, { ...e });
  }

  channels(): ChannelEntry[] {
    return [...this.entries.values()];
  }

  /** Runtime toggles from the admin API (enabled, min_severity); effective at once. */
  setChannel(
    name: string,
    patch: Partial<Pick<ChannelEntry, 'enabled' | 'min_severity' | 'resolve_messages'>>,
  ): ChannelEntry {
    const e = this.entries.get(name);
    if (!e) throw new AppError('CHANNEL_NOT_FOUND', `no channel named "${name}"`);
    Object.assign(e, patch);
    return e;
  }

  async notify(input: AlertInput): Promise<NotifyResult> {
    const parsed = AlertInputSchema.safeParse(input);
    if (!parsed.success) {
      throw new AppError(
        'BAD_INPUT',
        `alert: ${parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`,
      );
    }
    const now = this.clock.now();
    const { fired, incident } = await this.store.update<Incident, { fired?: AlertState; incident?: Incident }>(
      `alert:${parsed.data.dedup_key}`,
      (cur) => {
        const r = transition(cur, parsed.data, now);
        return { value: r.next, result: { fired: r.fired, incident: r.next } };
      },
    );
    if (!fired || !incident) return { channels: [] };
    const alert: Alert = {
      dedup_key: incident.dedup_key,
      severity: incident.severity,
      state: fired,
      title: incident.title,
      summary: incident.summary,
      details: incident.details,
      source: incident.source,
      at: now,
      seq: incident.seq,
    };
    const channels: NotifyResult['channels'] = [];
    for (const e of this.entries.values()) channels.push({ name: e.name, ...(await this.route(e, alert)) });
    return { fired, seq: incident.seq, channels };
  }

  private async route(e: ChannelEntry, a: Alert): Promise<{ outcome: RouteOutcome; reason?: string; job_id?: string }> {
    if (!e.enabled) return { outcome: 'filtered', reason: 'disabled' };
    if (a.state === 'resolve' && !e.resolve_messages) return { outcome: 'filtered', reason: 'resolve_messages off' };
    // A resolve is routed like the incident it closes.
    if (severityRank(a.severity) < severityRank(e.min_severity))
      return { outcome: 'filtered', reason: 'below min_severity' };
    // Quiet window, then rate limit, in one atomic store step (one round trip on Redis).
    const gate = await this.store.admit({
      markKey: `notified:${e.name}:${a.dedup_key}`,
      field: a.state,
      now: a.at,
      quietMs: e.quiet_window,
      markTtlMs: Math.max(e.quiet_window, 86_400_000),
      rateKey: `rl:${e.name}`,
      windowMs: e.rate_limit.window,
      max: e.rate_limit.max,
    });
    if (!gate.ok && gate.why === 'quiet') {
      return this.suppress(e, a, `quiet window (${a.state} sent ${Math.round((a.at - gate.last) / 1000)} s ago)`);
    }
    if (!gate.ok) return this.suppress(e, a, `rate limit (${e.rate_limit.max} per ${e.rate_limit.window / 1000} s)`);
    return this.enqueue(e.name, a);
  }

  private async enqueue(
    channel: string,
    a: Alert,
  ): Promise<{ outcome: RouteOutcome; reason?: string; job_id?: string }> {
    // The id is the transition's identity: the queue refuses an id it already holds, so
    // a retried enqueue cannot page twice.
    const id = jobIdFor(channel, a);
    const job: DeliverJob = { id, channel, alert: a };
    try {
      const accepted = await this.queue.enqueue(job);
      return { outcome: accepted ? 'queued' : 'duplicate', job_id: id };
    } catch (err) {
      this.logger.error({ err: (err as Error).message, channel }, 'enqueue failed');
      return { outcome: 'error', reason: (err as Error).message, job_id: id };
    }
  }

  private async suppress(
    e: ChannelEntry,
    a: Alert,
    reason: string,
  ): Promise<{ outcome: RouteOutcome; reason: string }> {
    this.logger.info({ channel: e.name, dedup_key: a.dedup_key, state: a.state, reason }, 'alert suppressed');
    await this.log.record({
      job_id: jobIdFor(e.name, a),
      at: a.at,
      channel: e.name,
      type: e.type,
      dedup_key: a.dedup_key,
      state: a.state,
      severity: a.severity,
      title: a.title,
      outcome: 'suppressed',
      attempts: 0,
      reason,
    });
    return { outcome: 'suppressed', reason };
  }

  /**
   * Send test alert: the real queue, worker and channel, but no lifecycle, severity
   * routing, quiet window or rate limit. Marked TEST so nobody mistakes it for an incident.
   */
  async sendTest(channel: string): Promise<{ job_id: string }> {
    if (!this.entries.has(channel)) throw new AppError('CHANNEL_NOT_FOUND', `no channel named "${channel}"`);
    const now = this.clock.now();
    const alert: Alert = {
      dedup_key: `vigil-test-${channel}-${now}`,
      severity: 'warning',
      state: 'trigger',
      title: 'TEST: Vigil test alert',
      summary: `TEST alert for channel "${channel}": if you can read this, the channel works.`,
      details: 'This is a test alert sent from Vigil (Send test alert). No incident is open.',
      source: 'vigil-test',
      at: now,
      seq: 1,
      test: true,
    };
    const id = `t${createHash('sha1').update(`${channel}\n${now}\n${Math.random()}`).digest('hex')}`;
    await this.queue.enqueue({ id, channel, alert });
    return { job_id: id };
  }

  /** Waits for a job's final delivery-log row (Send test alert, CLI). */
  async waitForOutcome(
    jobId: string,
    timeoutMs: number,
  ): Promise<import('./delivery-log.ts').DeliveryRecord | undefined> {
    const until = Date.now() + timeoutMs;
    while (Date.now() < until) {
      const r = await this.log.find(jobId);
      if (r) return r;
      await new Promise((res) => setTimeout(res, 50));
    }
    return undefined;
  }

  async openAlerts(): Promise<Incident[]> {
    const keys = await this.store.keys('alert:');
    const out: Incident[] = [];
    for (const k of keys) {
      const i = await this.store.get<Incident>(k);
      if (i?.open) out.push(i);
    }
    return out.sort((a, b) => b.updated_at - a.updated_at);
  }
}
