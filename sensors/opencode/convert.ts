import type {
  AssistantEvent,
  MarkerEvent,
  ProgressEvent,
  RequestRecord,
  RetryEvent,
  ToolEvent,
} from '../../core/wire.ts';
import { judgeLanded, type LandedTracker, newLandedTracker } from '../shared/landed.ts';
import { normalizeCall, resultFingerprint, textFingerprint } from '../shared/normalize.ts';

// Converters from opencode 1.18 shapes (verified against a real 1.18.33, see
// docs/opencode.md and test/fixtures/opencode-export/) to
// progress events and request records. Pure: no I/O, no clock (the caller passes
// `ts` where opencode gives none). Nothing of the call's content survives: arguments
// are reduced to a fingerprint and a coarse target, outputs to an exit code, a landed
// flag and a result fingerprint (sensors/shared/normalize.ts `resultFingerprint`), an
// assistant step's text to a text fingerprint.
//
// landed (deliberately narrow, docs/detection.md):
// - edit / write / patch with a non-empty `metadata.diff`, or `metadata.filediff` with
//   additions + deletions > 0. opencode 1.18's `write` reports no diff at all
//   (`metadata: {diagnostics, filepath, exists}`), so a completed write without a
//   `diff` key counts as landed: it changed or created a file.
// - bash `git commit` (or `--amend`, not `--dry-run`) with exit 0.
// - a test or lint command (TEST_COMMAND, sensors/shared/normalize.ts) that exits 0
//   after the session's previous run of the same fingerprint failed: a fix landed.
// Reads, greps, todo writes, task dispatches and passing-again tests are not progress.

/** Where a shape did not match: `field` is a dotted path inside the converted object. */
export class ShapeError extends Error {
  constructor(
    readonly field: string,
    message: string,
  ) {
    super(`${field}: ${message}`);
    this.name = 'ShapeError';
  }
}

// ---------------------------------------------------------------------------
// opencode shapes (only the fields read here; everything else is ignored)

export interface OcToolState {
  status: string;
  input?: unknown;
  /** completed: what the tool returned to the model (hashed into result_fingerprint, never kept) */
  output?: unknown;
  error?: unknown;
  metadata?: Record<string, unknown>;
  time?: { start?: number; end?: number };
}
export interface OcToolPart {
  type: 'tool';
  sessionID?: string;
  messageID?: string;
  callID: string;
  tool: string;
  state: OcToolState;
}
export interface OcTextPart {
  type: 'text';
  text?: string;
  synthetic?: boolean;
  metadata?: Record<string, unknown>;
}
export type OcPart = OcToolPart | OcTextPart | { type: string; [k: string]: unknown };

export interface OcMessageInfo {
  id: string;
  sessionID: string;
  role: string;
  time?: { created?: number; completed?: number };
  agent?: string;
  mode?: string;
  modelID?: string;
  providerID?: string;
  path?: { cwd?: string; root?: string };
  cost?: number;
  tokens?: { input?: number; output?: number; reasoning?: number; cache?: { read?: number; write?: number } };
  summary?: unknown;
  finish?: string;
  error?: { name?: unknown; data?: { statusCode?: unknown } };
}
export interface OcMessage {
  info: OcMessageInfo;
  parts: OcPart[];
}
export interface OcSession {
  id: string;
  parentID?: string | null;
  agent?: string;
  directory?: string;
  time?: { created?: number; updated?: number };
}

/** What the caller knows about the session a call belongs to. */
export interface SessionContext {
  session_id: string;
  parent_session_id?: string | null;
  agent?: string;
  /** Working directory: paths under it become relative (same fingerprint from plugin and watchdog). */
  cwd?: string;
}

// ---------------------------------------------------------------------------
// landed tracker

// The landed rules are every sensor's (sensors/shared/landed.ts); re-exported for the
// plugin, the watchdog and their tests.
export {
  type CallOutcome,
  judgeLanded,
  LANDED_TRACKER_MAX,
  type LandedTracker,
  newLandedTracker,
} from '../shared/landed.ts';

// ---------------------------------------------------------------------------
// tool calls

function exitOf(tool: string, status: string, metadata: Record<string, unknown> | undefined): number | null {
  if (status === 'error' || tool === 'invalid') return 1; // a thrown tool, or a call to a tool that does not exist
  if (tool === 'bash' || tool === 'shell') {
    const e = metadata?.exit;
    return typeof e === 'number' && Number.isInteger(e) ? e : null; // null: aborted, or not reported
  }
  return 0;
}

