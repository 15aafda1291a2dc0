import { z } from 'zod';
import type { AlertInput } from '../../core/alert.ts';
import type { Clock } from '../../core/clock.ts';
import type { Detector, GateContext, GateVote, Panel, PluginRoute, Transition } from '../../core/contracts.ts';
import { AppError } from '../../core/errors.ts';
import type { Logger } from '../../core/logger.ts';
import { Lru } from '../../core/lru.ts';
import type { Store } from '../../core/store/store.ts';
import type { SessionTree } from '../../core/tree.ts';
import { afterCommit, onDiscard } from '../../core/unit.ts';
import { ModelSchema, type RequestRecord } from '../../core/wire.ts';
import {
  type BreakerAction,
  type BreakerEvent,
  type Dict,
  decide,
  dict,
  type Evaluation,
  type Evidence,
  evaluate,
  isPending,
  type Outcome,
  own,
  recordServed,
  recordStall,
  type Served,
  type Snapshot,
  type Stalls,
  sameComparison,
  type TripState,
} from './breaker.judge.ts';
import type { BreakerOptions } from './breaker.options.ts';

import { EVIDENCE, HELD, INDEX, PENDING, STALLS, servedKey, tripKey } from './keys.ts';

// The store-backed shell around the pure decisions of breaker.judge.ts (keys in keys.ts).
//
// A model is compared when a stall is attributed to it. A comparison that holds it back
// for a reason that can change while its stalls are in the window (no baseline yet, a
// ratio or a test short of the threshold) leaves the model pending: it is compared again
// when another model serves a new session (the baseline grows) and on the timer (the
// others' stalls age out), until it trips or its stalls leave the window. Without that,
// a model whose sessions stall before the others have traffic is never tripped.

export const TYPE = 'behavior-breaker';
const NONE: readonly Transition[] = Object.freeze([]);

/** Models unseen this long leave the index (and GET /breaker). */
const MODEL_RETAIN_MS = 7 * 86_400_000;
const MAX_MODELS = 1_000;
/** (model, session) pairs whose last write this process remembers, to skip rewrites. */
const SEEN_CACHE = 20_000;

/** A model's row in GET /breaker. Times are epoch ms. */
export interface BreakerModelView {
  model: string;
  tripped: boolean;
  tripped_at: number | null;
  until: number | null;
  cooldown_ms: number | null;
  backoff_level: number;
  trips: number;
  released_at: number | null;
  released_by: string | null;
  /** Distinct sessions it served in the window, and how many of them stalled. */
  served_sessions: number;
  stalled_sessions: number;
  last_check: Evaluation | null;
}

export interface BreakerView {
  enabled: boolean;
  window_ms: number;
  models: BreakerModelView[];
  /** Trips, newest first. */
  evidence: Evidence[];
  /** Comparisons made (min_sessions reached) that did not trip, with why; newest first. */
  held: Evidence[];
}

/** A breaker alert as the kernel takes it: a transition on the model. */
export function toTransition(model: string, a: AlertInput): Transition {
  const trip = a.state !== 'resolve';
  return {
    detector: TYPE,
    subject: { kind: 'model', id: model },
    from: trip ? 'ok' : 'looping',
    to: trip ? 'looping' : 'ok',
    rule: trip ? 'stall_rate' : null,
    reason: a.summary,
    source: TYPE,
    severity: a.severity,
    dedup_key: a.dedup_key,
    title: a.title,
    ...(a.details ? { report: a.details } : {}),
  };
}

export class BehaviorBreaker implements Detector {
  readonly type = TYPE;
  private readonly seen = new Lru<string, number>(SEEN_CACHE);
  private readonly indexed = new Lru<string, number>(MAX_MODELS);
  /** When this process last compared each pending model again. */
  private readonly rechecked = new Lru<string, number>(MAX_MODELS);

