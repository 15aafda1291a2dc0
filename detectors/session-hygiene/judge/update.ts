import type {
  AssistantEvent,
  ImageEvent,
  ProgressEvent,
  PromptEvent,
  RequestRecord,
  RetryEvent,
  SessionStatsEvent,
} from '../../../core/wire.ts';
import type { HygieneOptions } from '../options.ts';
import { RESUMES_KEPT } from '../options.ts';
import { ABORTED, aboveEnvelope, type ModelEnvelope, promptTokensOf } from './envelope.ts';
import {
  HYGIENE_RULES,
  type HygieneAction,
  type HygieneLevel,
  type HygieneRule,
  type HygieneState,
  levelRank,
  newTurn,
  R_BYTES,
  R_EMPTY,
  R_ENVELOPE,
  R_HISTORY,
  R_IMAGE,
  R_MESSAGES,
  R_RESTORE_STALL,
  R_RESUMES,
  R_RETRY,
  R_WATCH,
  retriesOf,
  SEEN_KEPT,
  type Turn,
  turnNumbers,
} from './state.ts';
import { buildBrief, line, resumesWithin, size, span, tok } from './text.ts';

// Applying one input to a session's hygiene state. Pure: no I/O and no clock; time is
// the input's `ts` or the tick's `now`. The state is updated IN PLACE (the store hands
// each attempt a fresh copy); the return value is the verdict CHANGES it caused: at most
// one per input, when the session's top finding (level, rule) moved.

export interface HygieneChange {
  session_id: string;
  /** The session's latest model, when known. */
  model?: string;
  at: number;
  from: HygieneLevel;
  to: HygieneLevel;
  from_rule: HygieneRule | null;
  rule: HygieneRule | null;
  action: HygieneAction;
  /** One ASCII line with the numbers. */
  reason: string;
  /** The fresh-session brief: on retire (watch number critical) and on restore stall. */
  brief?: string;
}

const NO_CHANGES: readonly HygieneChange[] = Object.freeze([]);

/** Finish reasons that mean "the model called tools; the turn goes on" (opencode, OpenAI, Anthropic spellings). */
const TOOL_FINISH = new Set(['tool-calls', 'tool_calls', 'tool_use', 'function_call']);

// ---------------------------------------------------------------------------
// entry points

/** A progress event. Kinds this judge does not use only count as signs of life after a resume. */
export function onEvent(
  s: HygieneState,
  ev: ProgressEvent,
  k: HygieneOptions,
  envelope?: ModelEnvelope | null,
): readonly HygieneChange[] {
  if (ev.ts > s.last_ts) s.last_ts = ev.ts;
  switch (ev.kind) {
    case 'prompt':
      onPrompt(s, ev, k);
      break;
    case 'continuation':
      // a synthetic "continue" user turn: a new turn, not a resume (the session was busy)
      s.saw_prompt = true;
      openTurn(s, newTurn(ev.ts, true, false), k);
      firstToken(s, ev.ts);
      break;
    case 'assistant':
      onAssistant(s, ev, k, envelope);
      break;
    case 'retry':
      onRetry(s, ev, k);
      break;
    case 'image':
      onImage(s, ev, k);
      break;
    case 'session_stats':
      onStats(s, ev, k);
      break;
    default:
      // tool calls and compactions: the process is doing model-side work
      firstToken(s, ev.ts);
  }
  return settle(s, ev.ts, k);
}