function toolEvent(
  ctx: SessionContext,
  tool: string,
  callID: string,
  args: unknown,
  status: string,
  metadata: Record<string, unknown> | undefined,
  ts: number,
  tr: LandedTracker,
  output: unknown,
): { event: ToolEvent; tracker: LandedTracker } {
  const facts = normalizeCall(tool, args, { cwd: ctx.cwd });
  const exit = exitOf(tool, status, metadata);
  const { landed, tracker } = judgeLanded(tr, { tool, status, exit, metadata, facts });
  // what the model was shown: the output of a call that returned, the error of one that threw
  const result = typeof output === 'string' ? resultFingerprint(exit, output) : undefined;
  const event: ToolEvent = {
    kind: 'tool',
    session_id: ctx.session_id,
    ...(ctx.parent_session_id ? { parent_session_id: ctx.parent_session_id } : {}),
    ...(ctx.agent ? { agent: cleanAgent(ctx.agent) } : {}),
    tool,
    call_id: callID,
    fingerprint: facts.fingerprint,
    target: facts.target,
    exit,
    landed,
    ...(result !== undefined ? { result_fingerprint: result } : {}),
    ts,
  };
  return { event, tracker };
}

/** Agent names reach reports: printable ASCII, at most 64 chars. */
export function cleanAgent(a: string): string {
  const s = a.replace(/[^\x20-\x7e]/g, '?').trim();
  return s.length > 64 ? s.slice(0, 64) : s || '?';
}

function need<T>(v: unknown, field: string, type: 'string' | 'object', what?: string): T {
  if (type === 'object' ? v === null || typeof v !== 'object' || Array.isArray(v) : typeof v !== type) {
    throw new ShapeError(
      field,
      `expected ${what ?? type}, got ${v === null ? 'null' : Array.isArray(v) ? 'array' : typeof v}`,
    );
  }
  return v as T;
}

/**
 * A tool part from `GET /session/{id}/message` (or the `part` of a `message.part.updated`
 * event). Returns null while the call is pending or running; `completed` and `error`
 * become an event (error -> exit 1, bash -> `metadata.exit`).
 */
export function toolPartToEvent(
  part: unknown,
  ctx: SessionContext,
  tr: LandedTracker,
  fallbackTs = 0,
): { event: ToolEvent; tracker: LandedTracker } | null {
  const p = need<OcToolPart>(part, 'part', 'object');
  const tool = need<string>(p.tool, 'tool', 'string');
  const callID = need<string>(p.callID, 'callID', 'string');
  const state = need<OcToolState>(p.state, 'state', 'object');
  const status = need<string>(state.status, 'state.status', 'string');
  if (status === 'pending' || status === 'running') return null;
  if (status !== 'completed' && status !== 'error') {
    throw new ShapeError('state.status', `unknown status ${JSON.stringify(status.slice(0, 32))}`);
  }
  const metadata = state.metadata && typeof state.metadata === 'object' ? state.metadata : undefined;
  const ts = num(state.time?.end) ?? num(state.time?.start) ?? fallbackTs;
  const output = status === 'completed' ? state.output : state.error;
  return toolEvent(ctx, tool, callID, state.input ?? {}, status, metadata, ts, tr, output);
}

/**
 * The plugin's `tool.execute.after` pair: input `{tool, sessionID, callID, args}`, output
 * `{title, output, metadata}`. The exit code is `output.metadata.exit` (there is no
 * `output.exitCode` in 1.18). The hook fires only for tools that returned; thrown tools
 * arrive through `fromPartUpdated`.
 */
export function afterHookToEvent(
  input: unknown,
  output: unknown,
  ctx: Omit<SessionContext, 'session_id'> & { ts: number },
  tr: LandedTracker,
): { event: ToolEvent; tracker: LandedTracker } {
  const i = need<{ tool: unknown; sessionID: unknown; callID: unknown; args?: unknown }>(input, 'input', 'object');
  const tool = need<string>(i.tool, 'input.tool', 'string');
  const session_id = need<string>(i.sessionID, 'input.sessionID', 'string');
  const callID = need<string>(i.callID, 'input.callID', 'string');
  const o =
    output === undefined || output === null
      ? {}
      : need<{ metadata?: unknown; output?: unknown }>(output, 'output', 'object');
  const md = o.metadata && typeof o.metadata === 'object' ? (o.metadata as Record<string, unknown>) : undefined;
  // `output.output` is what the part stores as `state.output`: the same result fingerprint as a history reader's
  return toolEvent({ ...ctx, session_id }, tool, callID, i.args ?? {}, 'completed', md, ctx.ts, tr, o.output);
}

