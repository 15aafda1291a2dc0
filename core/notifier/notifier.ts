import { createHash } from 'node:crypto';
import { type Alert, type AlertInput, AlertInputSchema, type AlertState } from '../alert.ts';
import type { Clock } from '../clock.ts';
import type { ChannelEntry } from '../config.ts';
import { AppError } from '../errors.ts';
import type { Logger } from '../logger.ts';
import { keys, TTL } from '../store/keys.ts';
import type { Store } from '../store/store.ts';
import { admit, admitRequest, admitted } from './admit.ts';
import type { DeliverJob } from './deliverer.ts';
import type { DeliveryLog, DeliveryRecord } from './delivery-log.ts';
import { type Incident, transition } from './lifecycle.ts';
import type { AlertQueue } from './queue.ts';
import { CommitUnsupported, RedisCommit } from './redis-commit.ts';
import { route } from './route.ts';

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

/** The transition an incident record holds as an alert for the channels. */
function alertOf(i: Incident, state: AlertState, at: number): Alert {
  return {
    dedup_key: i.dedup_key,
    severity: i.severity,
    state,
    title: i.title,
    summary: i.summary,
    details: i.details,
    source: i.source,
    at,
    seq: i.seq,
  };
}

/**
 * The notifier: a short pipeline of stages, each in its own module and testable alone.
 *   lifecycle (lifecycle.ts)  one compare-and-set per dedup_key: a transition or nothing,
 *                             written with its outbox entry, so several instances page once
 *   route (route.ts)          per channel: enabled, resolve_messages, min_severity
 *   admit (admit.ts)          per channel, one atomic step: what the channel was told of
 *                             the incident; quiet window and rate limit for one new to it
 *   enqueue                   one job per (channel, transition), its id the transition's
 *   deliver (deliverer.ts)    in the worker: timeout, retries with backoff, delivery log
 * notify() returns once the jobs exist (durable on Redis); it never waits for a channel.
 * A crash between the lifecycle write and the jobs leaves the outbox entry, and
 * reconcile() (at start, and on the engine's tick) finishes the fan-out.
 */
export class Notifier {
  private readonly entries = new Map<string, ChannelEntry>();
  /** dedup_keys whose outbox this process could not clear (retried by reconcile()). */
  private readonly unsettled = new Set<string>();
  /** Redis: lifecycle, gates and jobs in one script (redis-commit.ts); undefined: the stages one by one. */
  private readonly commit: RedisCommit | undefined;
  private commitFailed = false;

  constructor(
    entries: readonly ChannelEntry[],
    private readonly store: Store,
    private readonly queue: AlertQueue,
    private readonly log: DeliveryLog,
    private readonly clock: Clock,
    private readonly logger: Logger,
  ) {
    for (const e of entries) this.entries.set(e.name, { ...e });
    this.commit = RedisCommit.for(store, queue, logger);
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
    const key = parsed.data.dedup_key;
    if (this.commit) {
      try {
        return await this.notifyInOne(this.commit, parsed.data, now);
      } catch (err) {
        if (!(err instanceof CommitUnsupported)) {
          this.unsettled.add(key);
          throw err;
        }
        // Nothing it wrote stands in the way: the stages below redo it (the gates answer as they did).
        if (!this.commitFailed)
          this.logger.warn({ err: err.message }, 'notifier commit failed; stage by stage instead');
        this.commitFailed = true;
      }
    }
    let r: { fired?: AlertState; incident?: Incident };
    try {
      r = await this.store.update<Incident, { fired?: AlertState; incident?: Incident }>(keys.incident(key), (cur) => {
        const t = transition(cur, parsed.data, now);
        if (!t.fired || !t.next) return { value: t.next, result: { incident: t.next }, ttlMs: TTL.incident };
        const next: Incident = { ...t.next, outbox: [...(t.next.outbox ?? []), t.next.seq] };
        return { value: next, result: { fired: t.fired, incident: next }, ttlMs: TTL.incident };
      });
    } catch (err) {
      // The write may have happened with its reply lost: reconcile() looks at this incident.
      this.unsettled.add(key);
      throw err;
    }
    const { fired, incident } = r;
    if (!fired || !incident) {
      // Nothing new; but a transition an earlier call wrote and could not fan out is finished now.
      if (incident?.outbox?.length) await this.reconcileOne(key, incident);
      return { channels: [] };
    }
    const channels = await this.fanOut(alertOf(incident, fired, now), incident.opened_at);
    await this.settle(incident.dedup_key, incident.seq, channels);
    return { fired, seq: incident.seq, channels };
  }