  constructor(
    private readonly store: Store,
    private readonly clock: Clock,
    private readonly logger: Logger,
    private readonly tree: Pick<SessionTree, 'meta'>,
    /** Transitions outside an input (a release noticed by the gate or a readout). */
    private readonly emit: (ts: readonly Transition[]) => Promise<void>,
    readonly knobs: () => BreakerOptions,
  ) {}

  /**
   * Remembers that `model` served the session now. A pair is rewritten at most once per
   * window/60 by this process: the stored time is then at most that stale, and a router
   * sending many requests per session costs one store write per minute, not per request.
   * Time is the injected clock, like the verdicts it is compared with.
   */
  onRequest(r: RequestRecord): readonly Transition[] | Promise<readonly Transition[]> {
    const k = this.knobs();
    const now = this.clock.now();
    const refresh = Math.max(1_000, Math.floor(k.window / 60));
    const pair = `${r.model}\n${r.session_id}`;
    const last = this.seen.peek(pair);
    if (last !== undefined && now >= last && now - last < refresh) return NONE;
    return this.recordServed(r, k, now, refresh, pair);
  }

  private async recordServed(
    r: RequestRecord,
    k: BreakerOptions,
    now: number,
    refresh: number,
    pair: string,
  ): Promise<readonly Transition[]> {
    const fresh = await this.store.update<Served, boolean>(servedKey(r.model), (cur) => ({
      value: recordServed(cur, r.session_id, k, now),
      // a session this model had not served in the window: the others' baseline grew
      result: (own(cur, r.session_id) ?? Number.NEGATIVE_INFINITY) < now - k.window,
      ttlMs: k.window,
    }));
    this.seen.set(pair, now);
    onDiscard(() => this.seen.delete(pair));
    const idx = this.indexed.peek(r.model);
    if (idx === undefined || now < idx || now - idx >= refresh) {
      await this.store.update<Dict<number>, undefined>(INDEX, (cur) => ({
        value: indexWith(cur, r.model, now),
        result: undefined,
      }));
      this.indexed.set(r.model, now);
      onDiscard(() => this.indexed.delete(r.model));
    }
    return fresh && k.recheck_interval > 0 ? this.recheck('traffic', r.model) : NONE;
  }

  /** Time passed: pending comparisons are made again (the others' stalls may have aged out). */
  async onTick(): Promise<readonly Transition[]> {
    return this.knobs().recheck_interval > 0 ? this.recheck('tick') : NONE;
  }

  /**
   * Makes the pending comparisons again, each model at most every recheck_interval (by
   * this process): after new traffic every pending model but the one that served it (its
   * own traffic only lowers its rate), on the timer all of them. A comparison that comes
   * out as before writes nothing.
   */
  private async recheck(why: 'traffic' | 'tick', servedBy?: string): Promise<readonly Transition[]> {
    const pending = await this.store.get<Dict<number>>(PENDING);
    if (!pending) return NONE;
    const k = this.knobs();
    const now = this.clock.now();
    const due = Object.keys(pending).filter(
      (m) =>
        pending[m] > now &&
        m !== servedBy &&
        now - (this.rechecked.get(m) ?? Number.NEGATIVE_INFINITY) >= k.recheck_interval,
    );
    if (!due.length) return NONE;
    const snapshot: Snapshot = {
      served: await this.servedOf(due),
      stalls: (await this.store.get<Stalls>(STALLS)) ?? dict<never>(),
    };
    const out: Transition[] = [];
    const settled: string[] = [];
    for (const m of due) {
      const before = this.rechecked.get(m);
      this.rechecked.set(m, now);
      // judged again after a conflict: the recheck did not happen
      onDiscard(() => (before === undefined ? this.rechecked.delete(m) : this.rechecked.set(m, before)));
      const cur = await this.store.get<TripState>(tripKey(m));
      if (cur?.tripped) {
        settled.push(m);
        continue;
      }
      const e = evaluate(m, snapshot, cur?.released_at, k, now);
      if (e.outcome !== 'trip' && sameComparison(cur?.last_check, e)) continue;
      const r = await this.apply(m, { type: 'recheck', snapshot, why });
      if (!isPending(r.outcome)) settled.push(m);
      out.push(...r.out);
    }
    await this.pend([], settled, now);
    return out;
  }

