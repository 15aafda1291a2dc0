import type { EventEmitter } from 'node:events';
import type { DependencyContainer } from 'tsyringe';
import type { NoProgressKnobs } from '../detectors/no-progress/knobs.ts';
import {
  type NoProgressDetector,
  PLUGIN_LIVE_MS,
  type VerdictTransition,
} from '../detectors/no-progress/no-progress.detector.ts';
import {
  type Decision,
  type Directive,
  emptyTree,
  type Mode,
  type ModeEvent,
  type TreeState,
} from '../modes/contracts.ts';
import { DirectiveQueue } from '../modes/directives.ts';
import type { Clock } from './clock.ts';
import type { Knobs } from './knobs.ts';
import type { Logger } from './logger.ts';
import type { Metrics } from './metrics.ts';
import type { Notifier } from './notifier/notifier.ts';
import type { Registry } from './registry.ts';
import type { Store } from './store/store.ts';
import type { ProgressEvent, RequestRecord, VerdictLevel } from './wire.ts';

/** What the router asks before each model request. */
export interface GateQuery {
  conversation: string;
  agent?: string;
  parent?: string;
  model?: string;
}

export interface GateAnswer {
  action: 'allow' | 'refuse' | 'limit';
  status?: 429;
  retry_after_s?: number;
  reason?: string;
  max_context_tokens?: number;
  /** How the router should enforce a limit: cap (trim or refuse) or overflow (a context-overflow error). */
  limit_mechanism?: 'cap' | 'overflow';
  model_tripped: boolean;
}

/** One row of the Sessions readout. */
export interface SessionRow {
  session: string;
  agent: string | null;
  parent: string | null;
  root: string;
  verdict: VerdictLevel;
  reason: string;
  source: string;
  stage: number;
  refused: boolean;
  turns_since_landed: number;
  usd_since_landed: number;
  top_target: string | null;
  top_count: number;
  context_tokens: number;
  calls: number;
  landed: number;
  models: string[];
  plugin_live: boolean;
  plugin_version: string | null;
  last_event_at: string | null;
}

/** A model breaker plugs in here (detectors/behavior-breaker); the default trips nothing. */
export interface ModelBreaker {
  onRequest(r: RequestRecord): Promise<void>;
  onVerdict(t: VerdictTransition, models: readonly string[]): Promise<void>;
  isTripped(model: string): Promise<boolean>;
}

export const NO_BREAKER: ModelBreaker = {
  onRequest: async () => {},
  onVerdict: async () => {},
  isTripped: async () => false,
};

export interface ExternalVerdictInput {
  session_id: string;
  parent_session_id?: string | null;
  agent?: string;
  level: VerdictLevel;
  reason: string;
  source: string;
  second_opinion?: { model: string; looping: boolean; reason: string };
}

/**
 * The data flow of DESIGN.md: input -> detector judge -> on a change of verdict only:
 * mode decision (tree state, directives) and alert. Also the router gate, which reads
 * the tree state the modes wrote. All state is in the store.
 */
export class Engine {
  readonly directives: DirectiveQueue;
  breaker: ModelBreaker = NO_BREAKER;
  /** Live notifications (Vigil.events): transition, tree, progress, request. */
  events?: EventEmitter;

  constructor(
    private readonly container: DependencyContainer,
    private readonly registry: Registry,
    private readonly knobs: Knobs,
    private readonly store: Store,
    private readonly clock: Clock,
    private readonly logger: Logger,
    readonly detector: NoProgressDetector,
    private readonly notifier: Notifier,
    private readonly metrics: Metrics,
  ) {
    this.directives = new DirectiveQueue(store);
  }

  private progressKnobs(): NoProgressKnobs {
    return this.knobs.get<NoProgressKnobs>('progress');
  }

  /** The configured mode, built from the current knobs (so a PATCH applies at once). */
  mode(): Mode {
    const type = this.progressKnobs().mode;
    const plugin = this.registry.modes.get(type);
    if (!plugin) throw new Error(`mode "${type}" is not registered`);
    const opts = this.knobs.get<Record<string, object>>('modes')[type] ?? {};
    return plugin.create(this.container, opts) as Mode;
  }