  /**
   * The same stages with one round trip to Redis: the plan (lifecycle, route, the gate
   * request and the job of each state a gate may answer) is computed here against the
   * incident this process last saw, and the commit script checks and writes it at once.
   * The incident needs no outbox entry: its jobs exist in the same atomic step.
   */
  private async notifyInOne(commit: RedisCommit, input: AlertInput, now: number): Promise<NotifyResult> {
    type Planned = { fired?: AlertState; incident?: Incident; alert?: Alert; routes: [ChannelEntry, string?][] };
    const { result, channels } = await commit.run<Planned>(keys.incident(input.dedup_key), (cur) => {
      const t = transition(cur as Incident | undefined, input, now);
      if (!t.fired || !t.next)
        return { value: t.next, ttlMs: TTL.incident, channels: [], result: { incident: t.next, routes: [] } };
      const incident = t.next;
      const alert = alertOf(incident, t.fired, now);
      const routes: Planned['routes'] = [];
      const planned = [];
      for (const e of this.entries.values()) {
        const r = route(e, alert);
        routes.push([e, r.send ? undefined : r.reason]);
        if (!r.send) continue;
        // An escalation of an incident the channel was not told of goes out as its trigger.
        const states: AlertState[] = alert.state === 'escalate' ? ['escalate', 'trigger'] : [alert.state];
        planned.push({
          admit: admitRequest(e, alert, incident.opened_at),
          jobs: states.map((state) => {
            const a = state === alert.state ? alert : { ...alert, state };
            return { id: jobIdFor(e.name, a), channel: e.name, alert: a };
          }),
        });
      }
      return {
        value: incident,
        ttlMs: TTL.incident,
        channels: planned,
        result: { fired: t.fired, incident, alert, routes },
      };
    });
    const { fired, incident, alert, routes } = result;
    if (!fired || !incident || !alert) {
      if (incident?.outbox?.length) await this.reconcileOne(input.dedup_key, incident);
      return { channels: [] };
    }
    // The gates' answers are in the order of the routed channels.
    let n = 0;
    const gated = routes.map(([, filtered]) => (filtered === undefined ? channels[n++] : undefined));
    const out = await Promise.all(
      routes.map(async ([e, filtered], i): Promise<NotifyResult['channels'][number]> => {
        const c = gated[i];
        if (!c) return { name: e.name, outcome: 'filtered', reason: filtered };
        if ('job' in c) return { name: e.name, outcome: c.duplicate ? 'duplicate' : 'queued', job_id: c.job.id };
        const g = admitted(c.gate, e, alert);
        if (g.ok || !g.log) return { name: e.name, outcome: 'filtered', reason: g.ok ? undefined : g.reason };
        return { name: e.name, ...(await this.suppress(e, alert, g.reason)) };
      }),
    );
    return { fired, seq: incident.seq, channels: out };
  }

  /**
   * route -> admit -> enqueue for every channel; the channels side by side (each has its
   * own gate and lane). A channel gets the transition as its admit says: an escalation of
   * an incident it was not told of is its trigger. `episode`: the incident's opening.
   */
  private fanOut(a: Alert, episode: number): Promise<NotifyResult['channels']> {
    return Promise.all(
      [...this.entries.values()].map(async (e): Promise<NotifyResult['channels'][number]> => {
        const r = route(e, a);
        if (!r.send) return { name: e.name, outcome: 'filtered', reason: r.reason };
        const g = await admit(this.store, e, a, episode).catch((err) => ({ ok: false, error: err as Error }) as const);
        if (!g.ok) {
          if ('error' in g) return { name: e.name, outcome: 'error', reason: g.error.message };
          if (!g.log) return { name: e.name, outcome: 'filtered', reason: g.reason };
          return { name: e.name, ...(await this.suppress(e, a, g.reason)) };
        }
        return { name: e.name, ...(await this.enqueue(e.name, g.as === a.state ? a : { ...a, state: g.as })) };
      }),
    );
  }

