import { AsyncLocalStorage } from 'node:async_hooks';
import type { EventEmitter } from 'node:events';
import type { Severity } from './alert.ts';
import type { VigilEventMap, VigilEventName } from './bus.ts';
import type { Clock } from './clock.ts';
import {
  type Decision,
  type Detector,
  emptyTree,
  type GateVote,
  type Mode,
  type ModeEvent,
  type Origin,
  type SessionInfo,
  type SessionReadout,
  type Transition,
  type TreeState,
} from './contracts.ts';
import { DirectiveQueue } from './directives.ts';
import { AppError } from './errors.ts';
import type { Logger } from './logger.ts';
import { Lru } from './lru.ts';
import type { Metrics } from './metrics.ts';
import type { Notifier } from './notifier/notifier.ts';
import { gapLine, gapsOf, type SensorDescriptor, sensorNameOf } from './sensor.ts';
import { keys, TTL } from './store/keys.ts';
import type { Store } from './store/store.ts';
import type { SessionTree } from './tree.ts';
import type {
  Directive,
  ExternalVerdict,
  GateAnswer,
  GateQuery,
  ProgressEvent,
  RequestRecord,
  VerdictLevel,
} from './wire.ts';

/** One row of the Sessions readout: the tree's facts, the mode's state, each detector's verdict. */
export interface SessionRow {
  session: string;
  agent: string | null;
  parent: string | null;
  root: string;
  /** The worst level any detector gives the session, with that detector's reason. */
  verdict: VerdictLevel;
  reason: string;
  source: string;
  stage: number;
  /** The gate refuses it (a scoped refusal or the tree's hard stop). */
  refused: boolean;
  /**
   * No sensor reported on any session of its tree for `detection.stale_after` (an
   * opencode server long gone): readouts show it as stale rather than refused or live.
   */
  stale: boolean;
  models: string[];
  plugin_live: boolean;
  plugin_version: string | null;
  /** The sensor that reports it (from its plugin header), when it declared itself. */
  sensor?: string | null;
  /**
   * The actions the configured mode asks that this sensor does not take itself, and how
   * they are done instead (`compact via inject; toast none`); empty when all are native.
   */
  cannot_act?: string;
  last_event_at: string | null;
  /** Every detector's verdict on the session. */
  detectors: Record<string, { level: VerdictLevel; reason: string; source: string }>;
  /** Sparkline series, oldest first. */
  series: Record<string, readonly number[]>;
  /** The columns detectors add (turns_since_landed, top_target, ...). */
  [field: string]: unknown;
}

/** A detector as the engine drives it: switched on and off by its section's `enabled` knob. */
export interface Driven {
  detector: Detector;
  enabled: () => boolean;
}

export const RANK: Record<VerdictLevel, number> = { ok: 0, stalling: 1, looping: 2 };
/** Shared empty result: most inputs change nothing, so nothing is allocated for them. */
const NONE: readonly Transition[] = Object.freeze([]);
/** Transitions caused by transitions (a stall tripping a breaker) stop after this many per input. */
const MAX_CASCADE = 1_000;

const isPromise = <T>(v: T | Promise<T>): v is Promise<T> => typeof (v as { then?: unknown })?.then === 'function';
/** Inputs remembered per process, so a client's retry of a batch is not judged twice. */
const SEEN_INPUTS = 200_000;
/** Consequences waiting for the store to come back, at most (the oldest give way, logged). */
type Judged = readonly Transition[] | Promise<readonly Transition[]>;

/**
 * Every enabled detector judges the input, concurrently: each reads and writes only its
 * own state, so on Redis their round trips overlap instead of adding up. The
 * transitions come back in detector order; the first failure is thrown once all have
 * settled (none is left running behind the caller). Synchronous all the way when every
 * detector answers at once (the memory backend).
 */
function collect(xs: readonly { enabled(): boolean; detector: Detector }[], judge: (d: Detector) => Judged): Judged {
  let out: readonly Transition[] = NONE;
  let waits: Judged[] | undefined;
  for (const x of xs) {
    if (!x.enabled()) continue;
    const r = judge(x.detector);
    if (waits) waits.push(r);
    else if (isPromise(r)) waits = [r];
    else if (r.length) out = out === NONE ? [...r] : [...out, ...r];
  }
  if (!waits) return out;
  return Promise.allSettled(waits).then((rs) => {
    let all = out;
    for (const r of rs) {
      if (r.status === 'rejected') throw r.reason;
      if (r.value.length) all = all === NONE ? [...r.value] : [...all, ...r.value];
    }
    return all;
  });
}

