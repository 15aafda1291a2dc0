import { createHash } from 'node:crypto';
import { inject, injectable } from 'tsyringe';
import { type Alert, type AlertInput, AlertInputSchema, type AlertState } from '../alert.ts';
import type { Clock } from '../clock.ts';
import type { ChannelEntry, VigilConfig } from '../config-schema.ts';
import { AppError } from '../errors.ts';
import type { Logger } from '../logger.ts';
import { keys, TTL } from '../store/keys.ts';
import type { Store } from '../store/store.ts';
import { TOKENS } from '../tokens.ts';
import type { OutboxEntry, Units } from '../unit.ts';
import { admit } from './admit.ts';
import type { DeliverJob } from './deliverer.ts';
import type { DeliveryLog, DeliveryRecord } from './delivery-log.ts';
import { type Incident, transition } from './lifecycle.ts';
import type { AlertQueue } from './queue.ts';
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

/** What one channel's stages see: its entry, the transition (as the gate may restate it), the episode. */
interface ChannelStep {
  entry: ChannelEntry;
  alert: Alert;
  episode: number;
  /** What the stages act through: the gate's store, the queue, the suppression log. */
  store: Store;
  enqueue(channel: string, a: Alert): Promise<ChannelEnd>;
  suppress(e: ChannelEntry, a: Alert, reason: string): Promise<ChannelEnd>;
}

type ChannelEnd = { outcome: RouteOutcome; reason?: string; job_id?: string };

/**
 * One stage of a channel's delivery, one signature for all (Alertmanager composes its
 * notification pipeline the same way): it ends the channel's run with an outcome, or
 * returns undefined to hand the step, maybe restated, to the next stage.
 */
interface ChannelStage {
  name: string;
  run(step: ChannelStep): Promise<ChannelEnd | undefined> | ChannelEnd | undefined;
}

/** The channel stages, in order: the one place a channel's routing rules are applied. */
const CHANNEL_STAGES: readonly ChannelStage[] = [
  {
    // enabled, resolve_messages, min_severity
    name: 'route',
    run: ({ entry, alert }) => {
      const r = route(entry, alert);
      return r.send ? undefined : { outcome: 'filtered', reason: r.reason };
    },
  },
  {
    // what the channel was told of the incident; quiet window and rate limit for one new to it
    name: 'admit',
    run: async (step) => {
      const { entry, alert, episode } = step;
      const g = await admit(step.store, entry, alert, episode).catch(
        (err) => ({ ok: false, error: err as Error }) as const,
      );
      if (!g.ok) {
        if ('error' in g) return { outcome: 'error', reason: g.error.message };
        if (!g.log) return { outcome: 'filtered', reason: g.reason };
        return step.suppress(entry, alert, g.reason);
      }
      // An escalation of an incident the channel was not told of goes out as its trigger.
      if (g.as !== alert.state) step.alert = { ...alert, state: g.as };
      return undefined;
    },
  },
  {
    // one job per (channel, transition), its id the transition's
    name: 'enqueue',
    run: (step) => step.enqueue(step.entry.name, step.alert),
  },
];

/**
 * A transition whose predecessor of the same incident was not handed to the channels yet
 * (its delivery failed, or another instance has it): it waits in the outbox, and the
 * reconciler hands them out oldest first, so a channel never gets a resolve before its
 * trigger.
 */
class Waiting extends Error {
  constructor(a: Alert) {
    super(`alert ${a.dedup_key} #${a.seq} waits for its previous transition`);
  }
}

/** The outbox entry of a transition: delivered after the unit that decided it commits. */
interface AlertEntry {
  kind: 'alert';
  alert: Alert;
  /** The incident's opening: what a channel was told is told per episode. */
  episode: number;
}

/**
 * The notifier: a short pipeline of stages, each in its own module and testable alone.
 *   lifecycle (lifecycle.ts)  per dedup_key: a transition or nothing, written in the
 *                             caller's unit of work with an outbox entry (core/unit.ts)
 * then, from the outbox, once that unit committed (at once, or by the reconciler):
 *   in order                  a transition waits until its incident's previous one was
 *                             handed to the channels (marked `handed` with the jobs)
 *   route (route.ts)          per channel: enabled, resolve_messages, min_severity
 *   admit (admit.ts)          per channel, one atomic step: what the channel was told of
 *                             the incident; quiet window and rate limit for one new to it
 *   enqueue                   one job per (channel, transition), its id the transition's
 *   deliver (deliverer.ts)    in the worker: timeout, retries with backoff, delivery log
 * Delivering an entry twice is safe: the gate answers a transition it passed as it did,
 * the job id refuses a copy. notify() never waits for a channel.
 */
