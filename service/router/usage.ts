import { randomUUID } from 'node:crypto';
import { StringDecoder } from 'node:string_decoder';
import type { GateQuery, RequestRecord } from '../../core/wire.ts';

// What a model answer says about its cost, read from the wire shapes routers carry:
// OpenAI chat completions, OpenAI Responses (what Codex calls) and Anthropic messages,
// as one JSON body or as an SSE stream.
// Sizes, counts, ids and codes only: no message text is kept (a delta is looked at
// only to learn whether anything visible came back).

/** The usage a price is computed from, whatever the upstream's shape. */
export interface Usage {
  /** Every prompt token, cached ones included. */
  prompt_tokens: number;
  completion_tokens: number;
  cached_tokens: number;
  /** The upstream's own usage object, as it came. */
  raw: Record<string, unknown>;
}

/** Price of an answer in USD when the upstream does not say (`usage.cost`). */
export type CostOf = (model: string, usage: Usage) => number | undefined;

/** The facts gathered from an answer, JSON or streamed. */
export interface AnswerFacts {
  id?: string;
  model?: string;
  usage?: Usage;
  /** `usage.cost` as the upstream reported it (OpenRouter does). */
  cost?: number;
  finish_reason?: string;
  /** Whether any text or tool call came back; undefined when no choice or content was seen. */
  visible?: boolean;
  error_code?: string;
  error_type?: string;
}

const ID = /^[\x21-\x7e]{1,200}$/;
const CODE = /^[A-Za-z0-9_.:/-]{1,64}$/;
const code = (v: unknown) =>
  typeof v === 'string' && CODE.test(v) ? v : typeof v === 'number' ? String(v) : undefined;
const int = (v: unknown) => (typeof v === 'number' && Number.isFinite(v) ? Math.max(0, Math.floor(v)) : 0);
const isObj = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const nonBlank = (v: unknown) => typeof v === 'string' && v.trim() !== '';

/**
 * Folds one JSON object of an answer into the facts: a whole OpenAI completion or one
 * of its stream chunks, a whole Anthropic message or one of its stream events, or an
 * error body. Later values win (the last chunk carries the usage).
 */
export function absorb(f: AnswerFacts, o: unknown): void {
  if (!isObj(o)) return;
  const type = o.type;
  if (o.object === 'response' || (typeof type === 'string' && type.startsWith('response.'))) {
    responsesEvent(f, o);
    return;
  }
  // Anthropic stream events wrap the message (message_start) or carry a delta.
  if (type === 'message_start' && isObj(o.message)) {
    absorb(f, o.message);
    return;
  }
  if (type === 'message_delta') {
    const d = o.delta;
    if (isObj(d) && code(d.stop_reason)) f.finish_reason = code(d.stop_reason);
    if (isObj(o.usage)) anthropicUsage(f, o.usage, true);
    return;
  }
  if (type === 'content_block_start') {
    const b = o.content_block;
    if (isObj(b) && (b.type === 'tool_use' || nonBlank(b.text))) f.visible = true;
    else f.visible ??= false;
    return;
  }
  if (type === 'content_block_delta') {
    const d = o.delta;
    if (isObj(d) && (nonBlank(d.text) || nonBlank(d.partial_json))) f.visible = true;
    return;
  }
  if (isObj(o.error)) {
    f.error_code = code(o.error.code) ?? f.error_code;
    f.error_type = code(o.error.type) ?? f.error_type;
    return;
  }
  if (typeof o.id === 'string' && ID.test(o.id)) f.id = o.id;
  if (typeof o.model === 'string' && ID.test(o.model)) f.model = o.model;
  // An Anthropic message: content blocks, stop_reason, input/output tokens.
  if (type === 'message') {
    if (code(o.stop_reason)) f.finish_reason = code(o.stop_reason);
    if (Array.isArray(o.content)) {
      f.visible = o.content.some((b) => isObj(b) && (b.type === 'tool_use' || nonBlank(b.text)));
    }
    if (isObj(o.usage)) anthropicUsage(f, o.usage, false);
    return;
  }
  // OpenAI: a completion (choices[].message) or a chunk (choices[].delta).
  if (Array.isArray(o.choices)) {
    const c = o.choices[0];
    if (isObj(c)) {
      if (code(c.finish_reason)) f.finish_reason = code(c.finish_reason);
      const m = isObj(c.message) ? c.message : isObj(c.delta) ? c.delta : undefined;
      if (m) {
        const tools = m.tool_calls;
        const seen = nonBlank(m.content) || (Array.isArray(tools) && tools.length > 0);
        // Visible once any text or tool call came; an answer with none is an empty generation.
        if (seen) f.visible = true;
        else f.visible ??= false;
      }
    }
  }
  const u = o.usage;
  if (isObj(u) && typeof u.prompt_tokens === 'number') {
    const details = u.prompt_tokens_details;
    f.usage = {
      prompt_tokens: int(u.prompt_tokens),
      completion_tokens: int(u.completion_tokens),
      cached_tokens: isObj(details) ? int(details.cached_tokens) : 0,
      raw: u,
    };
    if (typeof u.cost === 'number' && Number.isFinite(u.cost) && u.cost >= 0) f.cost = u.cost;
  }
}