/** A consequence kept while the store was away, to run again on the tick. */
interface Pending {
  what: string;
  run: () => Promise<void>;
}

const MAX_PENDING = 10_000;

/**
 * The data flow: input -> every enabled detector -> on a CHANGE of verdict only: the
 * mode decides (tree state, directives, alerts) for a session; the kernel alerts for
 * any other subject; every other detector sees the transition. Also the router gate,
 * which asks the mode and each detector. All state is in the store. The engine names
 * no detector, mode or channel.
 */
export class Engine {
  readonly directives: DirectiveQueue;
  /** Recent input ids (call_id, request_id): a retried batch is not judged twice by this process. */
  private readonly seen = new Lru<string, true>(SEEN_INPUTS);
  /**
   * Consequences whose store write failed after the verdict was already decided (the
   * store went away mid-request): retried in order on the tick, so the transition is
   * not lost when the client's retry finds no change left to make.
   */
  private readonly pending: Pending[] = [];
  /**
   * Set while retryPending() runs the head of the backlog: inside it the backlog does
   * not block (that item is the one waited for), and what it keeps for later replaces it.
   */
  private readonly replaying = new AsyncLocalStorage<Pending[]>();
  /** Sessions whose input failed part way (a store error): compared with the mode's record on the tick. */
  private readonly suspects = new Set<string>();
  /** The replay of the backlog running now, if one is. */
  private draining: Promise<number> | undefined;
  /** Sessions with an input being judged now, and how many. */
  private readonly inFlight = new Map<string, number>();
  /** Trees whose decided effects a store failure left in their outbox. */
  private readonly unsettledTrees = new Set<string>();
  /** Trees this process wrote whose mode said when time alone changes them (root -> epoch ms). */
  private readonly dueAt = new Map<string, number>();
  private readonly on: {
    progress: Driven[];
    request: Driven[];
    verdict: Driven[];
    transition: Driven[];
    tree: Driven[];
    tick: Driven[];
    gate: Driven[];
  };

  constructor(
    private readonly driven: readonly Driven[],
    /** The configured mode, built from the live knobs. */
    readonly mode: () => Mode,
    readonly tree: SessionTree,
    private readonly store: Store,
    private readonly clock: Clock,
    private readonly logger: Logger,
    private readonly notifier: Notifier,
    private readonly metrics: Metrics,
    private readonly events: EventEmitter,
    /** detection.stale_after: a tree this long without sensor input reads as stale. */
    private readonly staleAfterMs = 30 * 60_000,
    /** What each sensor can carry out (core/sensor.ts), by name. */
    readonly sensors: ReadonlyMap<string, SensorDescriptor> = new Map(),
  ) {
    this.directives = new DirectiveQueue(store);
    const having = (m: keyof Detector) => driven.filter((x) => typeof x.detector[m] === 'function');
    this.on = {
      progress: having('onProgress'),
      request: having('onRequest'),
      verdict: having('onVerdict'),
      transition: having('onTransition'),
      tree: having('onTree'),
      tick: having('onTick'),
      gate: having('gate'),
    };
  }

  detectors(): Detector[] {
    return this.driven.map((x) => x.detector);
  }

  async progress(events: readonly ProgressEvent[], origin: Origin = {}): Promise<readonly Transition[]> {
    return this.suspecting(events, () => this.progressIn(events, origin));
  }

  /**
   * Runs an input; if it fails part way its sessions are compared with the mode's
   * record on the tick (reconcileSuspects): a change decided before the failure is not lost.
   */
  private async suspecting<T>(inputs: readonly { session_id: string }[], run: () => Promise<T>): Promise<T> {
    // Consequences still wait for the store: nothing new is judged before them (a judge
    // would write its state, and its transitions would wait behind them anyway).
    if (this.pending.length) {
      await this.retryPending();
      if (this.pending.length) {
        throw new AppError('STORE_UNAVAILABLE', 'earlier consequences are still waiting for the store', {
          retryable: true,
        });
      }
    }
    for (const i of inputs) this.inFlight.set(i.session_id, (this.inFlight.get(i.session_id) ?? 0) + 1);
    try {
      // A session whose last input failed part way first gets what that input decided.
      if (this.suspects.size) {
        for (const i of inputs) if (this.suspects.has(i.session_id)) await this.reconcileOne(i.session_id);
      }
      return await run();
    } catch (err) {
      for (const i of inputs) this.suspects.add(i.session_id);
      throw err;
    } finally {
      for (const i of inputs) {
        const n = (this.inFlight.get(i.session_id) ?? 1) - 1;
        if (n > 0) this.inFlight.set(i.session_id, n);
        else this.inFlight.delete(i.session_id);
      }
    }
  }

