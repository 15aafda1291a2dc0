import { randomUUID } from 'node:crypto';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import type { Vigil } from '../core/vigil.ts';
import type { GateAnswer, GateQuery, RequestRecord } from '../core/wire.ts';

// The fastify plugin a fastify-based model router registers. Before each model request
// it asks the gate about the conversation (identity from the router headers, or the
// `x-session-id` header opencode 1.18 sends anyway); it refuses only conversations whose
// tree is refused, enforces the overflow-style context limit, and records each
// request's usage from the upstream's JSON response.

export interface VigilGateOptions {
  vigil: Vigil;
  /** Which routes are model requests (default: any POST whose path ends in /chat/completions or /messages). */
  match?: (req: FastifyRequest) => boolean;
  /** Price of a response in USD when the upstream does not say (usage.cost); default none. */
  costOf?: (model: string, usage: Record<string, unknown>) => number | undefined;
}

export interface GateDecoration {
  query: GateQuery;
  answer: GateAnswer;
}

declare module 'fastify' {
  interface FastifyRequest {
    /** The gate's answer for this model request (routers read max_context_tokens and model_tripped). */
    vigilGate?: GateDecoration;
  }
}

const ID = /^[\x21-\x7e]{1,200}$/;
const header = (req: FastifyRequest, name: string): string | undefined => {
  const v = req.headers[name];
  const s = Array.isArray(v) ? v[0] : v;
  return typeof s === 'string' && ID.test(s) ? s : undefined;
};

/** The conversation identity of a model request: the router headers, else opencode's x-session-id. */
export function identityOf(req: FastifyRequest): GateQuery | undefined {
  const conversation = header(req, 'x-router-conversation') ?? header(req, 'x-session-id');
  if (!conversation) return undefined;
  const body = req.body as { model?: unknown } | undefined;
  const model = typeof body?.model === 'string' && ID.test(body.model) ? body.model : undefined;
  const agent = header(req, 'x-router-agent');
  const parent = header(req, 'x-router-parent');
  return { conversation, ...(agent ? { agent } : {}), ...(parent ? { parent } : {}), ...(model ? { model } : {}) };
}

/** A rough prompt size for the overflow check: JSON bytes / 4 (the usual chars-per-token estimate). */
export function estimateTokens(body: unknown): number {
  return Math.ceil(JSON.stringify(body ?? '').length / 4);
}

const defaultMatch = (req: FastifyRequest) =>
  req.method === 'POST' && /\/(chat\/completions|messages)$/.test(req.url.split('?')[0]);

async function vigilGatePlugin(app: FastifyInstance, o: VigilGateOptions): Promise<void> {
  const match = o.match ?? defaultMatch;

  app.addHook('preHandler', async (req: FastifyRequest, reply: FastifyReply) => {
    if (!match(req)) return;
    const query = identityOf(req);
    if (!query) return;
    const answer = await o.vigil.gate(query);
    req.vigilGate = { query, answer };
    if (answer.action === 'refuse') {
      return reply
        .code(429)
        .header('retry-after', String(answer.retry_after_s ?? 30))
        .send({
          error: { message: `vigil: ${answer.reason ?? 'refused'}`, type: 'rate_limit_error', code: 'vigil_refused' },
        });
    }
    // Only agent turns (they carry tools) get the overflow error: opencode's compaction
    // and title requests carry none, and refusing the compaction would defeat the cap.
    const tools = (req.body as { tools?: unknown } | undefined)?.tools;
    const agentTurn = Array.isArray(tools) && tools.length > 0;
    if (answer.action === 'limit' && answer.limit_mechanism === 'overflow' && answer.max_context_tokens && agentTurn) {
      const est = estimateTokens(req.body);
      if (est > answer.max_context_tokens) {
        // Shaped like a provider's context-overflow error, so the client compacts on its own.
        return reply.code(400).send({
          error: {
            message: `This model's maximum context length is ${answer.max_context_tokens} tokens. However, your messages resulted in ${est} tokens. Please reduce the length of the messages.`,
            type: 'invalid_request_error',
            param: 'messages',
            code: 'context_length_exceeded',
          },
        });
      }
    }
  });

  // Usage from a non-streamed JSON response (OpenAI-compatible `usage`). Streaming
  // routers record through vigil.requests() themselves.
  app.addHook('onSend', async (req: FastifyRequest, reply: FastifyReply, payload: unknown) => {
    const g = req.vigilGate;
    // Our own refusal is not a model call.
    if (!g || g.answer.action === 'refuse') return payload;
    const text =
      typeof payload === 'string' ? payload : Buffer.isBuffer(payload) ? payload.toString('utf8') : undefined;
    if (text?.[0] !== '{') return payload;
    let parsed: Upstream;
    try {
      parsed = JSON.parse(text);
    } catch {
      return payload;
    }
    const rec = recordOf(parsed, reply.statusCode, g.query, req.body, o.costOf);
    // Recording never blocks or fails the response.
    if (rec) {
      void o.vigil.engine
        .requests([rec])
        .catch((err) => req.log.warn({ err: (err as Error).message }, 'vigil: recording usage failed'));
    }
    return payload;
  });
}