/**
 * A bus event from the plugin's `event` hook or `GET /event`. Produces:
 * - a tool event for a tool part in `state.status: "error"` (tools that threw never
 *   reach `tool.execute.after`; completed parts are left to that hook, so nothing is
 *   counted twice);
 * - a continuation marker for the synthetic compaction "Continue..." text part
 *   (`chat.message` does not fire for it);
 * - a compaction_done marker for `session.compacted`.
 * Anything else returns null.
 */
export function fromBusEvent(
  ev: unknown,
  ctx: Omit<SessionContext, 'session_id'> & { ts: number },
  tr: LandedTracker,
): { event: ProgressEvent; tracker: LandedTracker } | null {
  const e = need<{ type?: unknown; properties?: unknown }>(ev, 'event', 'object');
  if (e.type === 'session.compacted') {
    const props = need<{ sessionID: unknown }>(e.properties, 'properties', 'object');
    const session_id = need<string>(props.sessionID, 'properties.sessionID', 'string');
    return { event: marker('compaction_done', { ...ctx, session_id }, ctx.ts), tracker: tr };
  }
  if (e.type !== 'message.part.updated') return null;
  const props = need<{ sessionID?: unknown; part: unknown }>(e.properties, 'properties', 'object');
  const part = need<OcPart & { sessionID?: unknown; messageID?: unknown }>(props.part, 'properties.part', 'object');
  const session_id = need<string>(part.sessionID ?? props.sessionID, 'properties.part.sessionID', 'string');
  if (part.type === 'tool') {
    const state = (part as OcToolPart).state;
    // Calls cut by an abort or a rejected permission (`interrupted`) already went through
    // tool.execute.after in every observed case: do not count them twice.
    if (state?.status !== 'error' || state.metadata?.interrupted === true) return null;
    return toolPartToEvent(part, { ...ctx, session_id }, tr, ctx.ts);
  }
  if (part.type === 'text' && isCompactionContinue(part as OcTextPart)) {
    const id = typeof part.messageID === 'string' ? part.messageID : undefined;
    return { event: marker('continuation', { ...ctx, session_id }, ctx.ts, id), tracker: tr };
  }
  return null;
}

// ---------------------------------------------------------------------------
// requests and markers

/**
 * An assistant message info -> the request it billed. request_id = message id, model =
 * `providerID/modelID`, prompt_tokens = tokens.input + tokens.cache.read, cached_tokens =
 * cache.read, cost_usd = cost. Null for user messages and for messages that billed
 * nothing (no tokens at all: aborted or failed before the provider answered).
 */
export function assistantToRequest(info: unknown, ctx: Partial<SessionContext> = {}): RequestRecord | null {
  const m = need<OcMessageInfo>(info, 'info', 'object');
  if (m.role !== 'assistant') return null;
  const id = need<string>(m.id, 'info.id', 'string');
  const session_id = ctx.session_id ?? need<string>(m.sessionID, 'info.sessionID', 'string');
  if (m.tokens === undefined || m.tokens === null) return null;
  const t = need<NonNullable<OcMessageInfo['tokens']>>(m.tokens, 'info.tokens', 'object');
  const input = int(t.input, 'info.tokens.input');
  const read = int(t.cache?.read, 'info.tokens.cache.read');
  if (input + read + int(t.output, 'info.tokens.output') === 0 && !(Number(m.cost) > 0)) return null;
  const provider = typeof m.providerID === 'string' ? m.providerID : 'unknown';
  const model = typeof m.modelID === 'string' ? m.modelID : 'unknown';
  const agent = ctx.agent ?? m.agent;
  return {
    session_id,
    ...(ctx.parent_session_id ? { parent_session_id: ctx.parent_session_id } : {}),
    ...(agent ? { agent: cleanAgent(agent) } : {}),
    request_id: id,
    model: `${provider}/${model}`.replace(/[^\x21-\x7e]/g, '?').slice(0, 200),
    prompt_tokens: input + read,
    cached_tokens: read,
    ...(typeof m.cost === 'number' && Number.isFinite(m.cost) && m.cost >= 0 ? { cost_usd: m.cost } : {}),
    ts: num(m.time?.created) ?? 0,
  };
}

