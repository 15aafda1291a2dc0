import type { AlertInput } from '../../core/alert.ts';
import { formatDuration } from '../../core/duration.ts';
import { truncate } from '../../core/render.ts';
import type { Evaluation, Evidence, Outcome, StalledSession, StallLevel } from './breaker.evidence.ts';
import type { BreakerOptions } from './breaker.options.ts';
import { formatP, pct, renderEvidence, summaryOf } from './breaker.report.ts';
import { fisherGreater } from './breaker.stats.ts';

export type { Evaluation, Evidence, Outcome, StalledSession, StallLevel };

// The behavior breaker's decisions, pure: (state, event, knobs, now) -> (state, actions).
// No store, no clock, no notifier: the shell (breaker.detector.ts) runs these inside
// store.update, which may call them again on a compare-and-set conflict, and then
// carries out the actions it gets back.

/** Maps keyed by session or model id: null prototype, since an id may be "__proto__". */
export type Dict<T> = Record<string, T>;

export function dict<T>(): Dict<T> {
  return Object.create(null) as Dict<T>;
}

function entries<T>(d: Dict<T> | undefined): [string, T][] {
  return d ? Object.entries(d) : [];
}

export function own<T>(d: Dict<T> | undefined, k: string): T | undefined {
  return d && Object.hasOwn(d, k) ? d[k] : undefined;
}

/** Sessions one model served: session id -> its latest request from that model (epoch ms). */
export type Served = Dict<number>;

/** A session with a stall verdict, attributed to the models that served it in the window. */
export interface StallMark {
  level: StallLevel;
  first_at: number;
  /** The latest stall transition of the session. */
  at: number;
  source: string;
  reason: string;
  models: string[];
}
export type Stalls = Dict<StallMark>;

/** What an evaluation reads: every model's served sessions and every stall mark. */
export interface Snapshot {
  served: Dict<Served>;
  stalls: Stalls;
}

/** Keeps the newest `max` entries by a timestamp. */
function capNewest<T>(d: Dict<T>, max: number, ts: (v: T) => number): Dict<T> {
  const all = entries(d);
  if (all.length <= max) return d;
  all.sort((x, y) => ts(y[1]) - ts(x[1]));
  const out = dict<T>();
  for (const [k, v] of all.slice(0, max)) out[k] = v;
  return out;
}

/** One request of `session` by a model: prune to the window, stamp, keep it bounded. */
export function recordServed(cur: Served | undefined, session: string, k: BreakerOptions, now: number): Served {
  const from = now - k.window;
  const out = dict<number>();
  for (const [s, t] of entries(cur)) if (t >= from) out[s] = t;
  out[session] = Math.max(now, own(out, session) ?? now);
  return capNewest(out, k.max_sessions, (t) => t);
}

/**
 * A stall transition of `session` attributed to `models`. Returns the pruned marks and
 * the models newly attributed (only those gained evidence, so only those are judged).
 */
export function recordStall(
  cur: Stalls | undefined,
  session: string,
  v: { level: StallLevel; source: string; reason: string; models: readonly string[] },
  k: BreakerOptions,
  now: number,
): { stalls: Stalls; fresh: string[] } {
  const from = now - k.window;
  const out = dict<StallMark>();
  for (const [s, m] of entries(cur)) if (m.at >= from) out[s] = m;
  const prev = own(out, session);
  const fresh = v.models.filter((m) => !prev?.models.includes(m));
  out[session] = {
    level: prev?.level === 'looping' ? 'looping' : v.level,
    first_at: prev?.first_at ?? now,
    at: now,
    source: v.source,
    reason: v.reason.slice(0, 300),
    models: [...(prev?.models ?? []), ...fresh].slice(0, 16),
  };
  return { stalls: capNewest(out, k.max_sessions, (m) => m.at), fresh };
}

/**
 * Outcomes that hold a model back although it has min_sessions stalls: the comparison
 * can still go the other way while those stalls are in the window (other models serve
 * new sessions, the others' own stalls age out), so it is made again (a recheck).
 */
export function isPending(o: Outcome | undefined): boolean {
  return o === 'no_baseline' || o === 'ratio_too_low' || o === 'not_significant';
}

/** Whether two comparisons of one model came out the same (a recheck that changes nothing writes nothing). */
export function sameComparison(a: Evaluation | undefined, b: Evaluation): boolean {
  return (
    a !== undefined &&
    a.outcome === b.outcome &&
    a.model_rate.stalled === b.model_rate.stalled &&
    a.model_rate.served === b.model_rate.served &&
    a.others.stalled === b.others.stalled &&
    a.others.served === b.others.served
  );
}

