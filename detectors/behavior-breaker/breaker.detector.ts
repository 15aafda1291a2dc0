import type { Clock } from '../../core/clock.ts';
import type { ModelBreaker } from '../../core/engine.ts';
import { AppError } from '../../core/errors.ts';
import type { Logger } from '../../core/logger.ts';
import type { Notifier } from '../../core/notifier/notifier.ts';
import type { Store } from '../../core/store/store.ts';
import type { RequestRecord } from '../../core/wire.ts';
import type { VerdictTransition } from '../no-progress/no-progress.detector.ts';
import {
  type BreakerAction,
  type BreakerEvent,
  type Dict,
  decide,
  dict,
  type Evaluation,
  type Evidence,
  own,
  recordServed,
  recordStall,
  type Served,
  type Stalls,
  type TripState,
} from './breaker.judge.ts';
import type { BreakerOptions } from './breaker.options.ts';

// The store-backed shell around the pure decisions of breaker.judge.ts. State layout
// (every value JSON, every write a store.update compare-and-set, so instances agree):
//   breaker:models          model -> last request seen (the index of models)
//   breaker:served:<model>  session -> its latest request from that model, in the window
//   breaker:stalls          session -> stall mark (level, when, reason, attributed models)
//   breaker:trip:<model>    routing skip, cooldown, backoff level, the latest comparison
//   breaker:evidence        list, newest first: the trips
//   breaker:held            list, newest first: comparisons that held a model back
// Held comparisons have their own list so they never push a trip's record out.
// Per-model served keys keep the per-request write small and uncontended; stall
// transitions are rare, so one key holds them all.

const INDEX = 'breaker:models';
const STALLS = 'breaker:stalls';
const EVIDENCE = 'breaker:evidence';
const HELD = 'breaker:held';
const servedKey = (model: string) => `breaker:served:${model}`;
const tripKey = (model: string) => `breaker:trip:${model}`;

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

export class BehaviorBreaker implements ModelBreaker {
  private readonly seen = new Map<string, number>();
  private readonly indexed = new Map<string, number>();

  constructor(
    private readonly store: Store,
    private readonly clock: Clock,
    private readonly logger: Logger,
    private readonly notifier: Pick<Notifier, 'notify'>,
    readonly knobs: () => BreakerOptions,
  ) {}

  /**
   * Remembers that `model` served the session now. A pair is rewritten at most once per
   * window/60 by this process: the stored time is then at most that stale, and a router
   * sending many requests per session costs one store write per minute, not per request.
   * Time is the injected clock, like the verdicts it is compared with.
   */
  async onRequest(r: RequestRecord): Promise<void> {
    const k = this.knobs();
    const now = this.clock.now();
    const refresh = Math.max(1_000, Math.floor(k.window / 60));
    const pair = `${r.model}\n${r.session_id}`;
    const last = this.seen.get(pair);
    if (last !== undefined && now >= last && now - last < refresh) return;
    await this.store.update<Served, undefined>(servedKey(r.model), (cur) => ({
      value: recordServed(cur, r.session_id, k, now),
      result: undefined,
      ttlMs: k.window,
    }));
    remember(this.seen, pair, now, SEEN_CACHE);
    const idx = this.indexed.get(r.model);
    if (idx === undefined || now < idx || now - idx >= refresh) {
      await this.store.update<Dict<number>, undefined>(INDEX, (cur) => ({
        value: indexWith(cur, r.model, now),
        result: undefined,
      }));
      remember(this.indexed, r.model, now, MAX_MODELS);
    }
  }

  /**
   * A verdict transition: a stall (to stalling or looping) is attributed to the models
   * that served the session within the window (by this breaker's own request records;
   * `models` from the session's meta are included as candidates), and each model that
   * gained this session as evidence is judged.
   */
  async onVerdict(t: VerdictTransition, models: readonly string[]): Promise<void> {
    if (t.to === 'ok') return;
    const k = this.knobs();
    const now = this.clock.now();
    const served = await this.servedOf(models);
    const from = now - k.window;
    const attributed = Object.keys(served)
      .filter((m) => (own(served[m], t.session_id) ?? Number.NEGATIVE_INFINITY) >= from)
      .sort();
    if (!attributed.length) {
      this.logger.debug({ session: t.session_id, models }, 'breaker: stall with no model in the window');
      return;
    }
    const { stalls, fresh } = await this.store.update<Stalls, { stalls: Stalls; fresh: string[] }>(STALLS, (cur) => {
      const r = recordStall(
        cur,
        t.session_id,
        { level: t.to as 'stalling' | 'looping', source: t.source, reason: t.verdict.reason, models: attributed },
        k,
        now,
      );
      return { value: r.stalls, result: r, ttlMs: k.window };
    });
    if (!k.enabled) return;
    for (const m of fresh) await this.apply(m, { type: 'stall', snapshot: { served, stalls } });
  }

  /** The routing skip. An ended cooldown is released here (lazily, with its resolve alert). */
  async isTripped(model: string): Promise<boolean> {
    if (!this.knobs().enabled) return false;
    const s = await this.store.get<TripState>(tripKey(model));
    if (!s?.tripped) return false;
    if ((s.until ?? 0) > this.clock.now()) return true;
    return (await this.apply(model, { type: 'tick' })).tripped;
  }

  /** Admin Resume: ends the skip now (the backoff level is kept, so a quick re-trip still backs off). */
  async resume(model: string, by: string): Promise<{ resumed: boolean; model: BreakerModelView }> {
    const cur = await this.store.get<TripState>(tripKey(model));
    if (!cur) throw new AppError('NOT_FOUND', `model "${model}" has no breaker state (never judged)`);
    const wasTripped = cur.tripped && (cur.until ?? 0) > this.clock.now();
    await this.apply(model, { type: 'resume', by });
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
      if (s?.tripped && (s.until ?? 0) <= now) s = await this.apply(m, { type: 'tick' });
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

  /** One compare-and-set step of the pure decision, then its actions (after the write, once). */
  private async apply(model: string, ev: BreakerEvent): Promise<TripState> {
    const k = this.knobs();
    const now = this.clock.now();
    const r = await this.store.update<TripState, { state: TripState; actions: BreakerAction[] }>(
      tripKey(model),
      (cur) => {
        const d = decide(model, cur, ev, k, now);
        // Kept through the cooldown and the backoff memory after it (a week at least, for review).
        const ttlMs =
          Math.max(0, (d.state.until ?? now) - now) + Math.max(k.backoff_memory + k.window, MODEL_RETAIN_MS);
        return { value: d.state, result: d, ttlMs };
      },
    );
    for (const a of r.actions) await this.act(a, k.evidence_kept);
    return r.state;
  }

  private async act(a: BreakerAction, kept: number): Promise<void> {
    if (a.type === 'evidence') {
      const e = a.evidence;
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
      );
      await this.store.pushCapped(e.decision === 'tripped' ? EVIDENCE : HELD, e, kept);
      return;
    }
    await this.notifier.notify(a.alert).catch((err) => {
      this.logger.error({ err: (err as Error).message, dedup_key: a.alert.dedup_key }, 'breaker alert failed');
    });
  }
}

function remember(m: Map<string, number>, key: string, now: number, cap: number): void {
  m.delete(key); // re-inserted last: Map order is recency order
  m.set(key, now);
  if (m.size > cap) m.delete(m.keys().next().value as string);
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
