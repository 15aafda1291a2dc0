import type { ProgressEvent, RequestRecord, Verdict } from '../../../core/wire.ts';
import type { NoProgressKnobs } from '../knobs.ts';
import { evaluate, verdictOf } from './rules.ts';
import type { JudgeInput, LevelCode, RollUp, SessionState } from './state.ts';
import { compactWindow, noteLanding, pushText, pushTool, resetSinceLanded, setAgent } from './window.ts';

// Applying one input to a session state: progress events, request records, roll-ups.

// ---------------------------------------------------------------------------
// updates (hot path: no allocation)

/** Pure judge step: applies one input and returns the state (same object) and the verdict. */
export function judge(
  s: SessionState,
  input: JudgeInput,
  k: NoProgressKnobs,
): { state: SessionState; verdict: Verdict } {
  if (input.type === 'progress') onProgress(s, input.event, k);
  else if (input.type === 'request') onRequest(s, input.record, k);
  else onRollup(s, input.rollup, k);
  return { state: s, verdict: verdictOf(s, k) };
}

/** Applies a progress event; returns the new level. */
export function onProgress(s: SessionState, ev: ProgressEvent, k: NoProgressKnobs): LevelCode {
  if (s.agent === undefined && ev.agent !== undefined) setAgent(s, ev.agent, k);
  if (s.parent === undefined && ev.parent_session_id) s.parent = ev.parent_session_id;
  if (ev.ts > s.lastTs) s.lastTs = ev.ts;
  if (ev.kind === 'tool') pushTool(s, ev, k);
  else {
    s.landedNow = false;
    if (ev.kind === 'continuation') {
      s.continuations++;
      s.contSince++;
    } else if (ev.kind === 'compaction_done') {
      s.compactions++;
      compactWindow(s);
    } else if (ev.kind === 'assistant' && ev.text_fingerprint !== undefined) {
      // a model step that only talked (sensors send the text fingerprint of such steps only)
      pushText(s, ev.text_fingerprint);
    }
    // other kinds belong to other detectors: nothing to apply
  }
  s.level = evaluate(s, k);
  return s.level;
}

/** Applies a request record; returns the new level. */
export function onRequest(s: SessionState, r: RequestRecord, k: NoProgressKnobs): LevelCode {
  if (s.agent === undefined && r.agent !== undefined) setAgent(s, r.agent, k);
  if (s.parent === undefined && r.parent_session_id) s.parent = r.parent_session_id;
  if (r.ts > s.lastTs) s.lastTs = r.ts;
  const usd = r.cost_usd ?? 0;
  s.requests++;
  s.sawRequest = true;
  s.reqSince++;
  s.usdSince += usd;
  s.usdTotal += usd;
  s.tokSince += r.prompt_tokens;
  s.contextTokens = r.prompt_tokens;
  s.level = evaluate(s, k);
  return s.level;
}

/** Applies a child's roll-up to an ancestor; returns the new level. */
export function onRollup(s: SessionState, r: RollUp, k: NoProgressKnobs): LevelCode {
  if (r.requests > 0) s.sawRequest = true;
  s.reqSince += r.requests;
  s.toolsSince += r.tools;
  s.usdSince += r.usd;
  s.tokSince += r.tokens;
  if (r.landed) {
    s.treeLandings++;
    noteLanding(s);
    resetSinceLanded(s);
  }
  s.level = evaluate(s, k);
  return s.level;
}

/**
 * What a session's input contributes to each of its ancestors (null: nothing). `after`
 * is the session's state once the input is applied: it says whether a landed event
 * counted (a repeat of the previous landed call does not reset the ancestors either).
 */
export function rollUpOf(input: JudgeInput, after: SessionState): RollUp | null {
  if (input.type === 'rollup') return input.rollup;
  if (input.type === 'request') {
    const r = input.record;
    return { landed: false, requests: 1, tools: 0, usd: r.cost_usd ?? 0, tokens: r.prompt_tokens };
  }
  const e = input.event;
  if (e.kind !== 'tool') return null;
  return { landed: after.landedNow, requests: 0, tools: 1, usd: 0, tokens: 0 };
}
