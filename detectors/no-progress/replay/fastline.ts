import type { ReplayInput } from '../../../core/replay.ts';
import type { MarkerEvent, RequestRecord, ToolEvent } from '../../../core/wire.ts';

// The replay's fast reader for the lines met by the million: tool events, markers and
// request records whose every field is plainly valid. It checks exactly what the wire
// schemas (core/wire.ts) check for those fields and builds the same output; anything
// else (another kind, an ISO timestamp, any doubt at all) returns undefined and the line
// goes through zod, which also words the issue of a bad one. zod costs about 3-5 us a
// record, this a few hundred ns: `vigil replay` reads about 1.4x the lines per second
// with it (bench:replay, 2026-12-08: 223-229k against 161k lines/s on the 4x file).
// The HTTP routes validate with zod alone. fastline.test.ts holds it to zod: the same
// output for whatever it accepts, and the same field names as the schemas.

const ID = /^[\x21-\x7e]{1,128}$/;
const AGENT = /^[\x20-\x7e]{1,64}$/;
const TOOL = /^[\x21-\x7e]{1,64}$/;
const FINGERPRINT = /^[0-9a-f]{64}$/;
const TARGET = /^[\x20-\x7e]{0,256}$/;
const MODEL = /^[\x21-\x7e]{1,200}$/;
const CODE = /^[A-Za-z0-9_.:/-]{1,64}$/;

const isId = (v: unknown): v is string => typeof v === 'string' && ID.test(v);
const isInt = (v: unknown, lo: number, hi: number): v is number =>
  typeof v === 'number' && Number.isSafeInteger(v) && v >= lo && v <= hi;
// epoch ms only: an ISO string needs the schema's own parse
const isTs = (v: unknown): v is number => isInt(v, 0, 8_640_000_000_000_000);
const isCode = (v: unknown): v is string => typeof v === 'string' && CODE.test(v);

/** The keys each record may carry (`type` is the line's own discriminator). */
export const TOOL_KEYS = [
  'kind',
  'session_id',
  'parent_session_id',
  'agent',
  'ts',
  'tool',
  'call_id',
  'fingerprint',
  'target',
  'exit',
  'landed',
  'result_fingerprint',
] as const;
export const MARKER_KEYS = [
  'kind',
  'session_id',
  'parent_session_id',
  'agent',
  'ts',
  'call_id',
  'landed',
  'stopped',
] as const;
export const REQUEST_KEYS = [
  'session_id',
  'parent_session_id',
  'agent',
  'request_id',
  'model',
  'prompt_tokens',
  'cached_tokens',
  'cost_usd',
  'ts',
  'completion_tokens',
  'visible_output',
  'finish_reason',
  'status',
  'error_code',
  'error_type',
] as const;

const TOOL_SET = new Set<string>([...TOOL_KEYS, 'type']);
const MARKER_SET = new Set<string>([...MARKER_KEYS, 'type']);
const REQUEST_SET = new Set<string>([...REQUEST_KEYS, 'type']);

function onlyKeys(o: Record<string, unknown>, allowed: Set<string>): boolean {
  for (const k in o) if (!allowed.has(k)) return false;
  return true;
}

/** The fields every progress event shares, checked; false when any is off. */
function commonOk(o: Record<string, unknown>): boolean {
  if (!isId(o.session_id) || !isTs(o.ts)) return false;
  const p = o.parent_session_id;
  if (p !== undefined && p !== null && !isId(p)) return false;
  const a = o.agent;
  return a === undefined || (typeof a === 'string' && AGENT.test(a));
}