  /**
   * The pending set: `add` is held back now (pending until its newest stall leaves the
   * window), `drop` is decided (tripped, or its stalls gone). Written only on a change.
   */
  private async pend(add: readonly string[], drop: readonly string[], now: number): Promise<void> {
    const k = this.knobs();
    for (const m of drop) this.rechecked.delete(m);
    const next = (cur: Dict<number> | undefined) => {
      const out = dict<number>();
      for (const [m, until] of Object.entries(cur ?? {})) if (until > now && !drop.includes(m)) out[m] = until;
      for (const m of add) out[m] = now + k.window;
      return out;
    };
    const cur = await this.store.get<Dict<number>>(PENDING);
    const same = (a: Dict<number>) =>
      Object.keys(a).length === Object.keys(cur ?? {}).length && Object.keys(a).every((m) => own(cur, m) === a[m]);
    if (same(next(cur))) return;
    await this.store.update<Dict<number>, undefined>(PENDING, (c) => {
      const v = next(c);
      return Object.keys(v).length
        ? { value: v, result: undefined, ttlMs: k.window }
        : { value: undefined, result: undefined };
    });
  }

  /**
   * Another detector's transition on a session: a stall (to stalling or looping) is
   * attributed to the models that served the session within the window (by this
   * breaker's own request records; the session's models from the tree are included as
   * candidates), and each model that gained this session as evidence is judged.
   */
  async onTransition(t: Transition): Promise<readonly Transition[]> {
    // Info-level notes (a detector's secondary tells) are not stalls.
    if (t.subject.kind !== 'session' || t.to === 'ok' || t.severity === 'info') return NONE;
    const session = t.subject.id;
    const models = (await this.tree.meta(session))?.models ?? [];
    const k = this.knobs();
    const now = this.clock.now();
    const served = await this.servedOf(models);
    const from = now - k.window;
    const attributed = Object.keys(served)
      .filter((m) => (own(served[m], session) ?? Number.NEGATIVE_INFINITY) >= from)
      .sort();
    if (!attributed.length) {
      this.logger.debug({ session, models }, 'breaker: stall with no model in the window');
      return NONE;
    }
    const { stalls, fresh } = await this.store.update<Stalls, { stalls: Stalls; fresh: string[] }>(STALLS, (cur) => {
      const r = recordStall(
        cur,
        session,
        { level: t.to as 'stalling' | 'looping', source: t.source, reason: t.reason, models: attributed },
        k,
        now,
      );
      return { value: r.stalls, result: r, ttlMs: k.window };
    });
    const out: Transition[] = [];
    const held: string[] = [];
    const settled: string[] = [];
    for (const m of fresh) {
      const r = await this.apply(m, { type: 'stall', snapshot: { served, stalls } });
      out.push(...r.out);
      (isPending(r.outcome) && k.recheck_interval > 0 ? held : settled).push(m);
    }
    await this.pend(held, settled, now);
    return out;
  }

  /** The gate's routing skip for the request's model. */
  async gate(g: GateContext): Promise<GateVote | undefined> {
    return g.query.model && (await this.isTripped(g.query.model)) ? { model_tripped: true } : undefined;
  }

  /** The routing skip. An ended cooldown is released here (lazily, with its resolve alert). */
  async isTripped(model: string): Promise<boolean> {
    const s = await this.store.get<TripState>(tripKey(model));
    if (!s?.tripped) return false;
    if ((s.until ?? 0) > this.clock.now()) return true;
    return (await this.applyNow(model, { type: 'tick' })).tripped;
  }