function isCompactionContinue(p: OcTextPart): boolean {
  return p.synthetic === true && p.metadata?.compaction_continue === true;
}

// Exact "go on" prompts. A person typing one is also a continuation turn, and that is
// fine: "continuation turns keep arriving and nothing lands" is the signal either way.
const CONTINUE_TEXT = new Set(['continue', 'keep going', 'go on', 'proceed', 'resume', 'carry on', 'next']);
// A bracketed tag naming a continuation at the very start: how hook-injected turns
// (todo-continuation reminders) announce themselves. A heuristic: keep it narrow.
const INJECTED_TAG = /^\s*\[[^\]\n]{0,80}\bCONTINUATION\b[^\]\n]{0,80}\]/i;

/**
 * A user message that is a continuation turn rather than a new task, conservatively:
 * 1. a synthetic text part with `metadata.compaction_continue` (opencode's own
 *    "Continue if you have next steps..." after an auto compaction);
 * 2. every text part synthetic (injected by a hook, not typed), with no file, agent or
 *    subtask part and no compaction request;
 * 3. the whole text is a bare "continue" (or keep going, go on, proceed, resume), or
 *    starts with a bracketed "...CONTINUATION..." tag.
 * The first user message of a session is its task and never a continuation (the caller
 * passes `first`). The text is only compared here, never kept.
 */
export function isContinuationMessage(msg: OcMessage, first = false): boolean {
  if (first || msg.info.role !== 'user') return false;
  let texts = 0;
  let synthetic = 0;
  let joined = '';
  for (const p of msg.parts) {
    if (p.type === 'text') {
      const t = p as OcTextPart;
      if (isCompactionContinue(t)) return true;
      texts++;
      if (t.synthetic === true) synthetic++;
      else if (typeof t.text === 'string') joined += t.text;
    } else if (p.type !== 'step-start' && p.type !== 'step-finish') {
      return false; // file, agent, subtask, compaction: a real request
    }
  }
  if (texts === 0) return false;
  if (synthetic === texts) return true;
  const s = joined.trim();
  if (s.length > 200) return false;
  return CONTINUE_TEXT.has(s.toLowerCase().replace(/[.!\s]+$/, '')) || INJECTED_TAG.test(s);
}

/**
 * The visible text of a message's parts: its text parts, in order, without the synthetic
 * ones (injected by opencode or a hook) and without reasoning. Only hashed, never kept.
 */
export function assistantText(parts: readonly unknown[]): string {
  let s = '';
  for (const p of parts) {
    const t = p as OcTextPart | null;
    if (t?.type !== 'text' || t.synthetic === true || typeof t.text !== 'string') continue;
    s += s === '' ? t.text : `\n${t.text}`;
  }
  return s;
}

/**
 * The text fingerprint of a finished assistant step that made no tool call, else
 * undefined (a step still running, with an error, a compaction summary, or no text).
 */
export function textOnlyStep(info: OcMessageInfo, parts: readonly unknown[]): string | undefined {
  if (info.role !== 'assistant' || info.summary === true || info.error || num(info.time?.completed) === undefined) {
    return undefined;
  }
  for (const p of parts) if ((p as { type?: unknown } | null)?.type === 'tool') return undefined;
  return textFingerprint(assistantText(parts));
}

/** A compaction summary finished: an assistant message with `summary: true` (agent `compaction`). */
export function isCompactionDone(info: OcMessageInfo): boolean {
  return info.role === 'assistant' && info.summary === true && typeof info.time?.completed === 'number';
}

export function marker(
  kind: MarkerEvent['kind'],
  ctx: Omit<SessionContext, 'cwd'> & { cwd?: string },
  ts: number,
  callId?: string,
): MarkerEvent {
  return {
    kind,
    session_id: ctx.session_id,
    ...(ctx.parent_session_id ? { parent_session_id: ctx.parent_session_id } : {}),
    ...(ctx.agent ? { agent: cleanAgent(ctx.agent) } : {}),
    ...(callId ? { call_id: callId } : {}),
    landed: false,
    ts,
  };
}