  /** Clears the transition's outbox entry once every channel's job exists (kept otherwise, for reconcile()). */
  private async settle(dedupKey: string, seq: number, channels: NotifyResult['channels']): Promise<void> {
    if (channels.some((c) => c.outcome === 'error')) {
      this.unsettled.add(dedupKey);
      return;
    }
    try {
      await this.store.update<Incident, void>(keys.incident(dedupKey), (cur) => ({
        value: cur && { ...cur, outbox: (cur.outbox ?? []).filter((s) => s !== seq) },
        result: undefined,
        ttlMs: TTL.incident,
      }));
      this.unsettled.delete(dedupKey);
    } catch (err) {
      this.unsettled.add(dedupKey);
      this.logger.warn({ err: (err as Error).message, dedup_key: dedupKey }, 'outbox not cleared; reconcile will');
    }
  }

  /**
   * Finishes fan-outs a crash or a store error cut short: every incident with an outbox
   * entry is queued again (its admit and job id make that idempotent: at most a
   * duplicate delivery with the same identity). `full` scans every incident (at start);
   * otherwise only those this process left unsettled. Returns the transitions re-queued.
   */
  async reconcile(full = false): Promise<number> {
    const dedupKeys = full
      ? (await this.store.keys(keys.incidentPrefix)).map((k) => k.slice(keys.incidentPrefix.length))
      : [...this.unsettled];
    let n = 0;
    for (const key of dedupKeys) {
      const i = await this.store.get<Incident>(keys.incident(key));
      if (!i?.outbox?.length) {
        this.unsettled.delete(key);
        continue;
      }
      n += await this.reconcileOne(key, i);
    }
    if (n) this.logger.warn({ transitions: n }, 'reconciled alert transitions left unqueued');
    return n;
  }

  /** Finishes the fan-out of an incident's outbox: its latest transition goes out; older ones were overtaken. */
  private async reconcileOne(key: string, i: Incident): Promise<number> {
    let n = 0;
    for (const seq of i.outbox ?? []) {
      const channels = seq === i.seq ? await this.fanOut(alertOf(i, i.last_state, i.updated_at), i.opened_at) : [];
      if (seq === i.seq) n++;
      await this.settle(key, seq, channels);
    }
    return n;
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
   * A channel's endpoint is gone (HTTP 410): it is disabled here and an alert goes out
   * through the other channels, so nobody waits on a channel that cannot deliver.
   */
  async channelGone(name: string, reason: string): Promise<void> {
    const e = this.entries.get(name);
    if (!e?.enabled) return;
    this.setChannel(name, { enabled: false });
    this.logger.error({ channel: name, reason }, 'channel disabled: its endpoint is gone');
    await this.notify({
      dedup_key: `vigil:channel-gone:${name}`,
      severity: 'critical',
      title: `channel ${name} disabled`,
      summary: `${name} answered that its endpoint is gone (${reason}); it is disabled until re-enabled`.slice(0, 1024),
      source: 'vigil',
    }).catch((err) => this.logger.error({ err: (err as Error).message }, 'could not alert about a gone channel'));
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
      summary: `Alert for channel "${channel}": if you can read this, the channel works.`,
      details: 'Sent from Vigil (Send test alert). No incident is open.',
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
  async waitForOutcome(jobId: string, timeoutMs: number): Promise<DeliveryRecord | undefined> {
    const until = Date.now() + timeoutMs;
    while (Date.now() < until) {
      const r = await this.log.find(jobId);
      if (r) return r;
      await new Promise((res) => setTimeout(res, 50));
    }
    return undefined;
  }

  async openAlerts(): Promise<Incident[]> {
    const ks = await this.store.keys(keys.incidentPrefix);
    const out: Incident[] = [];
    for (const k of ks) {
      const i = await this.store.get<Incident>(k);
      if (i?.open) out.push(i);
    }
    return out.sort((a, b) => b.updated_at - a.updated_at);
  }
}