const SESSIONS_KEPT = 50;

/**
 * Is this model's stall rate well above the other models' on the same window's traffic?
 * In order: at least min_sessions stalled sessions; at least min_other_sessions sessions
 * on the other models (a baseline); the rate ratio at least min_ratio; and the one-sided
 * Fisher exact test significant at alpha. Ratio and test both: the ratio alone trips on
 * 1 of 1 against 0 of 5, the test alone trips on a small difference over heavy traffic.
 */
export function evaluate(
  model: string,
  snap: Snapshot,
  releasedAt: number | undefined,
  k: BreakerOptions,
  now: number,
): Evaluation {
  const windowStart = now - k.window;
  const since = Math.max(windowStart, releasedAt ?? windowStart);

  const mine = new Set<string>();
  const stalled: StalledSession[] = [];
  for (const [s, t] of entries(own(snap.served, model))) if (t >= since) mine.add(s);
  const otherServed = new Set<string>();
  const otherStalled = new Set<string>();
  const otherModels = new Set<string>();
  for (const [m, served] of entries(snap.served)) {
    if (m === model) continue;
    for (const [s, t] of entries(served)) {
      if (t < windowStart) continue;
      otherServed.add(s);
      otherModels.add(m);
    }
  }
  for (const [s, mark] of entries(snap.stalls)) {
    if (mark.at < windowStart) continue;
    if (mark.at >= since && mark.models.includes(model)) {
      mine.add(s);
      stalled.push({ session: s, level: mark.level, at: mark.at, source: mark.source, reason: mark.reason });
    }
    for (const m of mark.models) {
      if (m === model) continue;
      otherStalled.add(s);
      otherServed.add(s);
      otherModels.add(m);
    }
  }
  stalled.sort((x, y) => y.at - x.at || (x.session < y.session ? -1 : 1));

  const a = stalled.length;
  const n1 = mine.size;
  const c = otherStalled.size;
  const n2 = otherServed.size;
  const rate = n1 ? a / n1 : 0;
  const otherRate = n2 ? c / n2 : null;
  const base = {
    model,
    at: now,
    window_ms: k.window,
    since,
    sessions: stalled.slice(0, SESSIONS_KEPT),
    model_rate: { stalled: a, served: n1, rate },
    others: { models: [...otherModels].sort(), stalled: c, served: n2, rate: otherRate },
    test: 'fisher-exact-one-sided' as const,
    thresholds: {
      min_sessions: k.min_sessions,
      min_ratio: k.min_ratio,
      alpha: k.alpha,
      min_other_sessions: k.min_other_sessions,
    },
  };
  const w = formatDuration(k.window);
  if (a < k.min_sessions) {
    return {
      ...base,
      ratio: null,
      p_value: null,
      outcome: 'too_few_sessions',
      note: `${a} stalled session(s) on this model in ${w} (min_sessions ${k.min_sessions})`,
    };
  }
  if (n2 < k.min_other_sessions) {
    return {
      ...base,
      ratio: null,
      p_value: null,
      outcome: 'no_baseline',
      note: `other models served ${n2} session(s) in ${w} (min_other_sessions ${k.min_other_sessions}): no baseline to compare with, not tripped`,
    };
  }
  const ratio = c === 0 ? null : rate / (otherRate as number);
  const p = fisherGreater(a, n1, c, n2);
  const vs = `stalled ${a} of ${n1} (${pct(rate)}) vs ${c} of ${n2} (${pct(otherRate)}) on other models`;
  const ratioText = ratio === null ? 'inf' : ratio.toFixed(2);
  // rate >= min_ratio * otherRate, without dividing by a zero rate.
  if (rate < k.min_ratio * (otherRate as number)) {
    return {
      ...base,
      ratio,
      p_value: p,
      outcome: 'ratio_too_low',
      note: `${vs}: ratio ${ratioText} < min_ratio ${k.min_ratio}, stalls not specific to this model`,
    };
  }
  if (p > k.alpha) {
    return {
      ...base,
      ratio,
      p_value: p,
      outcome: 'not_significant',
      note: `${vs}: p = ${formatP(p)} > alpha ${k.alpha}, could be chance`,
    };
  }
  return {
    ...base,
    ratio,
    p_value: p,
    outcome: 'trip',
    note: `${vs}: ratio ${ratioText} >= ${k.min_ratio}, p = ${formatP(p)} <= ${k.alpha}`,
  };
}