// ---------------------------------------------------------------------------
// a whole session

export type ConvertedInput = { type: 'progress'; event: ProgressEvent } | { type: 'request'; record: RequestRecord };

export interface ConvertIssue {
  /** `message 3 part 2` */
  where: string;
  field: string;
  message: string;
}

/**
 * Where a session's conversion stands between two messages: all a message needs from the
 * ones before it (the landed rules' memory, and whether the task prompt was seen).
 */
export interface ConvertCursor {
  tracker: LandedTracker;
  seenUser: boolean;
}

export function newConvertCursor(): ConvertCursor {
  return { tracker: newLandedTracker(), seenUser: false };
}

/**
 * One session's `GET /session/{id}/message` list -> its inputs in order: per assistant
 * message the request record first (the LLM call came before its tools), then its
 * finished tool calls, then compaction_done for a summary; per user message a
 * continuation marker when it is one. A part that does not match the shape is skipped
 * and reported in `issues`; the rest goes on.
 */
export function sessionToInputs(
  session: OcSession,
  messages: readonly unknown[],
): { inputs: ConvertedInput[]; issues: ConvertIssue[] } {
  const inputs: ConvertedInput[] = [];
  const issues: ConvertIssue[] = [];
  let cur = newConvertCursor();
  messages.forEach((raw, mi) => {
    cur = messageToInputs(session, raw, mi, cur, inputs, issues);
  });
  return { inputs, issues };
}

/**
 * One message of a session, the `mi`-th (issues name it), converted from `cur` (the
 * cursor after the message before it): its inputs and issues are appended, the cursor
 * after it returned. Lets a reader that kept the earlier messages' inputs convert only
 * the messages that changed since.
 */
export function messageToInputs(
  session: OcSession,
  raw: unknown,
  mi: number,
  cur: ConvertCursor,
  inputs: ConvertedInput[],
  issues: ConvertIssue[],
): ConvertCursor {
  const base = {
    session_id: session.id,
    parent_session_id: session.parentID ?? null,
    agent: session.agent,
  };
  let msg: OcMessage;
  let info: OcMessageInfo;
  try {
    msg = need<OcMessage>(raw, 'message', 'object');
    info = need<OcMessageInfo>(msg.info, 'info', 'object');
    need<string>(info.role, 'info.role', 'string');
    if (!Array.isArray(msg.parts)) throw new ShapeError('parts', 'expected array');
  } catch (e) {
    issues.push(issue(`message ${mi}`, e));
    return cur;
  }
  const created = num(info.time?.created) ?? 0;
  if (info.role === 'user') {
    if (isContinuationMessage(msg, !cur.seenUser)) {
      inputs.push({ type: 'progress', event: marker('continuation', base, created, str(info.id)) });
    }
    return cur.seenUser ? cur : { tracker: cur.tracker, seenUser: true };
  }
  if (info.role !== 'assistant') return cur;
  let tr = cur.tracker;
  const agent = base.agent ?? info.agent;
  const ctx: SessionContext = { ...base, agent, cwd: info.path?.cwd ?? session.directory };
  try {
    const rec = assistantToRequest(info, ctx);
    if (rec) inputs.push({ type: 'request', record: rec });
  } catch (e) {
    issues.push(issue(`message ${mi}`, e));
  }
  msg.parts.forEach((part, pi) => {
    if (part === null || typeof part !== 'object' || (part as OcPart).type !== 'tool') return;
    try {
      const r = toolPartToEvent(part, ctx, tr, created);
      if (r) {
        tr = r.tracker;
        inputs.push({ type: 'progress', event: r.event });
      }
    } catch (e) {
      issues.push(issue(`message ${mi} part ${pi}`, e));
    }
  });
  // A step that only talked (no tool call): its text fingerprint, for the monologue rule.
  // Steps with tool calls are left out: their tool events already break a monologue.
  const step = textOnlyStep(info, msg.parts);
  if (step !== undefined) {
    try {
      const ev = assistantEvent(info, ctx, true, step);
      if (ev) inputs.push({ type: 'progress', event: ev });
    } catch (e) {
      issues.push(issue(`message ${mi}`, e));
    }
  }
  if (isCompactionDone(info)) {
    inputs.push({
      type: 'progress',
      event: marker('compaction_done', ctx, num(info.time?.completed) ?? created, str(info.id)),
    });
  }
  return tr === cur.tracker ? cur : { tracker: tr, seenUser: cur.seenUser };
}