const CALL_ITEM = new Set(['function_call', 'custom_tool_call', 'local_shell_call', 'mcp_call']);

/**
 * An OpenAI Responses API answer: the response object itself (a JSON answer), or one of
 * its stream events. `response.created` and the final `response.completed` /
 * `.incomplete` / `.failed` carry the response (the last one its usage and every
 * output item); the item and delta events in between only tell whether anything
 * visible came back.
 */
function responsesEvent(f: AnswerFacts, o: Record<string, unknown>): void {
  const type = o.type;
  if (o.object !== 'response') {
    if (isObj(o.response)) responsesEvent(f, o.response);
    else if (type === 'response.output_item.added' || type === 'response.output_item.done') {
      if (isObj(o.item) && CALL_ITEM.has(String(o.item.type))) f.visible = true;
      else f.visible ??= false;
    } else if (typeof type === 'string' && type.endsWith('.delta') && nonBlank(o.delta)) f.visible = true;
    return;
  }
  if (typeof o.id === 'string' && ID.test(o.id)) f.id = o.id;
  if (typeof o.model === 'string' && ID.test(o.model)) f.model = o.model;
  if (Array.isArray(o.output) && o.output.length) {
    const items = o.output.filter(isObj);
    const called = items.some((i) => CALL_ITEM.has(String(i.type)));
    const said = items.some(
      (i) =>
        i.type === 'message' &&
        Array.isArray(i.content) &&
        i.content.some((c) => isObj(c) && (nonBlank(c.text) || nonBlank(c.refusal))),
    );
    f.visible = called || said || f.visible === true;
    if (o.status === 'completed') f.finish_reason = called ? 'tool_calls' : 'stop';
  }
  if (o.status === 'incomplete' && isObj(o.incomplete_details))
    f.finish_reason = code(o.incomplete_details.reason) ?? f.finish_reason;
  if (isObj(o.error)) {
    f.error_code = code(o.error.code) ?? f.error_code;
    f.error_type = code(o.error.type) ?? f.error_type;
  }
  const u = o.usage;
  if (isObj(u) && typeof u.input_tokens === 'number') {
    const details = u.input_tokens_details;
    f.usage = {
      // input_tokens counts the cached ones too
      prompt_tokens: int(u.input_tokens),
      completion_tokens: int(u.output_tokens),
      cached_tokens: isObj(details) ? int(details.cached_tokens) : 0,
      raw: u,
    };
  }
}

/**
 * Anthropic counts cached prompt tokens apart: the prompt is input + cache reads + cache
 * writes. message_start carries the input side, message_delta the final output count
 * (and, in newer API versions, the input side again).
 */
function anthropicUsage(f: AnswerFacts, u: Record<string, unknown>, delta: boolean): void {
  const prev = f.usage;
  const has = (k: string) => typeof u[k] === 'number';
  const inputSide = has('input_tokens') || has('cache_read_input_tokens') || has('cache_creation_input_tokens');
  const cached = inputSide ? int(u.cache_read_input_tokens) : (prev?.cached_tokens ?? 0);
  const prompt = inputSide
    ? int(u.input_tokens) + cached + int(u.cache_creation_input_tokens)
    : (prev?.prompt_tokens ?? 0);
  if (!inputSide && !prev && !delta) return;
  f.usage = {
    prompt_tokens: prompt,
    completion_tokens: has('output_tokens') ? int(u.output_tokens) : (prev?.completion_tokens ?? 0),
    cached_tokens: cached,
    raw: prev && delta ? { ...prev.raw, ...u } : u,
  };
}

