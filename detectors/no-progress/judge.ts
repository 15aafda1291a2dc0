// The no-progress judge: a pure function of (session state, input, knobs) -> (state,
// verdict). No I/O, no clock, no logger: the service, the watchdog and replay all run
// this code. The pieces, in the order an input meets them:
//   judge/state.ts    the per-session state and its memory layout
//   judge/update.ts   applying a progress event, a request record or a child's roll-up
//   judge/window.ts   the rolling window and the session tables (the hot path)
//   judge/rules.ts    the verdict rules over the signals
//   judge/reason.ts   one-line reasons and named targets
//   judge/recover.ts  judging a session afresh after a recovery (rebase)
//   judge/codec.ts    the compact binary form the Redis backend stores
//   judge/tracker.ts  the in-memory multi-session driver (replay, watchdog, bench)

export { ancestorsOf } from '../../core/tree.ts';
export { decodeState, encodeState } from './judge/codec.ts';
export { cycleLabel, topTargets } from './judge/reason.ts';
export { rebase } from './judge/recover.ts';
export { verdictOf } from './judge/rules.ts';
export {
  type JudgeInput,
  LEVEL_LOOPING,
  LEVEL_OK,
  LEVEL_STALLING,
  LEVELS,
  type LevelCode,
  label,
  newSessionState,
  type RollUp,
  SessionState,
} from './judge/state.ts';
export { applyRollUps, Tracker, type VerdictChange } from './judge/tracker.ts';
export { judge, onProgress, onRequest, onRollup, rollUpOf } from './judge/update.ts';
export { compactWindow, targetHash } from './judge/window.ts';