function issue(where: string, e: unknown): ConvertIssue {
  if (e instanceof ShapeError) return { where, field: e.field, message: e.message.slice(e.field.length + 2) };
  return { where, field: '?', message: e instanceof Error ? e.message : String(e) };
}

const num = (v: unknown): number | undefined => (typeof v === 'number' && Number.isFinite(v) ? v : undefined);
const str = (v: unknown): string | undefined => (typeof v === 'string' ? v : undefined);

function int(v: unknown, field: string): number {
  if (v === undefined || v === null) return 0;
  if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) throw new ShapeError(field, 'expected a count >= 0');
  return Math.round(v);
}

// ---------------------------------------------------------------------------
// session hygiene: sizes, counts, times and codes of a session's model calls

/** A machine code as the wire takes it (core/wire.ts CodeSchema), else undefined: never a sentence. */
export function codeOf(v: unknown): string | undefined {
  if (typeof v === 'number' && Number.isInteger(v)) v = String(v);
  return typeof v === 'string' && /^[A-Za-z0-9_.:/-]{1,64}$/.test(v) ? v : undefined;
}

/**
 * A finished assistant message (one model step: `time.completed` or an `error`) -> an
 * `assistant` event: its token counts, `finish`, the error's name and provider status
 * code (never `error.data.message` or the response body), and whether it produced
 * visible output. `visible` is what the caller saw of its parts (text with content or a
 * tool call); a `tool-calls` finish is a tool call. `textFp`: the step's text
 * fingerprint (normalize.ts `textFingerprint` of `assistantText`), if it said anything.
 * Null while the message is running.
 */
export function assistantEvent(
  info: unknown,
  ctx: Omit<SessionContext, 'cwd' | 'session_id'> & { session_id?: string; ts?: number },
  visible: boolean,
  textFp?: string,
): AssistantEvent | null {
  const m = need<OcMessageInfo>(info, 'info', 'object');
  if (m.role !== 'assistant') return null;
  const id = need<string>(m.id, 'info.id', 'string');
  const session_id = ctx.session_id ?? need<string>(m.sessionID, 'info.sessionID', 'string');
  const completed = num(m.time?.completed);
  const err = m.error && typeof m.error === 'object' ? m.error : undefined;
  if (completed === undefined && err === undefined) return null;
  const t = m.tokens && typeof m.tokens === 'object' ? m.tokens : {};
  const finish = codeOf(m.finish);
  const errorName = err ? (codeOf(err.name) ?? 'UnknownError') : undefined;
  const errorCode = err ? codeOf(err.data?.statusCode) : undefined;
  const model =
    typeof m.providerID === 'string' && typeof m.modelID === 'string'
      ? `${m.providerID}/${m.modelID}`.replace(/[^\x21-\x7e]/g, '?').slice(0, 200)
      : undefined;
  return {
    kind: 'assistant',
    session_id,
    ...(ctx.parent_session_id ? { parent_session_id: ctx.parent_session_id } : {}),
    ...(ctx.agent ? { agent: cleanAgent(ctx.agent) } : {}),
    call_id: id,
    ...(model ? { model } : {}),
    input_tokens: int(t.input, 'info.tokens.input'),
    output_tokens: int(t.output, 'info.tokens.output'),
    reasoning_tokens: int(t.reasoning, 'info.tokens.reasoning'),
    cache_read_tokens: int(t.cache?.read, 'info.tokens.cache.read'),
    cache_write_tokens: int(t.cache?.write, 'info.tokens.cache.write'),
    ...(finish ? { finish } : {}),
    ...(errorName ? { error_name: errorName } : {}),
    ...(errorCode ? { error_code: errorCode } : {}),
    visible_output: err === undefined && (visible || finish === 'tool-calls'),
    ...(m.summary === true ? { summary: true } : {}),
    ...(textFp !== undefined && m.summary !== true ? { text_fingerprint: textFp } : {}),
    ts: completed ?? ctx.ts ?? num(m.time?.created) ?? 0,
  };
}