/** The facts of a whole JSON answer; undefined when it is not JSON. */
export function jsonFacts(text: string): AnswerFacts | undefined {
  if (text.trimStart()[0] !== '{') return undefined;
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return undefined;
  }
  const f: AnswerFacts = {};
  absorb(f, parsed);
  return f;
}

// What in a stream can change the facts: one native regex scan over each chunk's whole
// lines finds them, and only the lines it finds are cut out and parsed. Text deltas
// (the bulk of a stream) are looked at only until something visible came.
const MEANINGFUL =
  /"usage"|"finish_reason":"|"stop_reason"|"message_start"|"content_block_start"|"error"|"tool_calls"|"response\.(?:created|completed|incomplete|failed)"/g;
const MEANINGFUL_OR_CONTENT = new RegExp(
  `${MEANINGFUL.source}|"(?:content|text|partial_json|delta)":"|"response\\.output_item\\.added"`,
  'g',
);
/** A line longer than this is passed through unread (no usage chunk is that long). */
const MAX_LINE = 1 << 20; // 1 MiB
/**
 * Once the answer is known to be visible, only about the stream's last this-many
 * characters are kept and read at its end: what is left to learn (finish reason, usage,
 * Anthropic's message_delta) comes in the last events.
 */
const TAIL = 16 * 1024;

/**
 * Reads an SSE stream's `data:` lines as they pass, without holding the stream: its
 * first lines until something visible came (the id, the model, Anthropic's
 * message_start, whether anything visible came back), then only a bounded tail, read
 * when the stream ends. Between chunks only the unfinished last line (or the tail) is
 * kept.
 */
export class SseReader {
  readonly facts: AnswerFacts = {};
  private readonly decoder = new StringDecoder('utf8');
  private partial = '';
  private first = true;
  private skipping = false;
  /**
   * Tail mode: the latest decoded chunks, at least TAIL characters when there are that
   * many, from the start of the line those begin in (a Responses stream's last event
   * holds the whole response, often longer than TAIL), up to MAX_LINE more.
   */
  private tail: string[] | undefined;
  /** Per tail chunk: where its first newline is (-1: none). */
  private tailNl: number[] = [];
  private tailLength = 0;
  private trimmed = false;

  push(chunk: Buffer | string): void {
    const fresh = typeof chunk === 'string' ? chunk : this.decoder.write(chunk);
    if (this.tail !== undefined) {
      this.tail.push(fresh);
      this.tailNl.push(fresh.indexOf('\n'));
      this.tailLength += fresh.length;
      while (this.tail.length > 1 && this.canDropOldest()) {
        this.tailLength -= (this.tail.shift() as string).length;
        this.tailNl.shift();
        this.trimmed = true;
      }
      return;
    }
    const last = fresh.lastIndexOf('\n');
    if (last < 0) {
      if (!this.skipping) this.keep(this.partial + fresh);
      return;
    }
    let text: string;
    if (this.skipping) {
      // the rest of an overlong line, up to its newline, is dropped
      this.skipping = false;
      text = fresh.slice(fresh.indexOf('\n') + 1, last + 1);
    } else text = this.partial + fresh.slice(0, last + 1);
    this.keep(fresh.slice(last + 1));
    this.scan(text);
    if (!this.first && this.facts.visible === true && !this.skipping) {
      this.tail = [this.partial];
      this.tailNl = [this.partial.indexOf('\n')];
      this.tailLength = this.partial.length;
      this.partial = '';
    }
  }

  /** The stream ended: a last line without its newline still counts. */
  end(): AnswerFacts {
    if (this.tail !== undefined) {
      let text = this.tail.join('') + this.decoder.end();
      this.tail = [];
      // a cut tail starts inside a line: from the next one
      if (this.trimmed) text = text.slice(text.indexOf('\n') + 1);
      this.scan(`${text}\n`);
      return this.facts;
    }
    const rest = this.partial + this.decoder.end();
    this.partial = '';
    if (rest && !this.skipping) this.scan(`${rest}\n`);
    return this.facts;
  }

