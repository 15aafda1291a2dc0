import type { BreakerOptions } from './breaker.options.ts';

// What the breaker keeps of a comparison: the judge makes it, the report renders it.

export type StallLevel = 'stalling' | 'looping';

export type Outcome = 'trip' | 'too_few_sessions' | 'no_baseline' | 'ratio_too_low' | 'not_significant';

export interface StalledSession {
  session: string;
  level: StallLevel;
  at: number;
  source: string;
  reason: string;
}

/** One comparison of a model against the rest of the window's traffic. */
export interface Evaluation {
  model: string;
  at: number;
  window_ms: number;
  /** Start of this model's own count: the window start, or its last release if later (a trip's evidence is not reused). */
  since: number;
  /** This model's stalled sessions, newest first (at most SESSIONS_KEPT; `model_rate.stalled` is the count). */
  sessions: StalledSession[];
  model_rate: { stalled: number; served: number; rate: number };
  /** Distinct sessions served by any other model in the window; a session shared with this model counts in both rows. */
  others: { models: string[]; stalled: number; served: number; rate: number | null };
  /** model rate / others' rate; null when not defined (the others stalled none, or no comparison was made). */
  ratio: number | null;
  /** One-sided Fisher exact p-value; null when no comparison was made. */
  p_value: number | null;
  test: 'fisher-exact-one-sided';
  thresholds: Pick<BreakerOptions, 'min_sessions' | 'min_ratio' | 'alpha' | 'min_other_sessions'>;
  outcome: Outcome;
  /** Why, in one line. */
  note: string;
}

/** A trip, or a comparison that held a model back although it had min_sessions stalls. */
export interface Evidence extends Evaluation {
  id: string;
  decision: 'tripped' | 'held';
  /** Set when a recheck decided (not a new stall): what prompted it. */
  recheck?: 'traffic' | 'tick';
  cooldown_ms?: number;
  until?: number;
  backoff_level?: number;
}
