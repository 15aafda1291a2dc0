import type { EventEmitter } from 'node:events';
import { inject, injectable } from 'tsyringe';
import type { Severity } from './alert.ts';
import type { VigilEventMap, VigilEventName } from './bus.ts';
import type { Clock } from './clock.ts';
import {
  type Decision,
  type Detector,
  emptyTree,
  type Mode,
  type ModeEvent,
  type Origin,
  type Transition,
  type TreeState,
} from './contracts.ts';
import type { DirectiveQueue } from './directives.ts';
import { AppError } from './errors.ts';
import type { Logger } from './logger.ts';
import type { Metrics } from './metrics.ts';
import type { Notifier } from './notifier/notifier.ts';
import { keys, TTL } from './store/keys.ts';
import type { Store } from './store/store.ts';
import { TOKENS } from './tokens.ts';
import type { SessionTree } from './tree.ts';
import { afterCommit, type Units } from './unit.ts';
import type { ExternalVerdict, ProgressEvent, RequestRecord, VerdictLevel } from './wire.ts';

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

/**
 * Every enabled detector judges the input, concurrently: each reads and writes only its
 * own state, so on Redis their reads overlap instead of adding up. The transitions come
 * back in detector order; the first failure is thrown once all have settled.
 */
async function collect(
  xs: readonly Driven[],
  judge: (d: Detector) => readonly Transition[] | Promise<readonly Transition[]>,
): Promise<readonly Transition[]> {
  const rs = await Promise.allSettled(xs.filter((x) => x.enabled()).map((x) => judge(x.detector)));
  let all = NONE;
  for (const r of rs) {
    if (r.status === 'rejected') throw r.reason;
    if (r.value.length) all = all === NONE ? [...r.value] : [...all, ...r.value];
  }
  return all;
}

/** An input's id as the store keeps it for idempotency (shared by every instance). */
export const inputKey = (kind: string, session: string, id: string) => `in:${kind}:${session}\n${id}`;

/**
 * Dispatch: each input to every enabled detector; on a CHANGE of verdict only, the mode
 * decides for a session (tree state, directives, alerts) and the notifier for any other
 * subject; every other detector sees the transition. Each input is one unit of work
 * (core/unit.ts): all it causes commits at once or not at all. Names no plugin.
 */
@injectable()
export class Dispatch {
  /** Detectors by the hook they implement. */
  readonly on: Record<'progress' | 'request' | 'verdict' | 'transition' | 'tree' | 'tick' | 'gate', Driven[]>;
  /** Trees whose mode said when time alone changes them (root -> epoch ms); rebuilt from the store on start. */
  private readonly dueAt = new Map<string, number>();