  async progress(
    events: readonly ProgressEvent[],
    origin: { plugin_version?: string } = {},
  ): Promise<VerdictTransition[]> {
    const all: VerdictTransition[] = [];
    for (const ev of events) {
      this.metrics.event(ev.kind);
      const t0 = performance.now();
      const changes = await this.detector.ingest({ type: 'progress', event: ev }, origin);
      this.metrics.judged(t0);
      if (ev.kind === 'compaction_done') {
        const root = await this.detector.rootOf(ev.session_id);
        await this.modeEvent(root, { type: 'compaction_done', session_id: ev.session_id, root_id: root });
      }
      for (const c of changes) await this.onTransition(c);
      if (changes.length) all.push(...changes);
    }
    this.events?.emit('progress', { sessions: [...new Set(events.map((e) => e.session_id))] });
    return all;
  }

  async requests(records: readonly RequestRecord[]): Promise<VerdictTransition[]> {
    const all: VerdictTransition[] = [];
    for (const r of records) {
      this.metrics.requests.inc();
      const t0 = performance.now();
      const changes = await this.detector.ingest({ type: 'request', record: r });
      this.metrics.judged(t0);
      await this.breaker
        .onRequest(r)
        .catch((err) => this.logger.warn({ err: (err as Error).message }, 'breaker failed'));
      this.events?.emit('request', { session: r.session_id, model: r.model, prompt_tokens: r.prompt_tokens });
      for (const c of changes) await this.onTransition(c);
      all.push(...changes);
    }
    return all;
  }

  async verdicts(list: readonly ExternalVerdictInput[]): Promise<VerdictTransition[]> {
    const all: VerdictTransition[] = [];
    for (const v of list) {
      const changes = await this.detector.external(v);
      for (const c of changes) await this.onTransition(c);
      all.push(...changes);
    }
    return all;
  }

  /** A verdict changed: the mode decides, the notifier alerts, the breaker counts. */
  private async onTransition(c: VerdictTransition): Promise<void> {
    this.metrics.verdicts.inc({ to: c.to, source: c.source });
    const root = await this.detector.rootOf(c.session_id);
    const state = await this.detector.state(c.session_id);
    const meta = await this.detector.meta(c.session_id);
    const report = (await this.detector.report(c.session_id)) ?? c.verdict.reason;
    this.logger.info(
      { session: c.session_id, root, from: c.from, to: c.to, source: c.source, rule: c.verdict.rule },
      `verdict ${c.from} -> ${c.to}`,
    );
    await this.modeEvent(root, {
      type: 'verdict',
      session_id: c.session_id,
      root_id: root,
      agent: state?.agent ?? meta?.agent,
      from: c.from,
      to: c.to,
      reason: c.verdict.reason,
      report,
      source: c.source,
    });
    const models = meta?.models ?? [];
    await this.breaker
      .onVerdict(c, models)
      .catch((err) => this.logger.warn({ err: (err as Error).message }, 'breaker failed'));
    this.events?.emit('transition', { session: c.session_id, from: c.from, to: c.to, source: c.source, root });
  }

  /** Runs the mode's pure decision compare-and-set on the tree, then queues its directives and alerts. */
  async modeEvent(root: string, ev: ModeEvent): Promise<Decision> {
    const mode = this.mode();
    const now = this.clock.now();
    const d = await this.store.update<TreeState, Decision>(`tree:${root}`, (cur) => {
      const r = mode.decide(cur ?? emptyTree(root, now), ev, now);
      return { value: r.tree, result: r, ttlMs: 30 * 86_400_000 };
    });
    this.events?.emit('tree', {
      root,
      stage: d.tree.stage,
      refused: Boolean(d.tree.refuse_all) || Object.keys(d.tree.refused).length > 0,
    });
    await this.directives.push(root, d.directives, now);
    for (const a of d.alerts) {
      const r = await this.notifier.notify(a).catch((err) => {
        this.logger.error({ err: (err as Error).message, dedup_key: a.dedup_key }, 'alert failed');
        return undefined;
      });
      for (const ch of r?.channels ?? []) this.metrics.alerts.inc({ channel: ch.name, outcome: ch.outcome });
    }
    return d;
  }