  /** Admin Resume: ends the skip now (the backoff level is kept, so a quick re-trip still backs off). */
  async resume(model: string, by: string): Promise<{ resumed: boolean; model: BreakerModelView }> {
    const cur = await this.store.get<TripState>(tripKey(model));
    if (!cur) throw new AppError('NOT_FOUND', `model "${model}" has no breaker state (never judged)`);
    const wasTripped = cur.tripped && (cur.until ?? 0) > this.clock.now();
    await this.applyNow(model, { type: 'resume', by });
    const view = await this.view(0, [model]);
    return { resumed: wasTripped, model: view.models[0] };
  }

  /** GET /breaker: every model's state (ended cooldowns released first) and recent evidence. */
  async view(limit = 50, only?: readonly string[]): Promise<BreakerView> {
    const k = this.knobs();
    const now = this.clock.now();
    const models = only ?? Object.keys((await this.store.get<Dict<number>>(INDEX)) ?? {}).sort();
    const served = await this.servedOf(models);
    const stalls = (await this.store.get<Stalls>(STALLS)) ?? dict<never>();
    const from = now - k.window;
    const rows: BreakerModelView[] = [];
    for (const m of models) {
      let s = await this.store.get<TripState>(tripKey(m));
      if (s?.tripped && (s.until ?? 0) <= now) s = await this.applyNow(m, { type: 'tick' });
      const sessions = new Set<string>();
      for (const [id, t] of Object.entries(own(served, m) ?? {})) if (t >= from) sessions.add(id);
      let stalled = 0;
      for (const [id, mark] of Object.entries(stalls)) {
        if (mark.at < from || !mark.models.includes(m)) continue;
        stalled++;
        sessions.add(id);
      }
      rows.push({
        model: m,
        tripped: s?.tripped ?? false,
        tripped_at: s?.tripped_at ?? null,
        until: s?.until ?? null,
        cooldown_ms: s?.cooldown_ms ?? null,
        backoff_level: s?.level ?? 0,
        trips: s?.trips ?? 0,
        released_at: s?.released_at ?? null,
        released_by: s?.released_by ?? null,
        served_sessions: sessions.size,
        stalled_sessions: stalled,
        last_check: s?.last_check ?? null,
      });
    }
    const [evidence, held] =
      limit > 0
        ? await Promise.all([this.store.list<Evidence>(EVIDENCE, limit), this.store.list<Evidence>(HELD, limit)])
        : [[], []];
    return { enabled: k.enabled, window_ms: k.window, models: rows, evidence, held };
  }

  /** Served maps of every indexed model plus `extra` (a model may be unindexed for a moment). */
  private async servedOf(extra: readonly string[]): Promise<Dict<Served>> {
    const index = (await this.store.get<Dict<number>>(INDEX)) ?? {};
    const models = [...new Set([...Object.keys(index), ...extra])];
    const maps = await Promise.all(models.map((m) => this.store.get<Served>(servedKey(m))));
    const out = dict<Served>();
    models.forEach((m, i) => {
      if (maps[i]) out[m] = maps[i];
    });
    return out;
  }

  /** apply(), with its transitions handled now (a release noticed outside an input). */
  private async applyNow(model: string, ev: BreakerEvent): Promise<TripState> {
    const r = await this.apply(model, ev);
    if (r.out.length) await this.emit(r.out);
    return r.state;
  }

  /** One compare-and-set step of the pure decision, then its actions (after the write, once). */
  private async apply(
    model: string,
    ev: BreakerEvent,
  ): Promise<{ state: TripState; out: Transition[]; outcome?: Outcome }> {
    const k = this.knobs();
    const now = this.clock.now();
    const r = await this.store.update<TripState, ReturnType<typeof decide>>(tripKey(model), (cur) => {
      const d = decide(model, cur, ev, k, now);
      // Kept through the cooldown and the backoff memory after it (a week at least, for review).
      const ttlMs = Math.max(0, (d.state.until ?? now) - now) + Math.max(k.backoff_memory + k.window, MODEL_RETAIN_MS);
      return { value: d.state, result: d, ttlMs };
    });
    const out: Transition[] = [];
    for (const a of r.actions) {
      if (a.type === 'alert') out.push(toTransition(model, a.alert));
      else await this.record(a, k.evidence_kept);
    }
    return { state: r.state, out, ...(r.outcome ? { outcome: r.outcome } : {}) };
  }

