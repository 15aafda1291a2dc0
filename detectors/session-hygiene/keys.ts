import { keys, TTL } from '../../core/store/keys.ts';

// The session-hygiene detector's store keys, under its own namespace. Every value is
// JSON and every write a compare-and-set (store.update), so instances agree:
//   s:<session>  the session's judge state (HygieneState)
//   m:<model>    one model's effective envelope (ModelEnvelope)
//   timed        sessions time alone may change (a pending resume, a resume-count
//                finding): what a tick visits, instead of every session
const NS = keys.plugin('session-hygiene');

export const hyKeys = {
  state: (id: string) => `${NS}s:${id}`,
  statePrefix: `${NS}s:`,
  model: (model: string) => `${NS}m:${model}`,
  modelPrefix: `${NS}m:`,
  timed: `${NS}timed`,
} as const;

export const HY_TTL = {
  /** A session idle this long is dropped (its resume history, trend and findings with it). */
  state: TTL.session,
  /** A model unseen this long loses its envelope. */
  model: 30 * 86_400_000,
  /** The timed index: rewritten whenever a session enters or leaves it. */
  timed: TTL.session,
} as const;

/** Sessions the timed index keeps at most; past it the oldest entries go (their next input re-adds them). */
export const TIMED_MAX = 10_000;