/** A request record from the router. `envelope`: the model's envelope before this record is learned. */
export function onRequest(
  s: HygieneState,
  r: RequestRecord,
  k: HygieneOptions,
  envelope?: ModelEnvelope | null,
): readonly HygieneChange[] {
  if (r.ts > s.last_ts) s.last_ts = r.ts;
  if (seen(s, r.request_id)) return settle(s, r.ts, k);
  firstToken(s, r.ts);
  const t = turnFor(s, r.ts, k);
  const p = r.prompt_tokens;
  const failed =
    (r.status !== undefined && r.status >= 400) || r.error_code !== undefined || r.error_type !== undefined;
  s.model = r.model;
  if (p > 0) {
    // the same model and prompt size again within a turn: the prefix re-sent, a retry
    if (t.last_req_model === r.model && t.last_req_tokens === p) t.repeats++;
    t.last_req_model = r.model;
    t.last_req_tokens = p;
    t.req_calls++;
    t.req_tokens += p;
    s.last_prompt_tokens = p;
    afterCall(s, p, r.model, r.ts, k, envelope);
  }
  if (failed) {
    s.last_error = {
      at: r.ts,
      model: r.model,
      prompt_tokens: p,
      status: r.status ?? null,
      code: r.error_code ?? null,
      type: r.error_type ?? null,
      image_bytes: t.image_bytes,
    };
  } else if (r.visible_output === false) emptyGeneration(s, t, p, r.ts);
  else if (r.visible_output === true) visible(s, t);
  checkRetries(s, t, r.ts, k);
  // an empty or failed call does not end the turn: what comes next is its retry
  if (r.finish_reason !== undefined && !TOOL_FINISH.has(r.finish_reason) && !failed && r.visible_output !== false) {
    t.done = true;
  }
  if (t.done) recordTurn(s, t, r.ts, k);
  return settle(s, r.ts, k);
}

/** Time passes: the restore stall and the resume window depend on it. */
export function onTick(s: HygieneState, now: number, k: HygieneOptions): readonly HygieneChange[] {
  return settle(s, now, k);
}

// ---------------------------------------------------------------------------
// per kind

function onPrompt(s: HygieneState, ev: PromptEvent, k: HygieneOptions): void {
  if (ev.call_id !== undefined && seen(s, ev.call_id)) return;
  s.saw_prompt = true;
  openTurn(s, newTurn(ev.ts, true, ev.resume), k);
  if (!ev.resume) return;
  // kept in time order (two sensors may report out of order), so the window check is O(1)
  const xs = s.resumes;
  let i = xs.length;
  while (i > 0 && xs[i - 1] > ev.ts) i--;
  xs.splice(i, 0, ev.ts);
  if (xs.length > RESUMES_KEPT) xs.shift();
  s.resume_at = ev.ts;
  // a new attempt: an earlier stall verdict is about the previous one
  clear(s, R_RESTORE_STALL);
}

function onAssistant(s: HygieneState, ev: AssistantEvent, k: HygieneOptions, envelope?: ModelEnvelope | null): void {
  if (seen(s, ev.call_id)) return;
  // a step the user (or Vigil) aborted before it produced anything is no first token
  if (ev.error_name !== ABORTED || ev.visible_output || ev.output_tokens > 0) firstToken(s, ev.ts);
  // a compaction summary is not a step of the agent's work
  if (ev.summary === true) return;
  const t = turnFor(s, ev.ts, k);
  const p = promptTokensOf(ev);
  if (ev.model !== undefined) s.model = ev.model;
  if (p > 0) {
    t.oc_calls++;
    t.oc_tokens += p;
    s.last_prompt_tokens = p;
    afterCall(s, p, ev.model, ev.ts, k, envelope);
  }
  if (ev.error_name !== undefined) {
    if (ev.error_name !== ABORTED) {
      s.last_error = {
        at: ev.ts,
        model: ev.model ?? s.model,
        prompt_tokens: p,
        status: null,
        code: ev.error_code ?? ev.error_name,
        type: null,
        image_bytes: t.image_bytes,
      };
    }
    // opencode gives up on a call only after its own retries: the turn is over
    t.done = true;
  } else if (!ev.visible_output && ev.finish === undefined && p === 0) {
    // No finish and no prompt billed: no model answered. opencode ends a step this way
    // when it is cut while waiting to retry (after a router's 429): not an empty generation.
    t.done = true;
  } else if (!ev.visible_output) emptyGeneration(s, t, p, ev.ts);
  else {
    visible(s, t);
    if (ev.finish !== undefined && !TOOL_FINISH.has(ev.finish)) t.done = true;
  }
  if (t.done) recordTurn(s, t, ev.ts, k);
}

function onRetry(s: HygieneState, ev: RetryEvent, k: HygieneOptions): void {
  // a retry means the restore is over and the provider is being called
  firstToken(s, ev.ts);
  const t = turnFor(s, ev.ts, k);
  if (ev.attempt > t.retry_attempt) t.retry_attempt = ev.attempt;
  else if (ev.attempt < t.retry_attempt) {
    // attempts restart at 1 for the next failing call of the same turn; an equal attempt is a re-report
    t.retry_base += t.retry_attempt;
    t.retry_attempt = ev.attempt;
  }
  checkRetries(s, t, ev.ts, k);
}