  private async progressIn(events: readonly ProgressEvent[], origin: Origin): Promise<readonly Transition[]> {
    let all = NONE;
    for (const ev of events) {
      if (this.seenBefore(ev.session_id, ev.call_id)) continue;
      this.metrics.event(ev.kind);
      const t0 = performance.now();
      let s = this.tree.enter({
        id: ev.session_id,
        parent: ev.parent_session_id,
        agent: ev.agent,
        ts: ev.ts,
        origin,
      });
      if (isPromise(s)) s = await s;
      const si = s;
      let out = collect(this.on.progress, (d) => d.onProgress!(ev, si, origin));
      if (isPromise(out)) out = await out;
      this.metrics.judged(t0);
      // Judged and written: a retry of it from here on is a repeat (its consequences, if they failed, are kept).
      this.remember(ev.session_id, ev.call_id);
      if (ev.kind === 'compaction_done') {
        await this.modeEvent(s.root, { type: 'compaction_done', session_id: ev.session_id, root_id: s.root });
      }
      if (out.length) all = [...all, ...(await this.handle(out))];
    }
    if (this.events.listenerCount('progress')) {
      this.emit('progress', { sessions: [...new Set(events.map((e) => e.session_id))] });
    }
    return all;
  }

  private emit<K extends VigilEventName>(name: K, payload: VigilEventMap[K]): void {
    this.events.emit(name, payload);
  }

  /**
   * Whether this input was judged already (a client retrying after an error it got
   * late). Inputs without an id are always judged. The id is remembered only here, in
   * this process: a retry to another instance is judged again.
   */
  private seenBefore(session: string, id: string | undefined): boolean {
    return id !== undefined && this.seen.peek(`${session}\n${id}`) === true;
  }

  private remember(session: string, id: string | undefined): void {
    if (id !== undefined) this.seen.set(`${session}\n${id}`, true);
  }

  /**
   * Runs a consequence; if the store fails it is kept to run again on the tick (in
   * order) and the error goes on to the caller, whose client retries.
   */
  private async effect(what: string, run: () => Promise<void>): Promise<void> {
    try {
      if (this.blocked()) throw new Error('earlier consequences are still waiting for the store');
      await run();
    } catch (err) {
      this.keep({ what, run });
      throw err;
    }
  }

  /** Whether earlier consequences wait for the store (this call is not one of them). */
  private blocked(): boolean {
    return this.pending.length > 0 && !this.replaying.getStore();
  }

  /** Keeps a consequence for the tick; during a replay it becomes that item's continuation. */
  private keep(p: Pending): void {
    const replay = this.replaying.getStore();
    if (replay) {
      replay.push(p);
      return;
    }
    this.pending.push(p);
    if (this.pending.length > MAX_PENDING) {
      const lost = this.pending.shift();
      this.logger.error({ what: lost?.what }, 'pending consequence dropped: the store has been away too long');
    }
  }

  /**
   * The consequences kept while the store was away, run again in order; stops at the
   * first that fails. One replay at a time: a caller that finds one running waits for it.
   */
  retryPending(): Promise<number> {
    if (!this.draining) {
      this.draining = this.replayPending().finally(() => {
        this.draining = undefined;
      });
    }
    return this.draining;
  }

  private async replayPending(): Promise<number> {
    let n = 0;
    while (this.pending.length) {
      const p = this.pending[0];
      const rest: Pending[] = [];
      try {
        await this.replaying.run(rest, () => p.run());
      } catch (err) {
        // What it kept (the step that failed) replaces it; otherwise it runs again whole.
        this.pending.splice(0, 1, ...(rest.length ? rest : [p]));
        this.logger.warn(
          { err: (err as Error).message, waiting: this.pending.length },
          'pending consequences still waiting',
        );
        return n;
      }
      this.pending.splice(0, 1, ...rest);
      n++;
    }
    if (n) this.logger.warn({ applied: n }, 'pending consequences applied after the store came back');
    return n;
  }