  async sessionRow(id: string): Promise<SessionRow | undefined> {
    const s = await this.detector.state(id);
    if (!s) return undefined;
    const [eff, root, meta] = await Promise.all([
      this.detector.effective(id),
      this.detector.rootOf(id),
      this.detector.meta(id),
    ]);
    const tree = await this.tree(root);
    const g = eff.verdict.signals;
    return {
      session: id,
      agent: s.agent ?? meta?.agent ?? null,
      parent: (await this.detector.parentOf(id)) ?? null,
      root,
      verdict: eff.level,
      reason: eff.verdict.reason,
      source: eff.source,
      stage: tree?.stage ?? 0,
      refused: Boolean(tree?.refuse_all || tree?.refused[id]),
      turns_since_landed: g.turns_since_landed,
      usd_since_landed: g.usd_since_landed,
      top_target: g.top_target,
      top_count: g.top_count,
      context_tokens: g.context_tokens,
      calls: g.calls,
      landed: g.landed,
      models: meta?.models ?? [],
      plugin_live: meta?.plugin_seen_at !== undefined && this.clock.now() - meta.plugin_seen_at < PLUGIN_LIVE_MS,
      plugin_version: meta?.plugin_version ?? null,
      last_event_at: s.lastTs ? new Date(s.lastTs).toISOString() : null,
    };
  }

  /** Every tracked session, most recent activity first. */
  async sessionRows(limit = 1000): Promise<SessionRow[]> {
    const rows: SessionRow[] = [];
    for (const id of await this.detector.ids()) {
      const r = await this.sessionRow(id);
      if (r) rows.push(r);
    }
    return rows.sort((a, b) => (b.last_event_at ?? '').localeCompare(a.last_event_at ?? '')).slice(0, limit);
  }

  async tree(root: string): Promise<TreeState | undefined> {
    return this.store.get<TreeState>(`tree:${root}`);
  }

  async resume(root: string, by: string): Promise<TreeState> {
    return (await this.modeEvent(root, { type: 'resume', root_id: root, by })).tree;
  }

  /** Pending directives for a session's tree. */
  async pendingFor(session: string): Promise<Directive[]> {
    return this.directives.pending(await this.detector.rootOf(session));
  }

  /** The plugin acknowledges directives (by id, with the root they belong to). */
  async ack(acks: readonly { id: string; root_id: string }[]): Promise<number> {
    const byRoot = new Map<string, string[]>();
    for (const a of acks) byRoot.set(a.root_id, [...(byRoot.get(a.root_id) ?? []), a.id]);
    let n = 0;
    for (const [root, ids] of byRoot) {
      const done = await this.directives.ack(root, ids);
      n += done.length;
      for (const d of done) {
        if (d.type === 'abort') {
          await this.modeEvent(root, { type: 'acked', directive: 'abort', session_id: d.session_id, root_id: root });
        }
      }
    }
    return n;
  }

  /** The router gate: allow, refuse with a scoped 429, or limit the context. */
  async check(q: GateQuery): Promise<GateAnswer> {
    if (q.parent) await this.detector.link(q.conversation, q.parent);
    const [root, tripped] = await Promise.all([
      this.detector.rootOf(q.conversation),
      q.model ? this.breaker.isTripped(q.model) : Promise.resolve(false),
    ]);
    let tree = await this.tree(root);
    const now = this.clock.now();
    const opts = this.knobs.get<Record<string, Record<string, number>>>('modes').auto_recover ?? {};
    // A recovery whose compaction was never reported: let the mode time it out.
    if (tree?.awaiting_compaction && now - tree.awaiting_compaction.since >= (opts.compaction_timeout ?? 900_000)) {
      tree = (await this.modeEvent(root, { type: 'tick', root_id: root })).tree;
    }
    let answer: GateAnswer = { action: 'allow', model_tripped: tripped };
    if (tree?.refuse_all) {
      answer = {
        action: 'refuse',
        status: 429,
        retry_after_s: Math.ceil((opts.hard_stop_retry_after ?? 3_600_000) / 1000),
        reason: tree.refuse_all.reason,
        model_tripped: tripped,
      };
    } else if (tree?.refused[q.conversation]) {
      answer = {
        action: 'refuse',
        status: 429,
        retry_after_s: Math.ceil((opts.retry_after ?? 30_000) / 1000),
        reason: tree.refused[q.conversation].reason,
        model_tripped: tripped,
      };
    } else if (tree) {
      const lim = [tree.limits[q.conversation], tree.limits['*']].find(
        (l) => l && (l.until === undefined || l.until > now),
      );
      if (lim) {
        answer = {
          action: 'limit',
          max_context_tokens: lim.max_context_tokens,
          limit_mechanism: lim.mechanism,
          reason: 'context capped after a loop',
          model_tripped: tripped,
        };
      }
    }
    this.metrics.gate.inc({ action: answer.action });
    return answer;
  }
}
