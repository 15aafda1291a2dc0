import type { preHandlerHookHandler } from 'fastify';
import { formatDuration } from '../core/duration.ts';
import { AppError } from '../core/errors.ts';
import { Lru } from '../core/lru.ts';
import type { Vigil } from '../core/vigil.ts';

// Per-client limits on the sensor routes. The request rate (@fastify/rate-limit,
// server.rate_limit) stops a runaway sender; the new-session budget
// (server.new_sessions) stops one sender from flooding new session ids, which would
// otherwise push everyone's sessions out of detection.max_sessions. Both are kept per
// instance and per client address, in process.

/** The options @fastify/rate-limit is registered with: its 429 is an AppError (code RATE_LIMITED). */
export const rateLimitOptions = {
  global: false,
  errorResponseBuilder: (_req: unknown, ctx: { max: number; after: string }) =>
    new AppError('RATE_LIMITED', `more than ${ctx.max} requests from this address; retry in ${ctx.after}`),
};

/** A RATE_LIMITED error carrying when to come back; the error handler sends it as Retry-After. */
export function rateLimited(message: string, retryAfterS: number): AppError {
  return Object.assign(new AppError('RATE_LIMITED', message), { retryAfterS: Math.max(1, Math.ceil(retryAfterS)) });
}

/** The session ids a validated sensor body names: `session_id` of each item, or the gate's `conversation`. */
export function sessionIdsOf(body: unknown): string[] {
  const items = Array.isArray(body) ? body : [body];
  const out = new Set<string>();
  for (const it of items) {
    if (it === null || typeof it !== 'object') continue;
    const o = it as { session_id?: unknown; conversation?: unknown };
    const id = typeof o.session_id === 'string' ? o.session_id : o.conversation;
    if (typeof id === 'string') out.add(id);
  }
  return [...out];
}

/** Client addresses whose budget is tracked at once; the least recently seen is forgotten past it. */
const CLIENTS = 10_000;

/**
 * The preHandler of the sensor routes (after validation): a request naming more
 * sessions the service does not know than its address has left in this window is
 * refused, 429 RATE_LIMITED with Retry-After, before anything is judged. Inputs for
 * known sessions never count. What a service and an embedder's plugin both mount.
 */
export function newSessionLimit(vigil: Vigil): preHandlerHookHandler {
  const clients = new Lru<string, { start: number; used: number }>(CLIENTS);
  const { max, window } = vigil.config.server.new_sessions as { max: number; window: number };
  /** Charges `fresh` new sessions to the client's window; the error when over budget. */
  const charge = (ip: string, fresh: number): AppError | undefined => {
    if (fresh === 0) return undefined;
    const now = vigil.clock.now();
    let c = clients.get(ip);
    if (c === undefined || now - c.start >= window) {
      c = { start: now, used: 0 };
      clients.set(ip, c);
    }
    if (c.used + fresh > max) {
      return rateLimited(
        `more than ${max} new sessions per ${formatDuration(window)} from this address (server.new_sessions); inputs for known sessions go on`,
        (c.start + window - now) / 1000,
      );
    }
    c.used += fresh;
    return undefined;
  };
  // Callback style: the usual request names known, cached sessions and never waits.
  return (req, _reply, done) => {
    if (req.routeOptions.config?.auth !== 'ingest') return done();
    const ids = sessionIdsOf(req.body);
    let fresh = 0;
    const later: Promise<boolean>[] = [];
    for (const id of ids) {
      const k = vigil.tree.known(id);
      if (k === false) fresh++;
      else if (k !== true) later.push(k);
    }
    if (later.length === 0) return done(charge(req.ip, fresh));
    Promise.all(later).then(
      (known) => done(charge(req.ip, fresh + known.filter((k) => !k).length)),
      (err: Error) => done(err),
    );
  };
}