  async requests(records: readonly RequestRecord[]): Promise<readonly Transition[]> {
    return this.suspecting(records, () => this.requestsIn(records));
  }

  private async requestsIn(records: readonly RequestRecord[]): Promise<readonly Transition[]> {
    let all = NONE;
    for (const r of records) {
      // (a request record keeps ids of its own: a history reader derives both a request
      // record and a model-step event from one assistant message, under its one id)
      if (this.seenBefore(r.session_id, `request\n${r.request_id}`)) continue;
      this.metrics.requests.inc();
      const t0 = performance.now();
      let s = this.tree.enter({
        id: r.session_id,
        parent: r.parent_session_id,
        agent: r.agent,
        model: r.model,
        ts: r.ts,
      });
      if (isPromise(s)) s = await s;
      const si = s;
      let out = collect(this.on.request, (d) => d.onRequest!(r, si));
      if (isPromise(out)) out = await out;
      this.metrics.judged(t0);
      this.remember(r.session_id, `request\n${r.request_id}`);
      if (this.events.listenerCount('request')) {
        this.emit('request', { session: r.session_id, model: r.model, prompt_tokens: r.prompt_tokens });
      }
      if (out.length) all = [...all, ...(await this.handle(out))];
    }
    return all;
  }

  /** Verdicts from outside sensors (the watchdog): every detector that listens judges them. */
  async verdicts(list: readonly ExternalVerdict[]): Promise<readonly Transition[]> {
    return this.suspecting(list, () => this.verdictsIn(list));
  }

  private async verdictsIn(list: readonly ExternalVerdict[]): Promise<readonly Transition[]> {
    let all = NONE;
    for (const v of list) {
      const s = await this.tree.enter({ id: v.session_id, parent: v.parent_session_id, agent: v.agent });
      const out = await collect(this.on.verdict, (d) => d.onVerdict!(v, s));
      if (out.length) all = [...all, ...(await this.handle(out))];
    }
    return all;
  }

  /** Time passed: detectors that keep time (restore stalls, the breaker's pending evidence) judge now. */
  async tick(now = this.clock.now()): Promise<readonly Transition[]> {
    await this.retryPending();
    // Only against a tree that holds every consequence already decided: with some still
    // waiting, the record would look behind and the comparison would decide them again.
    if (!this.pending.length) {
      await this.reconcileSuspects().catch((err) =>
        this.logger.warn({ err: (err as Error).message }, 'reconciling sessions failed'),
      );
    }
    await this.settleTrees().catch((err) => this.logger.warn({ err: (err as Error).message }, 'settling trees failed'));
    // Trees whose time has come (a compaction timeout, the end of an episode), without waiting for a gate check.
    for (const [root, at] of [...this.dueAt]) {
      if (at > now) continue;
      this.dueAt.delete(root);
      await this.modeEvent(root, { type: 'tick', root_id: root }).catch((err) =>
        this.logger.warn({ err: (err as Error).message, root }, 'mode tick failed'),
      );
    }
    let out = NONE;
    for (const x of this.on.tick) {
      if (!x.enabled()) continue;
      try {
        const t = await x.detector.onTick!(now);
        if (t.length) out = [...out, ...t];
      } catch (err) {
        this.logger.warn({ err: (err as Error).message, detector: x.detector.type }, 'detector tick failed');
      }
    }
    return out.length ? this.handle(out) : NONE;
  }

  /**
   * Applies transitions: the mode or the notifier acts on each, then every other
   * detector sees it (and may answer with transitions of its own, handled in turn).
   * Detectors call this through TOKENS.Emit for transitions outside an input.
   */
  async handle(ts: readonly Transition[]): Promise<Transition[]> {
    const queue = [...ts];
    for (let i = 0; i < queue.length && i < MAX_CASCADE; i++) {
      const t = queue[i];
      await this.apply(t);
      for (const x of this.on.transition) {
        if (x.detector.type === t.detector || !x.enabled()) continue;
        try {
          const r = await x.detector.onTransition!(t);
          if (r.length) queue.push(...r);
        } catch (err) {
          this.logger.warn(
            { err: (err as Error).message, detector: x.detector.type },
            'detector failed on a transition',
          );
        }
      }
    }
    return queue;
  }

