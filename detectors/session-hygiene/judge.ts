// The session-hygiene judge: pure functions of (state, input, knobs) -> (state, changes).
// No I/O, no clock, no logger: time comes in the inputs (event `ts`, tick `now`). The
// facts behind every rule and threshold are in docs/session-hygiene.md. The pieces:
//   judge/state.ts     the per-session state (plain JSON, bounded), levels and rules
//   judge/update.ts    onEvent, onRequest, onTick: the rules and the verdict changes
//   judge/envelope.ts  the effective envelope per model (largest clean prompt, failures)
//   judge/text.ts      short ASCII numbers and the fresh-session brief
//   judge/readout.ts   the Sessions readout and the report section
//   judge/tracker.ts   an in-memory driver over many sessions (tests, bench, replay)
import type { ProgressEvent, RequestRecord } from '../../core/wire.ts';
import type { ModelEnvelope } from './judge/envelope.ts';
import type { HygieneState } from './judge/state.ts';
import { type HygieneChange, onEvent, onRequest, onTick } from './judge/update.ts';
import type { HygieneOptions } from './options.ts';

export {
  ABORTED,
  aboveEnvelope,
  type EnvelopeBook,
  type EnvelopeFailure,
  type EnvelopeReadout,
  envelopeOf,
  envelopeReadout,
  learnAssistant,
  learnRequest,
  type ModelEnvelope,
  newEnvelopeBook,
  promptTokensOf,
} from './judge/envelope.ts';
export { type HygieneReadout, readout, report } from './judge/readout.ts';
export {
  type Finding,
  HYGIENE_LEVELS,
  HYGIENE_RULES,
  type HygieneAction,
  type HygieneLevel,
  type HygieneRule,
  type HygieneState,
  newHygieneState,
  type TrendEntry,
} from './judge/state.ts';
export { buildBrief } from './judge/text.ts';
export { type HygieneInput, HygieneTracker } from './judge/tracker.ts';
export { actionOf, type HygieneChange, onEvent, onRequest, onTick, topFinding } from './judge/update.ts';

export type HygieneJudgeInput =
  | { type: 'progress'; event: ProgressEvent }
  | { type: 'request'; record: RequestRecord }
  | { type: 'tick'; now: number };

/**
 * One judge step: applies the input to the state (in place) and returns it with the
 * changes. `envelope` is the call's model envelope before this call is learned.
 */
export function judge(
  s: HygieneState,
  input: HygieneJudgeInput,
  k: HygieneOptions,
  envelope?: ModelEnvelope | null,
): { state: HygieneState; changes: readonly HygieneChange[] } {
  const changes =
    input.type === 'progress'
      ? onEvent(s, input.event, k, envelope)
      : input.type === 'request'
        ? onRequest(s, input.record, k, envelope)
        : onTick(s, input.now, k);
  return { state: s, changes };
}