function onImage(s: HygieneState, ev: ImageEvent, k: HygieneOptions): void {
  if (ev.call_id !== undefined && seen(s, ev.call_id)) return;
  const t = turnFor(s, ev.ts, k);
  t.image_bytes += ev.bytes;
  if (s.last_prompt_tokens >= k.image_context_tokens && s.findings[R_IMAGE] === null) {
    set(
      s,
      R_IMAGE,
      'info',
      ev.ts,
      `image of ${size(ev.bytes)} entered at ${tok(s.last_prompt_tokens)} prompt tokens per call (>= ${tok(k.image_context_tokens)}): it rides in every later call's prefix; grade images in a throwaway session`,
    );
  }
}

function onStats(s: HygieneState, ev: SessionStatsEvent, k: HygieneOptions): void {
  const prev = s.stats;
  // readings may arrive out of order from two sensors: keep the newest
  if (prev !== null && prev.at > ev.ts) return;
  s.stats = {
    at: ev.ts,
    messages: ev.messages,
    stored_bytes: ev.stored_bytes,
    history_bytes: ev.history_bytes ?? prev?.history_bytes ?? null,
    updated_at: ev.updated_at ?? null,
    live: ev.live,
  };
  if (ev.updated_at !== undefined) firstToken(s, ev.updated_at);
  if (ev.messages >= k.message_ceiling) {
    if (s.findings[R_MESSAGES] === null) {
      set(
        s,
        R_MESSAGES,
        'warning',
        ev.ts,
        `${ev.messages} messages stored (>= ${k.message_ceiling}): restore stalls near here; retire the session before its next resume`,
      );
    }
  } else clear(s, R_MESSAGES);
  if (ev.stored_bytes >= k.bytes_ceiling) {
    if (s.findings[R_BYTES] === null) {
      set(
        s,
        R_BYTES,
        'warning',
        ev.ts,
        `${size(ev.stored_bytes)} stored (>= ${size(k.bytes_ceiling)}): restore stalls near here; retire the session before its next resume`,
      );
    }
  } else clear(s, R_BYTES);
  if (ev.history_bytes !== undefined) {
    if (ev.history_bytes > k.history_bytes_info) {
      if (s.findings[R_HISTORY] === null) {
        set(
          s,
          R_HISTORY,
          'info',
          ev.ts,
          `history sent to the model ${size(ev.history_bytes)} (> ${size(k.history_bytes_info)}): harvest what is needed and start fresh`,
        );
      }
    } else clear(s, R_HISTORY);
  }
}

// ---------------------------------------------------------------------------
// turns

/** The turn an input belongs to. A router-only session (no prompts seen) starts a turn with the first call after one ended. */
function turnFor(s: HygieneState, at: number, k: HygieneOptions): Turn {
  const t = s.turn;
  if (t !== null && (s.saw_prompt || !t.done)) return t;
  return openTurn(s, newTurn(at, false, false), k);
}

function openTurn(s: HygieneState, t: Turn, k: HygieneOptions): Turn {
  const prev = s.turn;
  // a turn cut short (aborted, or its finish never reported) still counts with what it did
  if (prev !== null && !prev.recorded) recordTurn(s, prev, t.started_at, k);
  s.turn = t;
  // retries are counted per turn
  clear(s, R_RETRY);
  return t;
}

/** Records (or, for late inputs, updates) the turn's watch number in the trend, and judges it. */
function recordTurn(s: HygieneState, t: Turn, at: number, k: HygieneOptions): void {
  const { calls, tokens } = turnNumbers(t);
  if (calls === 0) return;
  const per = Math.round(tokens / calls);
  if (t.recorded) {
    const e = s.trend[s.trend.length - 1];
    if (e.calls === calls && e.per_call === per) return;
    e.at = at;
    e.calls = calls;
    e.per_call = per;
  } else {
    t.recorded = true;
    s.turns++;
    s.trend.push({ at, calls, per_call: per });
    if (s.trend.length > k.trend_turns) s.trend.shift();
  }
  const level: HygieneLevel | null = per >= k.per_call_retire ? 'critical' : per >= k.per_call_warn ? 'warning' : null;
  if (level === null) clear(s, R_WATCH);
  else {
    const what =
      level === 'critical'
        ? `>= ${tok(k.per_call_retire)}: retire this session; the next question goes to a fresh one`
        : `>= ${tok(k.per_call_warn)}: finish the current question, start no new work here`;
    set(
      s,
      R_WATCH,
      level,
      at,
      `watch number ${tok(per)} prompt tokens per call over the last turn (${calls} calls) ${what}`,
    );
  }
}