  private async apply(t: Transition): Promise<void> {
    if (this.blocked()) {
      // Keep the order of consequences: this one waits behind the earlier ones.
      this.keep({ what: `transition of ${t.subject.id}`, run: () => this.apply(t) });
      throw new AppError('STORE_UNAVAILABLE', 'earlier consequences are still waiting for the store', {
        retryable: true,
      });
    }
    this.metrics.verdicts.inc({ to: t.to, source: t.source });
    this.logger.info(
      { subject: t.subject, from: t.from, to: t.to, detector: t.detector, source: t.source, rule: t.rule },
      `verdict ${t.from} -> ${t.to}`,
    );
    if (t.subject.kind === 'session') {
      const id = t.subject.id;
      let root: string;
      let meta: Awaited<ReturnType<SessionTree['meta']>>;
      try {
        root = await this.tree.rootOf(id);
        meta = await this.tree.meta(id);
      } catch (err) {
        this.keep({ what: `transition of ${id}`, run: () => this.apply(t) });
        throw err;
      }
      const handled = this.modeEvent(root, {
        type: 'verdict',
        session_id: id,
        root_id: root,
        agent: meta?.agent,
        detector: t.detector,
        from: t.from,
        to: t.to,
        rule: t.rule,
        reason: t.reason,
        report: t.report ?? t.reason,
        source: t.source,
        dedup_key: t.dedup_key ?? `${t.detector}:${root}`,
        act: t.act ?? t.to === 'looping',
        ...(t.severity ? { severity: t.severity } : {}),
        ...(t.title ? { title: t.title } : {}),
      });
      await handled;
      const extra = t.directives;
      if (extra?.length)
        await this.effect(`directives of ${id}`, () =>
          this.directives.push(root, extra, this.clock.now()).then(() => {}),
        );
      this.emit('transition', { session: id, detector: t.detector, from: t.from, to: t.to, source: t.source, root });
      return;
    }
    // Not a session: the detector's own incident, raised or resolved as it says.
    const severity: Severity = t.severity ?? (t.to === 'looping' ? 'critical' : 'warning');
    await this.alertOrKeep({
      dedup_key: t.dedup_key ?? `${t.detector}:${t.subject.id}`,
      severity,
      state: t.to === 'ok' ? 'resolve' : 'trigger',
      title: (t.title ?? `${t.detector}: ${t.subject.id}`).slice(0, 200),
      summary: t.reason.slice(0, 1024),
      details: (t.report ?? '').slice(0, 16_384),
      source: t.source.slice(0, 64),
    });
  }

  /** Raises or resolves an incident; a store failure keeps it for the tick (and fails the request). */
  private async alertOrKeep(a: Parameters<Notifier['notify']>[0]): Promise<void> {
    await this.effect(`alert ${a.dedup_key}`, () => this.notifyCounted(a));
  }

  private async notifyCounted(a: Parameters<Notifier['notify']>[0]): Promise<void> {
    const r = await this.notifier.notify(a);
    for (const ch of r.channels) this.metrics.alerts.inc({ channel: ch.name, outcome: ch.outcome });
  }