  /** Whether the tail without its oldest chunk still holds TAIL characters from a line's start. */
  private canDropOldest(): boolean {
    const tail = this.tail as string[];
    const rest = this.tailLength - tail[0].length;
    if (rest < TAIL) return false;
    if (rest > TAIL + MAX_LINE) return true;
    let at = 0;
    for (let i = 1; i < tail.length; i++) {
      if (this.tailNl[i] >= 0) return rest - (at + this.tailNl[i] + 1) >= TAIL;
      at += tail[i].length;
    }
    return false;
  }

  private keep(tail: string): void {
    this.partial = tail;
    if (tail.length > MAX_LINE) {
      this.partial = '';
      this.skipping = true;
    }
  }

  /** `text` is whole lines, each ending in a newline. */
  private scan(text: string): void {
    let from = 0;
    // The first data line carries the answer's id and model.
    while (this.first && from < text.length) {
      const e = text.indexOf('\n', from);
      if (text.startsWith('data:', from)) {
        this.first = false;
        this.line(text.slice(from, e));
      }
      from = e + 1;
    }
    let re = this.facts.visible === true ? MEANINGFUL : MEANINGFUL_OR_CONTENT;
    re.lastIndex = from;
    for (let m = re.exec(text); m; m = re.exec(text)) {
      const s = text.lastIndexOf('\n', m.index) + 1;
      const e = text.indexOf('\n', m.index);
      this.line(text.slice(s, e));
      if (re === MEANINGFUL_OR_CONTENT && this.facts.visible === true) re = MEANINGFUL;
      re.lastIndex = e + 1;
    }
  }

  private line(raw: string): void {
    if (!raw.startsWith('data:')) return;
    const data = raw.charCodeAt(5) === 32 ? raw.slice(6) : raw.slice(5);
    if (data.startsWith('[DONE]')) return;
    try {
      absorb(this.facts, JSON.parse(data.endsWith('\r') ? data.slice(0, -1) : data));
    } catch {
      // not JSON: nothing to learn from it
    }
  }
}

/** The facts of a whole SSE body (a router that sent the stream as one string). */
export function sseFacts(text: string): AnswerFacts {
  const r = new SseReader();
  r.push(text);
  return r.end();
}

/**
 * The request record of one answered model call: usage, and what session hygiene reads
 * (completion tokens, finish reason, whether anything visible came back; on a terminal
 * error its status and bounded code and type, with the prompt size estimated from the
 * request). Undefined when a success carried no usage.
 */
export function recordOfFacts(
  f: AnswerFacts,
  status: number,
  q: GateQuery,
  promptEstimate: () => number,
  costOf?: CostOf,
): RequestRecord | undefined {
  const model = f.model ?? q.model ?? 'unknown';
  const base = {
    session_id: q.conversation,
    ...(q.parent ? { parent_session_id: q.parent } : {}),
    ...(q.agent ? { agent: q.agent } : {}),
    request_id: f.id ?? randomUUID(),
    model,
    ts: Date.now(),
  };
  if (status >= 400) {
    return {
      ...base,
      prompt_tokens: promptEstimate(),
      status: Math.min(599, Math.max(100, status)),
      ...(f.error_code ? { error_code: f.error_code } : {}),
      ...(f.error_type ? { error_type: f.error_type } : {}),
    };
  }
  const u = f.usage;
  if (!u) return undefined;
  const cost = f.cost ?? costOf?.(model, u);
  const usd = typeof cost === 'number' && Number.isFinite(cost) && cost >= 0 ? cost : undefined;
  return {
    ...base,
    prompt_tokens: u.prompt_tokens,
    ...(u.cached_tokens ? { cached_tokens: u.cached_tokens } : {}),
    ...(typeof u.raw.completion_tokens === 'number' || typeof u.raw.output_tokens === 'number'
      ? { completion_tokens: u.completion_tokens }
      : {}),
    ...(usd !== undefined ? { cost_usd: usd } : {}),
    ...(f.finish_reason ? { finish_reason: f.finish_reason } : {}),
    status,
    ...(f.visible !== undefined ? { visible_output: f.visible } : {}),
  };
}