  constructor(
    @inject(TOKENS.Driven) readonly driven: readonly Driven[],
    /** The configured mode, built from the live knobs. */
    @inject(TOKENS.Mode) readonly mode: () => Mode,
    @inject(TOKENS.Tree) private readonly tree: SessionTree,
    @inject(TOKENS.Store) private readonly store: Store,
    @inject(TOKENS.DirectiveQueue) private readonly directives: DirectiveQueue,
    @inject(TOKENS.Notifier) private readonly notifier: Notifier,
    @inject(TOKENS.Units) private readonly units: Units,
    @inject(TOKENS.Clock) private readonly clock: Clock,
    @inject(TOKENS.Logger) private readonly logger: Logger,
    @inject(TOKENS.Metrics) private readonly metrics: Metrics,
    @inject(TOKENS.Events) private readonly events: EventEmitter,
  ) {
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

  private emit<K extends VigilEventName>(name: K, payload: VigilEventMap[K]): void {
    if (this.events.listenerCount(name)) this.events.emit(name, payload);
  }

  /**
   * Progress events, in order, as one unit (a batch commits at once: on Redis one
   * round trip for the batch, not one per event). Idempotent by call_id: an event whose
   * call_id is committed already, or came earlier in the batch, is skipped. `tail`, when
   * given, runs at the end of the unit and its answer is returned as `tail`: a read there
   * is checked by the commit, so it costs no round trip of its own (undefined when every
   * event was a repeat: nothing committed). `head`, when given, runs first in the unit
   * (a check that may refuse the input by throwing: nothing is written then); it runs
   * on its own when every event was a repeat, so it is never skipped.
   */
  async progress<T = never>(
    events: readonly ProgressEvent[],
    origin: Origin = {},
    tail?: () => Promise<T>,
    head?: () => Promise<void>,
  ): Promise<{ transitions: readonly Transition[]; tail?: T }> {
    const ids = events.map((ev) => (ev.call_id === undefined ? undefined : inputKey('p', ev.session_id, ev.call_id)));
    const r = await this.units.run(
      async (seen) => {
        if (head) await head();
        let all = NONE;
        const took: number[] = [];
        const here = new Set<string>();
        for (let i = 0; i < events.length; i++) {
          const id = ids[i];
          if (id !== undefined) {
            if (seen.has(id) || here.has(id)) continue;
            here.add(id);
          }
          const t0 = performance.now();
          const ts = await this.progressOne(events[i], origin);
          took.push(i, t0);
          if (ts.length) all = all === NONE ? [...ts] : [...all, ...ts];
        }
        return { all, took, tail: tail ? await tail() : undefined };
      },
      [...new Set(ids.filter((id) => id !== undefined))],
    );
    if (r.repeat && head) await head();
    this.emit('progress', { sessions: [...new Set(events.map((e) => e.session_id))] });
    if (r.repeat || !r.value) return { transitions: NONE };
    const { all, took } = r.value;
    for (let j = 0; j < took.length; j += 2) {
      this.metrics.event(events[took[j]].kind);
      this.metrics.judged(took[j + 1]);
    }
    return { transitions: all, tail: r.value.tail };
  }

  private async progressOne(ev: ProgressEvent, origin: Origin): Promise<readonly Transition[]> {
    const s = await this.tree.enter({
      id: ev.session_id,
      parent: ev.parent_session_id,
      agent: ev.agent,
      ts: ev.ts,
      origin,
    });
    const out = await collect(this.on.progress, (d) => d.onProgress!(ev, s, origin));
    if (ev.kind === 'compaction_done') {
      await this.modeEvent(s.root, { type: 'compaction_done', session_id: ev.session_id, root_id: s.root });
    }
    return out.length ? this.handle(out) : NONE;
  }

  /** LLM request records, each its own unit (idempotent by request_id). */
  async requests(records: readonly RequestRecord[]): Promise<readonly Transition[]> {
    let all = NONE;
    for (const rec of records) {
      const t0 = performance.now();
      // (a request record keeps ids of its own: a history reader derives both a request
      // record and a model-step event from one assistant message, under its one id)
      const r = await this.units.run(async () => {
        const s = await this.tree.enter({
          id: rec.session_id,
          parent: rec.parent_session_id,
          agent: rec.agent,
          model: rec.model,
          ts: rec.ts,
        });
        const out = await collect(this.on.request, (d) => d.onRequest!(rec, s));
        return out.length ? this.handle(out) : NONE;
      }, [inputKey('r', rec.session_id, rec.request_id)]);
      if (r.repeat) continue;
      this.metrics.requests.inc();
      this.metrics.judged(t0);
      this.emit('request', { session: rec.session_id, model: rec.model, prompt_tokens: rec.prompt_tokens });
      if (r.value?.length) all = all === NONE ? [...r.value] : [...all, ...r.value];
    }
    return all;
  }

  /** Verdicts from outside sensors (the watchdog): every detector that listens judges them. */
  async verdicts(list: readonly ExternalVerdict[]): Promise<readonly Transition[]> {
    let all = NONE;
    for (const v of list) {
      const r = await this.units.run(async () => {
        const s = await this.tree.enter({ id: v.session_id, parent: v.parent_session_id, agent: v.agent });
        const out = await collect(this.on.verdict, (d) => d.onVerdict!(v, s));
        return out.length ? this.handle(out) : NONE;
      });
      if (r.value?.length) all = [...all, ...r.value];
    }
    return all;
  }

  /**
   * Time passed: outbox entries left behind are delivered, trees whose time came are
   * decided, and detectors that keep time judge, each detector's tick its own unit.
   */
  async tick(now = this.clock.now()): Promise<readonly Transition[]> {
    await this.units
      .reconcile(false)
      .catch((err) => this.logger.warn({ err: (err as Error).message }, 'reconciling the outbox failed'));
    for (const [root, at] of [...this.dueAt]) {
      if (at > now) continue;
      this.dueAt.delete(root);
      await this.decide(root, { type: 'tick', root_id: root }).catch((err) =>
        this.logger.warn({ err: (err as Error).message, root }, 'mode tick failed'),
      );
    }
    let out = NONE;
    for (const x of this.on.tick) {
      if (!x.enabled()) continue;
      try {
        const r = await this.units.run(async () => {
          const t = await x.detector.onTick!(now);
          return t.length ? this.handle(t) : NONE;
        });
        if (r.value?.length) out = [...out, ...r.value];
      } catch (err) {
        this.logger.warn({ err: (err as Error).message, detector: x.detector.type }, 'detector tick failed');
      }
    }
    return out;
  }

  /** On start: every tree whose mode said when time alone changes it is scheduled again. */
  async schedule(): Promise<number> {
    const mode = this.mode();
    if (!mode.nextDue) return 0;
    let n = 0;
    for (const k of await this.store.keys(keys.treePrefix)) {
      const t = await this.store.get<TreeState>(k);
      const due = t && mode.nextDue(t);
      if (t && due !== undefined) {
        this.dueAt.set(t.root, due);
        n++;
      }
    }
    return n;
  }

  /**
   * Applies transitions: the mode or the notifier acts on each, then every other
   * detector sees it (and may answer with transitions of its own, handled in turn).
   * Detectors call this through TOKENS.Emit for transitions outside an input: those
   * are a unit of their own.
   */
  async handle(ts: readonly Transition[]): Promise<Transition[]> {
    const r = await this.units.run(async () => {
      const queue = [...ts];
      for (let i = 0; i < queue.length && i < MAX_CASCADE; i++) {
        const t = queue[i];
        await this.apply(t);
        for (const x of this.on.transition) {
          if (x.detector.type === t.detector || !x.enabled()) continue;
          try {
            const more = await x.detector.onTransition!(t);
            if (more.length) queue.push(...more);
          } catch (err) {
            this.logger.warn(
              { err: (err as Error).message, detector: x.detector.type },
              'detector failed on a transition',
            );
          }
        }
      }
      return queue;
    });
    return r.value ?? [];
  }

  private async apply(t: Transition): Promise<void> {
    afterCommit(() => {
      this.metrics.verdicts.inc({ to: t.to, source: t.source });
      this.logger.info(
        { subject: t.subject, from: t.from, to: t.to, detector: t.detector, source: t.source, rule: t.rule },
        `verdict ${t.from} -> ${t.to}`,
      );
    });
    if (t.subject.kind === 'session') {
      const id = t.subject.id;
      const root = await this.tree.rootOf(id);
      const meta = await this.tree.meta(id);
      await this.modeEvent(root, {
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
      if (t.directives?.length) await this.directives.push(root, t.directives, this.clock.now());
      afterCommit(() =>
        this.emit('transition', { session: id, detector: t.detector, from: t.from, to: t.to, source: t.source, root }),
      );
      return;
    }
    // Not a session: the detector's own incident, raised or resolved as it says.
    const severity: Severity = t.severity ?? (t.to === 'looping' ? 'critical' : 'warning');
    await this.notifier.notify({
      dedup_key: t.dedup_key ?? `${t.detector}:${t.subject.id}`,
      severity,
      state: t.to === 'ok' ? 'resolve' : 'trigger',
      title: (t.title ?? `${t.detector}: ${t.subject.id}`).slice(0, 200),
      summary: t.reason.slice(0, 1024),
      details: (t.report ?? '').slice(0, 16_384),
      source: t.source.slice(0, 64),
    });
  }

  /** A mode event as its own unit (outside an input: a Resume, an ack, the gate's or the tick's time). */
  async decide(root: string, ev: ModeEvent): Promise<Decision> {
    const r = await this.units.run(() => this.modeEvent(root, ev));
    if (!r.value) throw new AppError('STORE_UNAVAILABLE', 'the decision was not committed; retry', { retryable: true });
    return r.value;
  }

  /**
   * The mode's pure decision on the tree, and what it asks: directives queued, alerts
   * raised or resolved. Inside the current unit, so all of it commits with the input.
   */
  private async modeEvent(root: string, ev: ModeEvent): Promise<Decision> {
    const mode = this.mode();
    const now = this.clock.now();
    const cur = await this.store.get<TreeState>(keys.tree(root));
    const d = mode.decide(cur ?? emptyTree(root, now), ev, now);
    await this.store.set(keys.tree(root), d.tree, TTL.tree);
    if (d.directives.length) await this.directives.push(root, d.directives, now);
    for (const a of d.alerts) await this.notifier.notify(a);
    const due = mode.nextDue?.(d.tree);
    afterCommit(() => {
      if (due === undefined) this.dueAt.delete(root);
      else this.dueAt.set(root, due);
      this.emit('tree', {
        root,
        stage: d.tree.stage,
        refused: Boolean(d.tree.refuse_all) || Object.keys(d.tree.refused).length > 0,
      });
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
   * The sensor acknowledges directives (by id, with the root they belong to and the
   * session they were issued for), in one unit. An ack naming another session than the
   * directive's is refused (AppError) and nothing of the call is applied.
   */
  async ack(acks: readonly { id: string; root_id: string; session_id: string }[]): Promise<number> {
    const r = await this.units.run(async () => {
      const byRoot = new Map<string, { id: string; session_id: string }[]>();
      for (const a of acks) byRoot.set(a.root_id, [...(byRoot.get(a.root_id) ?? []), a]);
      let n = 0;
      for (const [root, list] of byRoot) {
        const { done, refused } = await this.directives.ack(root, list);
        if (refused.length) {
          throw new AppError(
            'FORBIDDEN',
            `acks[]: directive ${refused.join(', ')} was not issued for the session named`,
          );
        }
        n += done.length;
        for (const d of done) {
          if (d.type === 'abort') {
            await this.modeEvent(root, { type: 'acked', directive: 'abort', session_id: d.session_id, root_id: root });
          }
        }
      }
      return n;
    });
    return r.value ?? 0;
  }
}