  /** Runs the mode's pure decision compare-and-set on the tree, then queues its directives and alerts. */
  async modeEvent(root: string, ev: ModeEvent): Promise<Decision> {
    const mode = this.mode();
    const now = this.clock.now();
    // The decision and its effects are written in one compare-and-set (the tree's
    // outbox); the effects run after, and are cleared once done. A store failure in
    // between leaves them in the outbox, for settleTrees() on the tick.
    const id = `e${now.toString(36)}${Math.random().toString(36).slice(2, 8)}`;
    let d: Decision;
    try {
      d = await this.store.update<TreeState, Decision>(keys.tree(root), (cur) => {
        const r = mode.decide(cur ?? emptyTree(root, now), ev, now);
        const effects =
          r.directives.length || r.alerts.length ? [{ id, directives: r.directives, alerts: r.alerts }] : [];
        const tree: TreeState = { ...r.tree, effects: [...(cur?.effects ?? []), ...effects].slice(-50) };
        if (!tree.effects?.length) delete tree.effects;
        // What each detector last told the mode, for reconcileSuspects() after a lost reply.
        if (ev.type === 'verdict') {
          const rep = reportedWith(cur?.reported, ev.detector, ev.session_id, ev.to);
          if (rep) tree.reported = rep;
          else delete tree.reported;
        }
        return { value: tree, result: { ...r, tree }, ttlMs: TTL.tree };
      });
    } catch (err) {
      // The write's outcome is unknown: decide again only if it did not happen.
      this.keep({
        what: `${ev.type} of ${root}`,
        run: async () => {
          const t = await this.treeState(root);
          if (t?.effects?.some((e) => e.id === id)) await this.settleTree(root);
          else await this.modeEvent(root, ev);
        },
      });
      throw err;
    }
    if (d.tree.effects?.length) {
      try {
        await this.settleTree(root, d.tree);
      } catch (err) {
        this.unsettledTrees.add(root);
        throw err;
      }
    }
    const due = mode.nextDue?.(d.tree);
    if (due === undefined) this.dueAt.delete(root);
    else this.dueAt.set(root, due);
    this.emit('tree', {
      root,
      stage: d.tree.stage,
      refused: Boolean(d.tree.refuse_all) || Object.keys(d.tree.refused).length > 0,
    });
    // Detectors that judge afresh after a recovery or a Resume learn of the decision.
    for (const x of this.on.tree) {
      if (!x.enabled()) continue;
      const ts = await x.detector.onTree!(ev, d.tree);
      if (ts.length) await this.handle(ts);
    }
    return d;
  }

  /**
   * Sessions whose input failed part way: a write may have happened with its reply
   * lost, so a detector can hold a level the mode never heard of. What each detector
   * says now is compared with the tree's record of what it reported; a difference is
   * handled as the transition it is. Stops at the first store failure (kept for later).
   */
  async reconcileSuspects(): Promise<number> {
    let n = 0;
    for (const id of [...this.suspects]) {
      // An input of this session is being judged: it reconciles the session itself.
      if (this.inFlight.has(id)) continue;
      n += await this.reconcileOne(id);
    }
    return n;
  }

  /** One suspect: each detector's level against the tree's record; a difference is handled. */
  private async reconcileOne(id: string): Promise<number> {
    // Taken first, so two callers do not both hand the mode the same change.
    if (!this.suspects.delete(id)) return 0;
    let n = 0;
    try {
      const root = await this.tree.rootOf(id);
      const tree = await this.treeState(root);
      for (const x of this.driven) {
        if (!x.detector.session || !x.enabled()) continue;
        const r = await x.detector.session(id);
        if (!r) continue;
        const was = tree?.reported?.[x.detector.type]?.[id] ?? 'ok';
        if (r.level === was) continue;
        n++;
        const report = await x.detector.report?.(id);
        await this.handle([
          {
            detector: x.detector.type,
            subject: { kind: 'session', id },
            from: was,
            to: r.level,
            rule: null,
            reason: r.reason,
            source: r.source,
            ...(r.dedup_key ? { dedup_key: r.dedup_key } : {}),
            ...(report ? { report } : {}),
          },
        ]);
      }
    } catch (err) {
      this.suspects.add(id);
      throw err;
    }
    if (n)
      this.logger.warn({ session: id, transitions: n }, 'reconciled verdict changes a store failure had cut short');
    return n;
  }

  /**
   * Runs a tree's outstanding effects in order (directives, then alerts; both are safe
   * to run twice: directives are deduplicated, an alert that is no transition sends
   * nothing) and clears each once done.
   */
  private async settleTree(root: string, known?: TreeState): Promise<void> {
    const tree = known ?? (await this.treeState(root));
    for (const e of tree?.effects ?? []) {
      await this.directives.push(root, e.directives, this.clock.now());
      for (const a of e.alerts) await this.notifyCounted(a);
      await this.store.update<TreeState, void>(keys.tree(root), (cur) => {
        if (!cur) return { value: cur, result: undefined };
        const effects = (cur.effects ?? []).filter((x) => x.id !== e.id);
        const next: TreeState = { ...cur, effects };
        if (!effects.length) delete next.effects;
        return { value: next, result: undefined, ttlMs: TTL.tree };
      });
    }
    this.unsettledTrees.delete(root);
  }