  private async record(a: Extract<BreakerAction, { type: 'evidence' }>, kept: number): Promise<void> {
    const e = a.evidence;
    // logged once the evidence is stored: a unit judged again does not log it twice
    afterCommit(() =>
      this.logger.info(
        {
          model: e.model,
          decision: e.decision,
          outcome: e.outcome,
          p: e.p_value,
          ratio: e.ratio,
          cooldown_ms: e.cooldown_ms,
        },
        `breaker ${e.decision} ${e.model}: ${e.note}`,
      ),
    );
    await this.store.pushCapped(e.decision === 'tripped' ? EVIDENCE : HELD, e, kept);
  }

  async health(): Promise<Record<string, unknown>> {
    const v = await this.view(0);
    return { enabled: v.enabled, tripped_models: v.models.filter((m) => m.tripped).map((m) => m.model) };
  }

  /** The models table for the admin page (GET /panels). */
  async panels(): Promise<Panel[]> {
    const v = await this.view(0);
    const iso = (ms: number | null) => (ms ? new Date(ms).toISOString() : null);
    return [
      {
        title: `Behavior breaker: models (window ${Math.round(v.window_ms / 60_000)}m${v.enabled ? '' : ', disabled'})`,
        columns: [
          { key: 'model', label: 'model' },
          { key: 'tripped', label: 'tripped' },
          { key: 'until', label: 'skip until' },
          { key: 'trips', label: 'trips' },
          { key: 'backoff_level', label: 'backoff' },
          { key: 'served_sessions', label: 'served' },
          { key: 'stalled_sessions', label: 'stalled' },
          { key: 'ratio', label: 'ratio' },
          { key: 'note', label: 'last check' },
        ],
        rows: v.models.map((m) => ({
          model: m.model,
          tripped: m.tripped,
          until: m.tripped ? iso(m.until) : null,
          trips: m.trips,
          backoff_level: m.backoff_level,
          served_sessions: m.served_sessions,
          stalled_sessions: m.stalled_sessions,
          ratio: m.last_check?.ratio ?? null,
          note: m.last_check?.note ?? null,
        })),
      },
    ];
  }

  /** GET /breaker and the admin Resume. A model id has slashes: the path segment carries it URL-encoded. */
  routes(): PluginRoute[] {
    return [
      {
        method: 'GET',
        url: '/breaker',
        summary: 'Behavior breaker: every model (tripped, cooldown, backoff, latest comparison) and recent evidence',
        querystring: z.strictObject({ limit: z.coerce.number().int().min(0).max(10_000).default(50) }),
        handler: (req) => this.view(req.query.limit),
      },
      {
        method: 'POST',
        url: '/breaker/:model/resume',
        admin: true,
        summary: 'Resume a tripped model now (its routing skip ends; the model id URL-encoded)',
        params: z.strictObject({ model: ModelSchema }),
        // A bodyless POST arrives as null.
        body: z.strictObject({ by: z.string().min(1).max(64).default('admin') }).nullish(),
        handler: (req) => this.resume(req.params.model, req.body?.by ?? 'admin'),
      },
    ];
  }
}

/** The model index: stamp `model`, drop models unseen for a week, keep the newest MAX_MODELS. */
function indexWith(cur: Dict<number> | undefined, model: string, now: number): Dict<number> {
  const kept = Object.entries(cur ?? {})
    .filter(([m, t]) => m !== model && t >= now - MODEL_RETAIN_MS)
    .sort((a, b) => b[1] - a[1])
    .slice(0, MAX_MODELS - 1);
  const out = dict<number>();
  for (const [m, t] of kept) out[m] = t;
  out[model] = now;
  return out;
}