/** The parts of an OpenAI-compatible answer the record needs (never the message text). */
interface Upstream {
  id?: unknown;
  model?: unknown;
  usage?: Record<string, unknown>;
  choices?: { finish_reason?: unknown; message?: { content?: unknown; tool_calls?: unknown } }[];
  error?: { code?: unknown; type?: unknown };
}

const CODE = /^[A-Za-z0-9_.:/-]{1,64}$/;
const code = (v: unknown) =>
  typeof v === 'string' && CODE.test(v) ? v : typeof v === 'number' ? String(v) : undefined;

/**
 * The request record of one answered model call: usage, and what session hygiene reads
 * (completion tokens, finish reason, whether anything visible came back; on a terminal
 * error its status and bounded code and type, with the prompt size estimated from the
 * request). Sizes, counts and codes only: no content is read into it.
 */
export function recordOf(
  p: Upstream,
  status: number,
  q: GateQuery,
  body: unknown,
  costOf?: VigilGateOptions['costOf'],
): RequestRecord | undefined {
  const model = typeof p.model === 'string' && ID.test(p.model) ? p.model : (q.model ?? 'unknown');
  const base = {
    session_id: q.conversation,
    ...(q.parent ? { parent_session_id: q.parent } : {}),
    ...(q.agent ? { agent: q.agent } : {}),
    request_id: typeof p.id === 'string' && ID.test(p.id) ? p.id : randomUUID(),
    model,
    ts: Date.now(),
  };
  if (status >= 400) {
    const errCode = code(p.error?.code);
    const errType = code(p.error?.type);
    return {
      ...base,
      prompt_tokens: estimateTokens(body),
      status: Math.min(599, Math.max(100, status)),
      ...(errCode ? { error_code: errCode } : {}),
      ...(errType ? { error_type: errType } : {}),
    };
  }
  const u = p.usage;
  if (!u || typeof u.prompt_tokens !== 'number') return undefined;
  const cached = (u.prompt_tokens_details as { cached_tokens?: unknown } | undefined)?.cached_tokens;
  const cost = typeof u.cost === 'number' ? u.cost : costOf?.(model, u);
  const choice = p.choices?.[0];
  const content = choice?.message?.content;
  const tools = choice?.message?.tool_calls;
  const finish = code(choice?.finish_reason);
  return {
    ...base,
    prompt_tokens: Math.max(0, Math.floor(u.prompt_tokens)),
    ...(typeof cached === 'number' ? { cached_tokens: Math.max(0, Math.floor(cached)) } : {}),
    ...(typeof u.completion_tokens === 'number'
      ? { completion_tokens: Math.max(0, Math.floor(u.completion_tokens)) }
      : {}),
    ...(cost !== undefined ? { cost_usd: cost } : {}),
    ...(finish ? { finish_reason: finish } : {}),
    status,
    ...(choice
      ? {
          visible_output:
            (typeof content === 'string' && content.trim() !== '') || (Array.isArray(tools) && tools.length > 0),
        }
      : {}),
  };
}

/**
 * The gate as a fastify plugin: `await router.register(vigilGate, { vigil })`. Wrapped
 * with fastify-plugin (no encapsulation), so its hooks apply to the router's own routes.
 */
export const vigilGate = fp(vigilGatePlugin, { fastify: '5.x', name: 'vigil-gate' });
