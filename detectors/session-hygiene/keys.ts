import { keys, TTL } from '../../core/store/keys.ts';

// The session-hygiene detector's store keys, under its own namespace. Every value is
// JSON and every write a compare-and-set (store.update), so instances agree:
//   s:<session>  the session's judge state (HygieneState)
//   m:<model>    one model's effective envelope (ModelEnvelope)
//   timed        sessions time alone may change (a pending resume, a resume-count
//                finding): what a tick visits, instead of every session
//   flagged      sessions whose level is not ok: what the panel and /health list
//                first, instead of reading every session
const NS = keys.plugin('session-hygiene');

export const hyKeys = {
  state: (id: string) => `${NS}s:${id}`,
  statePrefix: `${NS}s:`,
  model: (model: string) => `${NS}m:${model}`,
  modelPrefix: `${NS}m:`,
  timed: `${NS}timed`,
  flagged: `${NS}flagged`,
} as const;

export const HY_TTL = {
  /** A session idle this long is dropped (its resume history, trend and findings with it). */
  state: TTL.session,
  /** A model unseen this long loses its envelope. */
  model: 30 * 86_400_000,
  /** The indexes: rewritten whenever a session enters or leaves one. */
  index: TTL.session,
} as const;

/** Sessions an index keeps at most; past it the oldest entries go (their next change re-adds them). */
export const INDEX_MAX = 10_000;
