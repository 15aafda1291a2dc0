import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import type { GateHeaders, SensorDescriptor } from '../core/sensor.ts';
import type { Vigil } from '../core/vigil.ts';
import type { GateAnswer, GateQuery } from '../core/wire.ts';
import { capBody, estimateTokens } from './router/cap.ts';
import { tapAnswer } from './router/tap.ts';
import { type CostOf, recordOfFacts } from './router/usage.ts';

// `vigil/router`: what a fastify-based model router registers.
// - vigilGate: before each model request it asks the gate about the conversation
//   (identity from the router headers, or the headers a sensor's descriptor names, such
//   as the `x-session-id` opencode 1.18 sends anyway); it refuses conversations whose tree is refused, enforces context limits
//   (cut the oldest turns for `cap`, a context-overflow error for `overflow`), and
//   records each answer's usage, model and cost, from JSON or a streamed (SSE) answer.
// - vigilIngest: the routes the sensors report to (progress, directives, acks, request
//   records, the watchdog), under a prefix; the opencode plugin's VIGIL_URL points there.

export { capBody, estimateTokens } from './router/cap.ts';
export { type VigilIngestOptions, vigilIngest } from './router/ingest.ts';
export type { CostOf, Usage } from './router/usage.ts';

export interface VigilGateOptions {
  vigil: Vigil;
  /** Which routes are model requests (default: any POST whose path ends in /chat/completions, /messages or /responses). */
  match?: (req: FastifyRequest) => boolean;
  /** Price of an answer in USD when the upstream does not say (usage.cost); default none. */
  costOf?: CostOf;
}