function tool(o: Record<string, unknown>): ToolEvent | undefined {
  if (!onlyKeys(o, TOOL_SET) || !commonOk(o)) return undefined;
  if (typeof o.tool !== 'string' || !TOOL.test(o.tool) || !isId(o.call_id)) return undefined;
  if (typeof o.fingerprint !== 'string' || !FINGERPRINT.test(o.fingerprint)) return undefined;
  if (typeof o.target !== 'string' || !TARGET.test(o.target) || typeof o.landed !== 'boolean') return undefined;
  const exit = o.exit;
  if (exit !== undefined && exit !== null && !isInt(exit, -2_147_483_648, 2_147_483_647)) return undefined;
  const res = o.result_fingerprint;
  if (res !== undefined && !(typeof res === 'string' && FINGERPRINT.test(res))) return undefined;
  // the schema's key order
  const e: Record<string, unknown> = { kind: 'tool', session_id: o.session_id };
  if (o.parent_session_id !== undefined) e.parent_session_id = o.parent_session_id;
  if (o.agent !== undefined) e.agent = o.agent;
  e.ts = o.ts;
  e.tool = o.tool;
  e.call_id = o.call_id;
  e.fingerprint = o.fingerprint;
  e.target = o.target;
  if (exit !== undefined) e.exit = exit;
  e.landed = o.landed;
  if (res !== undefined) e.result_fingerprint = res;
  return e as ToolEvent;
}

function markerOf(o: Record<string, unknown>): MarkerEvent | undefined {
  if (!onlyKeys(o, MARKER_SET) || !commonOk(o)) return undefined;
  if (o.call_id !== undefined && !isId(o.call_id)) return undefined;
  if (o.landed !== undefined && o.landed !== false) return undefined;
  // `stopped` belongs to agent_loop markers, which zod takes
  if (o.stopped !== undefined) return undefined;
  const e: Record<string, unknown> = { kind: o.kind, session_id: o.session_id };
  if (o.parent_session_id !== undefined) e.parent_session_id = o.parent_session_id;
  if (o.agent !== undefined) e.agent = o.agent;
  e.ts = o.ts;
  if (o.call_id !== undefined) e.call_id = o.call_id;
  e.landed = false;
  return e as MarkerEvent;
}

function request(o: Record<string, unknown>): RequestRecord | undefined {
  if (!onlyKeys(o, REQUEST_SET) || !commonOk(o)) return undefined;
  if (!isId(o.request_id) || typeof o.model !== 'string' || !MODEL.test(o.model)) return undefined;
  if (!isInt(o.prompt_tokens, 0, 1_000_000_000)) return undefined;
  if (o.cached_tokens !== undefined && !isInt(o.cached_tokens, 0, 1_000_000_000)) return undefined;
  const usd = o.cost_usd;
  if (usd !== undefined && !(typeof usd === 'number' && usd >= 0 && usd <= 1_000_000)) return undefined;
  if (o.completion_tokens !== undefined && !isInt(o.completion_tokens, 0, 1_000_000_000)) return undefined;
  if (o.visible_output !== undefined && typeof o.visible_output !== 'boolean') return undefined;
  if (o.finish_reason !== undefined && !isCode(o.finish_reason)) return undefined;
  if (o.status !== undefined && !isInt(o.status, 100, 599)) return undefined;
  if (o.error_code !== undefined && !isCode(o.error_code)) return undefined;
  if (o.error_type !== undefined && !isCode(o.error_type)) return undefined;
  const r: Record<string, unknown> = { session_id: o.session_id };
  for (const k of REQUEST_KEYS) if (k !== 'session_id' && o[k] !== undefined) r[k] = o[k];
  return r as RequestRecord;
}

/**
 * A parsed JSONL object (with its `type`, if any) -> the judge input, when every field is
 * plainly valid; undefined means "ask zod".
 */
export function fastInput(o: Record<string, unknown>): ReplayInput | undefined {
  const type = o.type;
  if (type === 'request' || (type === undefined && 'request_id' in o)) {
    const record = request(o);
    return record && { type: 'request', record };
  }
  if (type !== undefined && type !== 'progress') return undefined;
  const kind = o.kind;
  if (kind === undefined || kind === 'tool') {
    const event = tool(o);
    return event && { type: 'progress', event };
  }
  if (kind === 'continuation' || kind === 'compaction_done') {
    const event = markerOf(o);
    return event && { type: 'progress', event };
  }
  return undefined;
}