/** A part that shows the model produced something: text with content, reasoning, a tool call. */
export function isOutputPart(part: unknown): boolean {
  const p = part as { type?: unknown; text?: unknown; synthetic?: unknown } | null;
  if (!p || typeof p !== 'object') return false;
  if (p.type === 'tool') return true;
  if (p.type === 'text') return p.synthetic !== true && typeof p.text === 'string' && p.text.trim().length > 0;
  if (p.type === 'reasoning') return typeof p.text === 'string' && p.text.length > 0;
  return false;
}

/** Visible output (what an empty generation lacks): text with content or a tool call; reasoning alone is not. */
export function isVisiblePart(part: unknown): boolean {
  return isOutputPart(part) && (part as { type?: unknown }).type !== 'reasoning';
}

/** opencode `session.status` `{type: "retry", attempt, next}` -> a `retry` event (never its `message`). */
export function retryEvent(status: unknown, ctx: Omit<SessionContext, 'cwd'>, ts: number): RetryEvent | null {
  const s = status as { type?: unknown; attempt?: unknown; next?: unknown } | null;
  if (s?.type !== 'retry') return null;
  const attempt = typeof s.attempt === 'number' && Number.isInteger(s.attempt) && s.attempt >= 1 ? s.attempt : 1;
  const next = num(s.next);
  return {
    kind: 'retry',
    session_id: ctx.session_id,
    ...(ctx.parent_session_id ? { parent_session_id: ctx.parent_session_id } : {}),
    ...(ctx.agent ? { agent: cleanAgent(ctx.agent) } : {}),
    attempt: Math.min(attempt, 1_000_000),
    ...(next !== undefined && next >= 0 ? { next: Math.round(next) } : {}),
    ts,
  };
}

/**
 * The size of an image a `file` part (or a tool result's attachment) carries: the
 * decoded bytes of its data URL. Undefined for anything else, or a file by reference
 * (its size is not in the part). Only the URL's length is read, never its content.
 */
export function imageBytes(part: unknown): number | undefined {
  const p = part as { type?: unknown; mime?: unknown; url?: unknown } | null;
  if (!p || typeof p !== 'object' || p.type !== 'file') return undefined;
  if (typeof p.mime !== 'string' || !p.mime.startsWith('image/') || typeof p.url !== 'string') return undefined;
  if (!p.url.startsWith('data:')) return undefined;
  const comma = p.url.indexOf(',');
  if (comma < 0) return undefined;
  const len = p.url.length - comma - 1;
  if (!p.url.slice(0, comma).endsWith(';base64')) return len;
  const pad = p.url.endsWith('==') ? 2 : p.url.endsWith('=') ? 1 : 0;
  return Math.max(0, Math.floor((len * 3) / 4) - pad);
}

/** A session's bulk as one `GET /session/{id}/message` list shows it. */
export interface SessionBulk {
  messages: number;
  /** Bytes of the messages and parts as opencode serves them (UTF-8 JSON). */
  stored_bytes: number;
  /** The same since the latest compaction summary: what the model is sent (null: not measured). */
  history_bytes: number | null;
  /** The newest model-side write: a finished assistant message, or an output part of a running one. Null: none. */
  updated_at: number | null;
}

/** Counts and sizes only: the messages are measured, nothing of them is kept. */
export function sessionBulk(messages: readonly unknown[]): SessionBulk {
  let stored = 0;
  let history = 0;
  let updated: number | null = null;
  const later = (t: number | undefined) => {
    if (t !== undefined && (updated === null || t > updated)) updated = t;
  };
  for (const raw of messages) {
    const size = Buffer.byteLength(JSON.stringify(raw) ?? '', 'utf8');
    stored += size;
    history += size;
    const m = raw as { info?: OcMessageInfo; parts?: unknown[] } | null;
    const info = m?.info;
    if (info?.role !== 'assistant') continue;
    if (info.summary === true) history = size;
    const done = num(info.time?.completed);
    if (done !== undefined) {
      later(done);
      continue;
    }
    for (const p of Array.isArray(m?.parts) ? m.parts : []) {
      if (!isOutputPart(p)) continue;
      const pt = p as {
        time?: { start?: unknown; end?: unknown };
        state?: { time?: { start?: unknown; end?: unknown } };
      };
      later(num(pt.time?.end) ?? num(pt.time?.start) ?? num(pt.state?.time?.end) ?? num(pt.state?.time?.start));
    }
  }
  return { messages: messages.length, stored_bytes: stored, history_bytes: history, updated_at: updated };
}