@injectable()
export class Notifier {
  private readonly entries = new Map<string, ChannelEntry>();
  /** What delivering a transition gave each channel, for a notify() outside a unit to return. */
  private readonly outcomes = new Map<string, NotifyResult['channels']>();

  constructor(
    @inject(TOKENS.Config) config: VigilConfig,
    @inject(TOKENS.Store) private readonly store: Store,
    @inject(TOKENS.Queue) private readonly queue: AlertQueue,
    /** The notifier's view of the delivery log: its suppressions are counted too. */
    @inject(TOKENS.NotifierLog) private readonly log: DeliveryLog,
    @inject(TOKENS.Clock) private readonly clock: Clock,
    @inject(TOKENS.Logger) private readonly logger: Logger,
    @inject(TOKENS.Units) private readonly units: Units,
  ) {
    for (const e of config.notifications.channels as ChannelEntry[]) this.entries.set(e.name, { ...e });
    units.handle('alert', (e) => this.deliver(e as unknown as AlertEntry));
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

  /**
   * Raises, escalates or resolves an incident. Inside a unit of work the transition
   * commits with it and is delivered after (its channels are not known yet: `channels`
   * is empty); outside one it is its own unit, delivered before this returns.
   */
  async notify(input: AlertInput): Promise<NotifyResult> {
    const parsed = AlertInputSchema.safeParse(input);
    if (!parsed.success) {
      throw new AppError(
        'BAD_INPUT',
        `alert: ${parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`,
      );
    }
    const a = parsed.data;
    const r = await this.units.run(async () => {
      const now = this.clock.now();
      const t = await this.store.update<Incident, { fired?: AlertState; incident?: Incident }>(
        keys.incident(a.dedup_key),
        (cur) => {
          const x = transition(cur, a, now);
          return { value: x.next, result: { fired: x.fired, incident: x.next }, ttlMs: TTL.incident };
        },
      );
      if (t.fired && t.incident) {
        const entry: AlertEntry = {
          kind: 'alert',
          alert: alertOf(t.incident, t.fired, now),
          episode: t.incident.opened_at,
        };
        await this.units.emit(entry as unknown as OutboxEntry);
      }
      return t;
    });
    const { fired, incident } = r.value ?? {};
    if (!fired || !incident) return { channels: [] };
    const id = `${incident.dedup_key}\n${incident.seq}`;
    const channels = this.outcomes.get(id) ?? [];
    this.outcomes.delete(id);
    return { fired, seq: incident.seq, channels };
  }

  /**
   * Delivers one outbox entry once the unit that wrote it committed: every channel's
   * stages, unless a later transition of the incident was handed out already; after its
   * predecessor only (Waiting otherwise: the reconciler hands them out oldest first).
   */
  private async deliver(e: AlertEntry): Promise<void> {
    const handed = (await this.store.get<number>(keys.handed(e.alert.dedup_key))) ?? 0;
    if (handed < e.alert.seq - 1) throw new Waiting(e.alert);
    const channels = handed >= e.alert.seq ? [] : await this.fanOut(e.alert, e.episode);
    if (channels.some((c) => c.outcome === 'error')) {
      throw new Error(`alert ${e.alert.dedup_key} not queued for every channel`);
    }
    await this.store.set(keys.handed(e.alert.dedup_key), e.alert.seq, TTL.incident);
    if (this.outcomes.size > 1000) this.outcomes.clear();
    this.outcomes.set(`${e.alert.dedup_key}\n${e.alert.seq}`, channels);
  }

  /**
   * The channel stages (CHANNEL_STAGES) for every channel, side by side (each has its
   * own gate and lane). `episode`: the incident's opening.
   */
  private async fanOut(a: Alert, episode: number): Promise<NotifyResult['channels']> {
    return Promise.all(
      [...this.entries.values()].map(async (entry): Promise<NotifyResult['channels'][number]> => {
        const ctx: ChannelStep = {
          entry,
          alert: a,
          episode,
          store: this.store,
          enqueue: (channel, x) => this.enqueue(channel, x),
          suppress: (e, x, reason) => this.suppress(e, x, reason),
        };
        for (const stage of CHANNEL_STAGES) {
          const end = await stage.run(ctx);
          if (end) return { name: entry.name, ...end };
        }
        return { name: entry.name, outcome: 'error', reason: 'no stage queued it' };
      }),
    );
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