/** Per model: its routing skip and backoff. */
export interface TripState {
  model: string;
  tripped: boolean;
  /** The latest trip (kept after the release for display and backoff). */
  tripped_at?: number;
  until?: number;
  cooldown_ms?: number;
  /** Backoff exponent of the latest trip: cooldown * backoff^level. */
  level: number;
  trips: number;
  /** End of the latest trip: its cooldown's end, or the Resume. */
  released_at?: number;
  released_by?: string;
  /** The latest comparison, tripped or not (with its note: why). */
  last_check?: Evaluation;
}

export type BreakerEvent =
  /** A stall verdict newly attributed to this model. */
  | { type: 'stall'; snapshot: Snapshot }
  /** The held comparison made again: other models served a new session, or time passed. */
  | { type: 'recheck'; snapshot: Snapshot; why: 'traffic' | 'tick' }
  /** Lazy expiry: someone looked (gate, GET /breaker). */
  | { type: 'tick' }
  | { type: 'resume'; by: string };

export type BreakerAction = { type: 'alert'; alert: AlertInput } | { type: 'evidence'; evidence: Evidence };

export function emptyTrip(model: string): TripState {
  return { model, tripped: false, level: 0, trips: 0 };
}

export const dedupKey = (model: string) => `breaker:${model}`;
const title = (model: string) => truncate(`model tripped: ${model}`, 200);

function resolveAlert(model: string, summary: string): BreakerAction {
  return {
    type: 'alert',
    alert: {
      dedup_key: dedupKey(model),
      severity: 'critical',
      state: 'resolve',
      title: title(model),
      summary,
      source: 'behavior-breaker',
    },
  };
}

export function decide(
  model: string,
  cur: TripState | undefined,
  ev: BreakerEvent,
  k: BreakerOptions,
  now: number,
): { state: TripState; actions: BreakerAction[]; outcome?: Outcome } {
  let s: TripState = cur ?? emptyTrip(model);
  const actions: BreakerAction[] = [];
  // A cooldown that ended releases the model first, dated at its end (not when noticed),
  // so the backoff memory and the next count start from the real release.
  if (s.tripped && (s.until ?? 0) <= now) {
    s = { ...s, tripped: false, released_at: s.until, released_by: 'cooldown' };
    actions.push(resolveAlert(model, `cooldown of ${formatDuration(s.cooldown_ms ?? 0)} ended; routing to it again`));
  }
  switch (ev.type) {
    case 'tick':
      return { state: s, actions };
    case 'resume': {
      if (!s.tripped) return { state: s, actions };
      s = { ...s, tripped: false, released_at: now, released_by: `resume by ${ev.by}` };
      actions.push(resolveAlert(model, `resumed by ${ev.by}; routing to it again`));
      return { state: s, actions };
    }
    case 'stall':
    case 'recheck': {
      // Already skipped: late verdicts of sessions it served before the trip add nothing.
      if (s.tripped) return { state: s, actions };
      const e = evaluate(model, ev.snapshot, s.released_at, k, now);
      const prev = s.last_check;
      s = { ...s, last_check: e };
      const why = ev.type === 'recheck' ? { recheck: ev.why } : {};
      if (e.outcome === 'too_few_sessions') return { state: s, actions, outcome: e.outcome };
      if (e.outcome !== 'trip') {
        // a recheck keeps a held record only when the reason changed, not on every tick
        if (ev.type === 'stall' || prev?.outcome !== e.outcome) {
          actions.push({ type: 'evidence', evidence: { ...e, id: `${model}@${now}`, decision: 'held', ...why } });
        }
        return { state: s, actions, outcome: e.outcome };
      }
      const again = s.trips > 0 && s.released_at !== undefined && now - s.released_at <= k.backoff_memory;
      const level = again ? Math.min(s.level + 1, 64) : 0;
      const cooldown = Math.min(k.max_cooldown, Math.round(k.cooldown * k.backoff ** level));
      s = {
        ...s,
        tripped: true,
        tripped_at: now,
        until: now + cooldown,
        cooldown_ms: cooldown,
        level,
        trips: s.trips + 1,
      };
      const evidence: Evidence = {
        ...e,
        ...why,
        id: `${model}#${s.trips}`,
        decision: 'tripped',
        cooldown_ms: cooldown,
        until: now + cooldown,
        backoff_level: level,
      };
      actions.push({
        type: 'alert',
        alert: {
          dedup_key: dedupKey(model),
          severity: 'critical',
          state: 'trigger',
          title: title(model),
          summary: summaryOf(evidence),
          details: renderEvidence(evidence),
          source: 'behavior-breaker',
        },
      });
      actions.push({ type: 'evidence', evidence });
      return { state: s, actions, outcome: e.outcome };
    }
  }
}