// ---------------------------------------------------------------------------
// rules

/** After any call that reported its prompt size: the envelope and the image tell. */
function afterCall(
  s: HygieneState,
  p: number,
  model: string | undefined,
  at: number,
  k: HygieneOptions,
  envelope: ModelEnvelope | null | undefined,
): void {
  if (p < k.image_context_tokens) clear(s, R_IMAGE);
  // no envelope given: the caller keeps none, leave the finding as it is
  if (envelope === undefined || model === undefined) return;
  if (aboveEnvelope(envelope, p, k)) {
    if (s.findings[R_ENVELOPE] === null && envelope !== null) {
      set(
        s,
        R_ENVELOPE,
        'warning',
        at,
        `prompt ${tok(p)} on ${model} is above its effective envelope: largest clean prompt ${tok(envelope.largest_clean)} of ${envelope.clean_calls} clean calls${nominal(model, k)}`,
      );
    }
  } else clear(s, R_ENVELOPE);
}

const nominal = (model: string, k: HygieneOptions): string =>
  Object.hasOwn(k.nominal_context, model) ? ` (nominal window ${tok(k.nominal_context[model])})` : '';

/** The fire alarm: the first empty generation of a turn is critical at once; later ones add nothing. */
function emptyGeneration(s: HygieneState, t: Turn, p: number, at: number): void {
  t.empty++;
  if (t.empty > 1 || s.findings[R_EMPTY] !== null) return;
  set(
    s,
    R_EMPTY,
    'critical',
    at,
    `empty generation: a completed call returned no text and no tool call${p > 0 ? ` at ${tok(p)} prompt tokens` : ''}; abort the dispatch and re-ask in a fresh session: retries re-send the same prefix and buy nothing`,
  );
}

/** Visible output in a turn that had no empty generation: the alarm of an earlier turn is over. */
function visible(s: HygieneState, t: Turn): void {
  t.visible = true;
  if (t.empty === 0) clear(s, R_EMPTY);
}

function checkRetries(s: HygieneState, t: Turn, at: number, k: HygieneOptions): void {
  const n = retriesOf(t);
  if (n < k.retry_warn || s.findings[R_RETRY] !== null) return;
  set(
    s,
    R_RETRY,
    'warning',
    at,
    `${n} retries of one turn (>= ${k.retry_warn})${s.last_prompt_tokens > 0 ? `, each re-sending ${tok(s.last_prompt_tokens)} prompt tokens` : ''}: the retry ladder turns a short loss into a long one`,
  );
}

/** Model-side work at or after the pending resume: the restore is over. */
function firstToken(s: HygieneState, at: number): void {
  if (s.resume_at !== null && at >= s.resume_at) {
    s.resume_at = null;
    clear(s, R_RESTORE_STALL);
  }
}

/**
 * The restore stall, from the cheapest conclusive signal: a live process whose session
 * has no model-side write since the resume began, read after the resume and recently,
 * once first_token_timeout has passed. A process cannot be mid-turn on a session whose
 * newest write predates the turn.
 */
function checkRestore(s: HygieneState, now: number, k: HygieneOptions): void {
  const at = s.resume_at;
  const st = s.stats;
  if (at === null || s.findings[R_RESTORE_STALL] !== null || st === null) return;
  if (now - at < k.first_token_timeout || !st.live || st.updated_at === null) return;
  if (st.at < at || now - st.at > k.first_token_timeout || st.updated_at >= at) return;
  set(
    s,
    R_RESTORE_STALL,
    'critical',
    now,
    `stalled on restore: resumed ${span(now - at)} ago, no first token, newest write ${span(at - st.updated_at)} before the resume, process alive: abort and open fresh; waiting buys nothing`,
  );
}