  /**
   * Trees whose effects a store failure left in their outbox, run again: the ones this
   * process saw fail, or (at start, `full`) every tree in the store.
   */
  async settleTrees(full = false): Promise<number> {
    const roots = full
      ? (await this.store.keys(keys.treePrefix)).map((k) => k.slice(keys.treePrefix.length))
      : [...this.unsettledTrees];
    let n = 0;
    for (const root of roots) {
      const t = await this.treeState(root);
      if (!t?.effects?.length) {
        this.unsettledTrees.delete(root);
        continue;
      }
      await this.settleTree(root, t);
      n++;
    }
    if (n) this.logger.warn({ trees: n }, 'settled decisions whose effects a store failure had cut short');
    return n;
  }

  async treeState(root: string): Promise<TreeState | undefined> {
    return this.store.get<TreeState>(keys.tree(root));
  }

  async resume(root: string, by: string): Promise<TreeState> {
    return (await this.modeEvent(root, { type: 'resume', root_id: root, by })).tree;
  }

  /** Pending directives for a session's tree. */
  async pendingFor(session: string): Promise<Directive[]> {
    return this.directives.pending(await this.tree.rootOf(session));
  }

  /**
   * The plugin acknowledges directives (by id, with the root they belong to and the
   * session they were issued for). An ack naming another session than the directive's
   * is refused (AppError) and that tree's acks are not applied.
   */
  async ack(acks: readonly { id: string; root_id: string; session_id: string }[]): Promise<number> {
    const byRoot = new Map<string, { id: string; session_id: string }[]>();
    for (const a of acks) byRoot.set(a.root_id, [...(byRoot.get(a.root_id) ?? []), a]);
    let n = 0;
    for (const [root, list] of byRoot) {
      const { done, refused } = await this.directives.ack(root, list);
      if (refused.length) {
        throw new AppError('FORBIDDEN', `acks[]: directive ${refused.join(', ')} was not issued for the session named`);
      }
      n += done.length;
      for (const d of done) {
        if (d.type === 'abort') {
          await this.modeEvent(root, { type: 'acked', directive: 'abort', session_id: d.session_id, root_id: root });
        }
      }
    }
    return n;
  }

  /** The router gate: the mode and every detector vote; the strictest vote wins. */
  async check(q: GateQuery): Promise<GateAnswer> {
    let s: SessionInfo | Promise<SessionInfo> = this.tree.enter({
      id: q.conversation,
      parent: q.parent,
      agent: q.agent,
    });
    if (isPromise(s)) s = await s;
    const now = this.clock.now();
    const mode = this.mode();
    let tree = await this.treeState(s.root);
    const due = tree && mode.nextDue?.(tree);
    if (tree && due !== undefined && due <= now) {
      tree = (await this.modeEvent(s.root, { type: 'tick', root_id: s.root })).tree;
    }
    const votes: GateVote[] = [];
    const mv = tree ? mode.gate(tree, q.conversation, now) : undefined;
    if (mv) votes.push(mv);
    for (const x of this.on.gate) {
      if (!x.enabled()) continue;
      const v = await x.detector.gate!({ query: q, session: s, mode: mode.type, acting: mode.acts, now });
      if (v) votes.push(v);
    }
    const answer = combine(votes);
    this.metrics.gate.inc({ action: answer.action });
    return answer;
  }

  /** One session's row of the Sessions readout. */
  async sessionRow(id: string): Promise<SessionRow | undefined> {
    const [meta, info] = await Promise.all([this.tree.meta(id), this.tree.info(id)]);
    const readouts: [string, SessionReadout][] = [];
    for (const x of this.driven) {
      if (!x.detector.session) continue;
      const r = await x.detector.session(id);
      if (r) readouts.push([x.detector.type, r]);
    }
    if (!meta && readouts.length === 0) return undefined;
    const tree = await this.treeState(info.root);
    let worst: SessionReadout | undefined;
    for (const [, r] of readouts) if (!worst || RANK[r.level] > RANK[worst.level]) worst = r;
    const row: SessionRow = {
      session: id,
      agent: meta?.agent ?? null,
      parent: info.parent ?? null,
      root: info.root,
      verdict: worst?.level ?? 'ok',
      reason: worst?.reason ?? '',
      source: worst?.source ?? '',
      stage: tree?.stage ?? 0,
      refused: Boolean(tree?.refuse_all || tree?.refused[id]),
      stale: false,
      models: meta?.models ?? [],
      plugin_live: this.tree.pluginLive(meta),
      plugin_version: meta?.plugin_version ?? null,
      ...this.sensorFields(meta?.plugin_version),
      last_event_at: null,
      detectors: {},
      series: {},
    };
    let last = meta?.last_seen ?? 0;
    for (const [type, r] of readouts) {
      row.detectors[type] = { level: r.level, reason: r.reason, source: r.source };
      for (const [k, v] of Object.entries(r.fields ?? {})) if (!(k in row)) row[k] = v;
      Object.assign(row.series, r.series);
      if ((r.last_event_at ?? 0) > last) last = r.last_event_at ?? 0;
    }
    row.last_event_at = last ? new Date(last).toISOString() : null;
    return this.withStaleness([row])[0];
  }

