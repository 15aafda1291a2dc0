// The session-hygiene judge's state: plain JSON (no Map, no class), small and bounded,
// so the service can keep one per session in Redis and the watchdog in a file.

export const HYGIENE_LEVELS = ['ok', 'info', 'warning', 'critical'] as const;
export type HygieneLevel = (typeof HYGIENE_LEVELS)[number];

/**
 * The rules, most urgent first within a level: a session's verdict is its highest-level
 * finding, ties broken by this order (the secondary tells in descending earliness).
 */
export const HYGIENE_RULES = [
  'restore_stall',
  'empty_generation',
  'watch_number',
  'retry_amplification',
  'envelope',
  'message_ceiling',
  'bytes_ceiling',
  'image_over_100k',
  'resume_count',
  'history_bytes',
] as const;
export type HygieneRule = (typeof HYGIENE_RULES)[number];

export const R_RESTORE_STALL = 0;
export const R_EMPTY = 1;
export const R_WATCH = 2;
export const R_RETRY = 3;
export const R_ENVELOPE = 4;
export const R_MESSAGES = 5;
export const R_BYTES = 6;
export const R_IMAGE = 7;
export const R_RESUMES = 8;
export const R_HISTORY = 9;

/**
 * What the verdict asks for; the wiring maps it onto the gate and the plugin.
 * - finish_question: finish the current question here, start nothing new;
 * - retire: the next question goes to a fresh session (carries the brief);
 * - abort_dispatch: kill this dispatch (no more retries) and re-ask in a fresh session;
 * - abort_and_fresh: abort the stalled resume and open a fresh session (carries the brief).
 */
export type HygieneAction = 'none' | 'finish_question' | 'retire' | 'abort_dispatch' | 'abort_and_fresh';

export interface Finding {
  level: HygieneLevel;
  /** When it was raised, or last changed level (epoch ms). */
  since: number;
  /** One ASCII line with the numbers. */
  reason: string;
}

/** One completed turn: its watch number. */
export interface TrendEntry {
  /** When the turn ended (or its numbers last changed), epoch ms. */
  at: number;
  calls: number;
  per_call: number;
}

export interface Turn {
  started_at: number;
  /** Began with a prompt or a continuation (false: opened by a call of a router-only session). */
  prompted: boolean;
  resume: boolean;
  /** A call ended the turn (a finish other than a tool call, or an error). */
  done: boolean;
  /** Its entry is the trend's last, updated in place by late inputs. */
  recorded: boolean;
  /**
   * Calls and prompt tokens from request records and from opencode assistant messages,
   * kept apart: the two report the same calls under different ids, so a turn's numbers
   * come from the records when it has any, from opencode otherwise.
   */
  req_calls: number;
  req_tokens: number;
  oc_calls: number;
  oc_tokens: number;
  /** Retries seen in opencode retry events: finished retry sequences plus the current one's attempt. */
  retry_base: number;
  retry_attempt: number;
  /** Request records that repeat the previous record's model and prompt size: the same prefix re-sent. */
  repeats: number;
  last_req_model: string | null;
  last_req_tokens: number;
  /** Empty generations in this turn. */
  empty: number;
  visible: boolean;
  image_bytes: number;
}

export interface SessionStats {
  /** When the sensor read them. */
  at: number;
  messages: number;
  stored_bytes: number;
  history_bytes: number | null;
  updated_at: number | null;
  live: boolean;
}

/** The latest terminal error of the session: codes and sizes only. */
export interface LastError {
  at: number;
  model: string | null;
  prompt_tokens: number;
  status: number | null;
  code: string | null;
  type: string | null;
  /** Image bytes that entered the turn it ended: tells an image payload from an envelope failure. */
  image_bytes: number;
}

export interface HygieneState {
  v: 1;
  session_id: string;
  level: HygieneLevel;
  rule: HygieneRule | null;
  /** One slot per rule, in HYGIENE_RULES order; null when the rule does not hold. */
  findings: (Finding | null)[];
  turn: Turn | null;
  /** Turns completed so far. */
  turns: number;
  /** The last `trend_turns` completed turns, oldest first. */
  trend: TrendEntry[];
  /** A prompt or continuation was ever seen: turns are delimited by them (else by finishes). */
  saw_prompt: boolean;
  /** Times of the latest resumes, oldest first (at most RESUMES_KEPT). */
  resumes: number[];
  /** The resume still waiting for its first token (epoch ms), or null. */
  resume_at: number | null;
  stats: SessionStats | null;
  /** Prompt tokens of the latest call that reported any. */
  last_prompt_tokens: number;
  model: string | null;
  last_error: LastError | null;
  last_ts: number;
  /** FNV-1a hashes of the latest ids seen (calls, prompts, images, records), so a re-read counts once. */
  seen: number[];
  seen_at: number;
}

export const SEEN_KEPT = 32;

export function newHygieneState(session_id: string): HygieneState {
  return {
    v: 1,
    session_id,
    level: 'ok',
    rule: null,
    findings: HYGIENE_RULES.map(() => null),
    turn: null,
    turns: 0,
    trend: [],
    saw_prompt: false,
    resumes: [],
    resume_at: null,
    stats: null,
    last_prompt_tokens: 0,
    model: null,
    last_error: null,
    last_ts: 0,
    seen: [],
    seen_at: 0,
  };
}

export function newTurn(at: number, prompted: boolean, resume: boolean): Turn {
  return {
    started_at: at,
    prompted,
    resume,
    done: false,
    recorded: false,
    req_calls: 0,
    req_tokens: 0,
    oc_calls: 0,
    oc_tokens: 0,
    retry_base: 0,
    retry_attempt: 0,
    repeats: 0,
    last_req_model: null,
    last_req_tokens: 0,
    empty: 0,
    visible: false,
    image_bytes: 0,
  };
}

const RANK: Record<HygieneLevel, number> = { ok: 0, info: 1, warning: 2, critical: 3 };
export const levelRank = (l: HygieneLevel): number => RANK[l];

/** Retries of the turn: opencode's retry attempts or the router's repeated records, whichever saw more. */
export function retriesOf(t: Turn | null): number {
  if (t === null) return 0;
  return Math.max(t.retry_base + t.retry_attempt, t.repeats);
}

/** The turn's calls and prompt tokens: the router's when it reported any, opencode's otherwise. */
export function turnNumbers(t: Turn): { calls: number; tokens: number } {
  return t.req_calls > 0 ? { calls: t.req_calls, tokens: t.req_tokens } : { calls: t.oc_calls, tokens: t.oc_tokens };
}