function checkResumes(s: HygieneState, now: number, k: HygieneOptions): void {
  const xs = s.resumes;
  // resume_info resumes within the window <=> the resume_info-th latest one is inside it
  const kth = xs.length >= k.resume_info ? xs[xs.length - k.resume_info] : Number.NEGATIVE_INFINITY;
  if (kth <= now - k.resume_window) clear(s, R_RESUMES);
  else if (s.findings[R_RESUMES] === null) {
    const n = resumesWithin(s, now, k.resume_window);
    set(
      s,
      R_RESUMES,
      'info',
      now,
      `${n} resumes in ${span(k.resume_window)} (>= ${k.resume_info}): each restores the whole history and pays its prefix again; prefer a fresh session per question`,
    );
  }
}

// ---------------------------------------------------------------------------
// findings and the verdict

function set(s: HygieneState, i: number, level: HygieneLevel, at: number, reason: string): void {
  const f = s.findings[i];
  if (f !== null && f.level === level) f.reason = line(reason);
  else s.findings[i] = { level, since: at, reason: line(reason) };
}

function clear(s: HygieneState, i: number): void {
  if (s.findings[i] !== null) s.findings[i] = null;
}

/** The finding that decides the verdict: highest level, then rule order. -1: none. */
export function topFinding(s: HygieneState): number {
  let best = -1;
  let rank = 0;
  for (let i = 0; i < s.findings.length; i++) {
    const f = s.findings[i];
    if (f === null) continue;
    const r = levelRank(f.level);
    if (r > rank) {
      best = i;
      rank = r;
    }
  }
  return best;
}

export function actionOf(rule: HygieneRule | null, level: HygieneLevel): HygieneAction {
  switch (rule) {
    case 'restore_stall':
      return 'abort_and_fresh';
    case 'empty_generation':
      return 'abort_dispatch';
    case 'watch_number':
      return level === 'critical' ? 'retire' : 'finish_question';
    case 'message_ceiling':
    case 'bytes_ceiling':
      return 'finish_question';
    default:
      return 'none';
  }
}

/** Time rules, then the verdict: a change when the top finding moved. */
function settle(s: HygieneState, now: number, k: HygieneOptions): readonly HygieneChange[] {
  checkRestore(s, now, k);
  checkResumes(s, now, k);
  const top = topFinding(s);
  const f = top < 0 ? null : s.findings[top];
  const level: HygieneLevel = f === null ? 'ok' : f.level;
  const rule: HygieneRule | null = f === null ? null : HYGIENE_RULES[top];
  if (level === s.level && rule === s.rule) return NO_CHANGES;
  const change: HygieneChange = {
    session_id: s.session_id,
    at: now,
    from: s.level,
    to: level,
    from_rule: s.rule,
    rule,
    action: actionOf(rule, level),
    reason: f === null ? `ok: ${s.rule ?? 'nothing'} cleared` : f.reason,
  };
  if (s.model !== null) change.model = s.model;
  if (f !== null && (rule === 'restore_stall' || (rule === 'watch_number' && level === 'critical'))) {
    change.brief = buildBrief(s, f.reason, now, k);
  }
  s.level = level;
  s.rule = rule;
  return [change];
}

// ---------------------------------------------------------------------------
// re-read dedupe

/** FNV-1a, 32 bits: a collision among 32 recent ids is negligible, and the state stays small. */
function hash(id: string): number {
  // ids differ in their tails (a counter or random suffix): 24 characters and the length suffice
  let h = Math.imul(0x811c9dc5 ^ id.length, 0x01000193);
  for (let i = Math.max(0, id.length - 24); i < id.length; i++) h = Math.imul(h ^ id.charCodeAt(i), 0x01000193);
  return h >>> 0;
}

/** True when the id was seen among the latest SEEN_KEPT; records it otherwise. */
function seen(s: HygieneState, id: string): boolean {
  const h = hash(id);
  const xs = s.seen;
  for (let i = 0; i < xs.length; i++) if (xs[i] === h) return true;
  if (xs.length < SEEN_KEPT) xs.push(h);
  else {
    xs[s.seen_at] = h;
    s.seen_at = (s.seen_at + 1) % SEEN_KEPT;
  }
  return false;
}