  /** The session's sensor and the actions the mode asks that it cannot take itself. */
  private sensorFields(pluginVersion: string | undefined): { sensor: string | null; cannot_act: string } {
    const name = sensorNameOf(pluginVersion);
    const s = name === undefined ? undefined : this.sensors.get(name);
    return { sensor: name ?? null, cannot_act: s ? gapLine(gapsOf(s, this.mode().asks ?? [])) : '' };
  }

  /** Marks the rows of trees no sensor reported on for staleAfterMs (their plugin is not live then). */
  private withStaleness(rows: SessionRow[]): SessionRow[] {
    const lastOf = new Map<string, number>();
    for (const r of rows) {
      const t = r.last_event_at ? Date.parse(r.last_event_at) : 0;
      lastOf.set(r.root, Math.max(lastOf.get(r.root) ?? 0, t));
    }
    const now = this.clock.now();
    for (const r of rows) {
      r.stale = now - (lastOf.get(r.root) ?? 0) > this.staleAfterMs;
      if (r.stale) r.plugin_live = false;
    }
    return rows;
  }

  /** Every tracked session, most recent activity first. */
  async sessionRows(limit = 1000): Promise<SessionRow[]> {
    const ids = new Set(await this.tree.ids());
    for (const x of this.driven) for (const id of (await x.detector.sessions?.()) ?? []) ids.add(id);
    const rows: SessionRow[] = [];
    for (const id of ids) {
      const r = await this.sessionRow(id);
      if (r) rows.push(r);
    }
    // Staleness is the tree's: a quiet child of a busy root is not stale.
    this.withStaleness(rows);
    return rows.sort((a, b) => (b.last_event_at ?? '').localeCompare(a.last_event_at ?? '')).slice(0, limit);
  }

  /** The incident reports of a session, the worst detector's first; undefined when nobody knows it. */
  async report(id: string): Promise<string | undefined> {
    const parts: { rank: number; text: string }[] = [];
    for (const x of this.driven) {
      if (!x.detector.report) continue;
      const text = await x.detector.report(id);
      if (text === undefined) continue;
      const r = await x.detector.session?.(id);
      parts.push({ rank: r ? RANK[r.level] : 0, text });
    }
    if (!parts.length) return undefined;
    return parts
      .sort((a, b) => b.rank - a.rank)
      .map((p) => p.text)
      .join('\n\n');
  }
}

/** The tree's record of a detector's reported level, with this one set (ok is not kept). */
function reportedWith(
  cur: TreeState['reported'],
  detector: string,
  session: string,
  level: VerdictLevel,
): TreeState['reported'] {
  const own = { ...(cur?.[detector] ?? {}) };
  if (level === 'ok') delete own[session];
  else own[session] = level;
  const out = { ...(cur ?? {}), [detector]: own };
  if (!Object.keys(own).length) delete out[detector];
  return Object.keys(out).length ? out : undefined;
}

/** The strictest vote wins: a refusal over a limit over allow; the smallest cap; any tripped model. */
export function combine(votes: readonly GateVote[]): GateAnswer {
  const tripped = votes.some((v) => v.model_tripped);
  const refuse = votes.find((v) => v.refuse)?.refuse;
  if (refuse) {
    return {
      action: 'refuse',
      status: 429,
      retry_after_s: refuse.retry_after_s,
      reason: refuse.reason,
      model_tripped: tripped,
    };
  }
  let limit: GateVote['limit'];
  for (const v of votes)
    if (v.limit && (!limit || v.limit.max_context_tokens < limit.max_context_tokens)) limit = v.limit;
  if (limit) {
    return {
      action: 'limit',
      max_context_tokens: limit.max_context_tokens,
      limit_mechanism: limit.mechanism,
      reason: limit.reason,
      model_tripped: tripped,
    };
  }
  return { action: 'allow', model_tripped: tripped };
}
