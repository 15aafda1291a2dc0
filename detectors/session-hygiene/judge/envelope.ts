import type { AssistantEvent, RequestRecord } from '../../../core/wire.ts';
import type { HygieneOptions } from '../options.ts';

// The effective envelope per exact model string: the largest prompt that completed
// cleanly, beside the nominal context window from config. Nominal percentages said a
// session was at 22% of its window when the provider was already failing it, so only
// what actually completed is evidence. Terminal errors are kept with their codes, so an
// envelope failure can later be told from an oversized image payload.

export interface EnvelopeFailure {
  at: number;
  session_id: string;
  prompt_tokens: number;
  status: number | null;
  code: string | null;
  type: string | null;
}

export interface ModelEnvelope {
  model: string;
  /** Largest prompt (tokens) that completed cleanly: no error, visible output. 0 until one did. */
  largest_clean: number;
  largest_clean_at: number;
  clean_calls: number;
  failures: number;
  /** The latest terminal errors, newest last (at most FAILURES_KEPT). */
  recent_failures: EnvelopeFailure[];
  /** Last update (epoch ms of the input), for least-recently-used eviction. */
  touched: number;
}

/** Models -> envelope: a plain JSON object keyed by the exact model string. */
export interface EnvelopeBook {
  v: 1;
  models: Record<string, ModelEnvelope>;
}

export const FAILURES_KEPT = 8;

export function newEnvelopeBook(): EnvelopeBook {
  return { v: 1, models: {} };
}

/** Own keys only: a model string may be "__proto__" or "constructor". */
export function envelopeOf(book: EnvelopeBook, model: string): ModelEnvelope | null {
  return Object.hasOwn(book.models, model) ? book.models[model] : null;
}

/** opencode's user abort ends a message with an error that says nothing about the provider. */
export const ABORTED = 'MessageAbortedError';

export function promptTokensOf(ev: AssistantEvent): number {
  return ev.input_tokens + ev.cache_read_tokens + ev.cache_write_tokens;
}

/**
 * Learns from a request record: a clean call (no error, visible output) may raise the
 * envelope, a failed one is kept with its codes. Mutates the book; true when it changed.
 * When the router and the plugin both report a call, the envelope (a maximum) is the
 * same and clean_calls counts it twice, which only reaches envelope_min_clean sooner.
 */
export function learnRequest(book: EnvelopeBook, r: RequestRecord, k: HygieneOptions): boolean {
  if (r.prompt_tokens <= 0) return false;
  const failed =
    (r.status !== undefined && r.status >= 400) || r.error_code !== undefined || r.error_type !== undefined;
  if (!failed) return r.visible_output !== false && learnClean(book, r.model, r.prompt_tokens, r.ts, k);
  learnFailure(
    book,
    r.model,
    r.session_id,
    r.prompt_tokens,
    r.ts,
    k,
    r.status ?? null,
    r.error_code ?? null,
    r.error_type ?? null,
  );
  return true;
}

/** The same from an opencode assistant message (needs its model); compaction summaries and user aborts say nothing. */
export function learnAssistant(book: EnvelopeBook, ev: AssistantEvent, k: HygieneOptions): boolean {
  const p = promptTokensOf(ev);
  if (ev.model === undefined || p <= 0 || ev.summary === true) return false;
  if (ev.error_name === undefined) return ev.visible_output && learnClean(book, ev.model, p, ev.ts, k);
  if (ev.error_name === ABORTED) return false;
  learnFailure(book, ev.model, ev.session_id, p, ev.ts, k, null, ev.error_code ?? ev.error_name, null);
  return true;
}

function entry(book: EnvelopeBook, model: string, at: number, k: HygieneOptions): ModelEnvelope {
  let e = envelopeOf(book, model);
  if (e === null) {
    e = { model, largest_clean: 0, largest_clean_at: 0, clean_calls: 0, failures: 0, recent_failures: [], touched: at };
    // defined, not assigned: assigning "__proto__" would set the prototype
    Object.defineProperty(book.models, model, { value: e, enumerable: true, writable: true, configurable: true });
    evict(book, k.max_models);
  }
  if (at > e.touched) e.touched = at;
  return e;
}

function learnClean(book: EnvelopeBook, model: string, p: number, at: number, k: HygieneOptions): boolean {
  const e = entry(book, model, at, k);
  e.clean_calls++;
  if (p > e.largest_clean) {
    e.largest_clean = p;
    e.largest_clean_at = at;
  }
  return true;
}

function learnFailure(
  book: EnvelopeBook,
  model: string,
  session_id: string,
  prompt_tokens: number,
  at: number,
  k: HygieneOptions,
  status: number | null,
  code: string | null,
  type: string | null,
): void {
  const e = entry(book, model, at, k);
  e.failures++;
  e.recent_failures.push({ at, session_id, prompt_tokens, status, code, type });
  if (e.recent_failures.length > FAILURES_KEPT) e.recent_failures.shift();
}

function evict(book: EnvelopeBook, max: number): void {
  const keys = Object.keys(book.models);
  if (keys.length <= max) return;
  keys.sort((a, b) => book.models[a].touched - book.models[b].touched);
  for (const m of keys.slice(0, keys.length - max)) delete book.models[m];
}

/** Is this prompt above the model's effective envelope, with enough evidence behind it to say so? */
export function aboveEnvelope(e: ModelEnvelope | null | undefined, prompt: number, k: HygieneOptions): boolean {
  return (
    e != null && e.clean_calls >= k.envelope_min_clean && prompt >= k.envelope_min_tokens && prompt > e.largest_clean
  );
}

export interface EnvelopeReadout {
  model: string;
  effective: number;
  nominal: number | null;
  /** effective / nominal, when the nominal window is configured. */
  share_of_nominal: number | null;
  clean_calls: number;
  failures: number;
  recent_failures: EnvelopeFailure[];
}

/** The rows a `GET /envelopes` would show. */
export function envelopeReadout(book: EnvelopeBook, k: HygieneOptions): EnvelopeReadout[] {
  return Object.values(book.models)
    .sort((a, b) => (a.model < b.model ? -1 : a.model > b.model ? 1 : 0))
    .map((e) => readoutOf(e, k));
}

export function readoutOf(e: ModelEnvelope, k: HygieneOptions): EnvelopeReadout {
  const nominal = Object.hasOwn(k.nominal_context, e.model) ? k.nominal_context[e.model] : null;
  return {
    model: e.model,
    effective: e.largest_clean,
    nominal,
    share_of_nominal: nominal ? e.largest_clean / nominal : null,
    clean_calls: e.clean_calls,
    failures: e.failures,
    recent_failures: e.recent_failures.map((f) => ({ ...f })),
  };
}