export interface GateDecoration {
  query: GateQuery;
  answer: GateAnswer;
  /** The gate answered the request itself (a refusal, an overflow error): no model call to record. */
  answered?: boolean;
  /** When a `cap` cut the request: the turns cut and the estimated prompt before and after. */
  cut?: { turns: number; before: number; after: number };
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

/**
 * The conversation identity of a model request: the router headers, else the first
 * sensor's table of headers (core/sensor.ts `gate`) that the request carries: opencode's
 * x-session-id, Claude Code's x-claude-code-session-id (+ agent id), Codex's thread-id
 * (+ parent thread). The router headers win field by field.
 */
export function identityOf(req: FastifyRequest, sensors: Iterable<SensorDescriptor> = []): GateQuery | undefined {
  let own: GateHeaders | undefined;
  for (const s of sensors) {
    if (s.gate && header(req, s.gate.conversation)) {
      own = s.gate;
      break;
    }
  }
  const base = own && header(req, own.conversation);
  const child = own?.child && header(req, own.child);
  const ownId = base && child ? `${base}.${child}` : base;
  const conversation = header(req, 'x-router-conversation') ?? ownId;
  if (!conversation) return undefined;
  const body = req.body as { model?: unknown } | undefined;
  const model = typeof body?.model === 'string' && ID.test(body.model) ? body.model : undefined;
  const agent = header(req, 'x-router-agent') ?? (own?.agent && header(req, own.agent));
  const parent =
    header(req, 'x-router-parent') ??
    (conversation !== ownId ? undefined : child ? base : own?.parent && header(req, own.parent));
  return { conversation, ...(agent ? { agent } : {}), ...(parent ? { parent } : {}), ...(model ? { model } : {}) };
}

const defaultMatch = (req: FastifyRequest) =>
  req.method === 'POST' && /\/(chat\/completions|messages|responses)$/.test(req.url.split('?')[0]);

/** Anthropic's Messages API answers errors in its own shape; everything else gets OpenAI's. */
const anthropic = (req: FastifyRequest) => /\/messages$/.test(req.url.split('?')[0]);

/** A provider-shaped context-overflow error: the agent takes it for one and compacts on its own. */
function overflowBody(req: FastifyRequest, max: number, est: number) {
  return anthropic(req)
    ? {
        type: 'error',
        error: { type: 'invalid_request_error', message: `prompt is too long: ${est} tokens > ${max} maximum` },
      }
    : {
        error: {
          message: `This model's maximum context length is ${max} tokens. However, your messages resulted in ${est} tokens. Please reduce the length of the messages.`,
          type: 'invalid_request_error',
          param: /\/responses$/.test(req.url.split('?')[0]) ? 'input' : 'messages',
          code: 'context_length_exceeded',
        },
      };
}

function refusalBody(req: FastifyRequest, reason: string) {
  const message = `vigil: ${reason}`;
  return anthropic(req)
    ? { type: 'error', error: { type: 'rate_limit_error', message } }
    : { error: { message, type: 'rate_limit_error', code: 'vigil_refused' } };
}

/** Headers of a fetch Response that describe its transport, not its body (fetch has decoded it). */
const TRANSPORT = new Set(['content-length', 'content-encoding', 'transfer-encoding', 'connection', 'keep-alive']);

async function vigilGatePlugin(app: FastifyInstance, o: VigilGateOptions): Promise<void> {
  const match = o.match ?? defaultMatch;

  app.addHook('preHandler', async (req: FastifyRequest, reply: FastifyReply) => {
    if (!match(req)) return;
    const query = identityOf(req, o.vigil.registry.sensors.values());
    if (!query) return;
    const answer = await o.vigil.gate(query);
    const g: GateDecoration = { query, answer };
    req.vigilGate = g;
    if (answer.action === 'refuse') {
      g.answered = true;
      return reply
        .code(429)
        .header('retry-after', String(answer.retry_after_s ?? 30))
        .send(refusalBody(req, answer.reason ?? 'refused'));
    }
    // Only agent turns (they carry tools) are limited: opencode's compaction and title
    // requests carry none, and refusing or cutting the compaction would defeat the cap.
    const max = answer.action === 'limit' ? answer.max_context_tokens : undefined;
    const tools = (req.body as { tools?: unknown } | undefined)?.tools;
    if (!max || !Array.isArray(tools) || tools.length === 0) return;
    if (answer.limit_mechanism === 'overflow') {
      const est = estimateTokens(req.body);
      if (est <= max) return;
      g.answered = true;
      return reply.code(400).send(overflowBody(req, max, est));
    }
    // cap: the oldest turns go until the prompt fits; when even the newest turn does not
    // fit, the overflow error makes the agent compact.
    const r = capBody(req.body, max);
    if (r.kind === 'cut') {
      req.body = r.body;
      g.cut = { turns: r.turns, before: r.before, after: r.after };
      reply.header('x-vigil-context-cut', String(r.turns));
    } else if (r.kind === 'over') {
      g.answered = true;
      return reply.code(400).send(overflowBody(req, max, r.tokens));
    }
  });

  // Usage, model and cost from the answer, JSON or streamed, as it goes to the client:
  // the bytes pass untouched and unheld; the record is made once the answer is complete.
  app.addHook('onSend', async (req: FastifyRequest, reply: FastifyReply, payload: unknown) => {
    const g = req.vigilGate;
    if (!g || g.answered) return payload;
    return tapAnswer(
      payload,
      {
        contentType: () => reply.getHeader('content-type'),
        status: () => reply.statusCode,
        adopt: (r) => {
          reply.code(r.status);
          for (const [k, v] of r.headers) if (!TRANSPORT.has(k)) reply.header(k, v);
        },
      },
      (facts, status) => {
        const rec = recordOfFacts(facts, status, g.query, () => estimateTokens(req.body), o.costOf);
        // Recording never blocks or fails the response.
        if (rec) {
          void o.vigil.engine
            .requests([rec])
            .catch((err) => req.log.warn({ err: (err as Error).message }, 'vigil: recording usage failed'));
        }
      },
    );
  });
}

/**
 * The gate as a fastify plugin: `await router.register(vigilGate, { vigil })`. Wrapped
 * with fastify-plugin (no encapsulation), so its hooks apply to the router's own routes.
 */
export const vigilGate = fp(vigilGatePlugin, { fastify: '5.x', name: 'vigil-gate' });
