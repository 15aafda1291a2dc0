import {
  type ProgressEvent,
  type ProgressEventInput,
  ProgressEventSchema,
  type RequestRecord,
  type RequestRecordInput,
  RequestRecordSchema,
} from '../../core/wire.ts';
import type { HygieneInput } from './judge.ts';

// Input builders for the hygiene tests and the bench. Every input goes through the wire
// schemas, so a fixture the service would refuse cannot make a test pass.

export const SEC = 1_000;
export const MIN = 60 * SEC;
export const HOUR = 60 * MIN;

export function ev(e: ProgressEventInput): ProgressEvent {
  return ProgressEventSchema.parse(e);
}

export function req(r: RequestRecordInput): RequestRecord {
  return RequestRecordSchema.parse(r);
}

export type HygieneInputList = HygieneInput[];

export const P = (e: ProgressEventInput): HygieneInput => ({ type: 'progress', event: ev(e) });
export const R = (r: RequestRecordInput): HygieneInput => ({ type: 'request', record: req(r) });

/** Which sensor reports the calls: the router's request records, or opencode's assistant messages (plugin only). */
export type Source = 'router' | 'opencode';

export interface TurnPlan {
  /** Average prompt tokens per call over the turn (the calls spread evenly around it). */
  perCall: number;
  calls: number;
  resume: boolean;
  at: number;
}

let seq = 0;
const id = (p: string) => `${p}_${(++seq).toString(36)}`;

/**
 * One turn: a prompt, then `calls` calls whose prompt sizes average `perCall` (the first
 * and last differ by 2k per call step, as a growing history does), the last one ending
 * the turn with visible output. 20 s between calls.
 */
export function turn(session: string, model: string, t: TurnPlan, source: Source): HygieneInput[] {
  const out: HygieneInput[] = [
    P({ kind: 'prompt', session_id: session, ts: t.at, call_id: id('msg'), resume: t.resume }),
  ];
  for (let c = 0; c < t.calls; c++) {
    const tokens = t.perCall + (c - (t.calls - 1) / 2) * 2_000;
    const last = c === t.calls - 1;
    out.push(call(session, model, tokens, t.at + (c + 1) * 20 * SEC, source, { finish: last ? 'stop' : 'tool' }));
  }
  return out;
}

export interface CallOpts {
  finish?: 'stop' | 'tool' | 'none';
  visible?: boolean;
  status?: number;
  code?: string;
  id?: string;
}

/** One model call as the chosen sensor reports it. */
export function call(
  session: string,
  model: string,
  tokens: number,
  at: number,
  source: Source,
  o: CallOpts = {},
): HygieneInput {
  const visible = o.visible ?? true;
  const failed = o.status !== undefined && o.status >= 400;
  if (source === 'router') {
    return R({
      session_id: session,
      request_id: o.id ?? id('req'),
      model,
      prompt_tokens: Math.round(tokens),
      cached_tokens: Math.round(tokens * 0.8),
      completion_tokens: visible ? 400 : 0,
      visible_output: failed ? undefined : visible,
      finish_reason: failed || o.finish === 'none' ? undefined : o.finish === 'tool' ? 'tool_calls' : 'stop',
      status: o.status ?? 200,
      error_code: o.code,
      error_type: failed ? 'invalid_request_error' : undefined,
      ts: at,
    });
  }
  // opencode reports the uncached part in `input` and the cached part apart
  const cached = Math.round(tokens * 0.8);
  return P({
    kind: 'assistant',
    session_id: session,
    call_id: o.id ?? id('msg'),
    model,
    input_tokens: Math.round(tokens) - cached,
    cache_read_tokens: cached,
    output_tokens: visible ? 400 : 0,
    finish: failed || o.finish === 'none' ? undefined : o.finish === 'tool' ? 'tool-calls' : 'stop',
    error_name: failed ? 'APIError' : undefined,
    error_code: failed ? (o.code ?? String(o.status)) : undefined,
    visible_output: failed ? false : visible,
    ts: at,
  });
}
