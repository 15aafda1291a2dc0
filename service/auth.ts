import { createHash, timingSafeEqual } from 'node:crypto';
import { isIP } from 'node:net';
import type { FastifyReply, FastifyRequest, onRequestAsyncHookHandler, onRequestHookHandler } from 'fastify';
import { AppError } from '../core/errors.ts';
import type { Vigil } from '../core/vigil.ts';

// Each caller authenticates as what it is (docs/api.md, Auth):
// - sensors and routers (the opencode plugin, the watchdog, a router's request records
//   and gate checks) send the ingestion token; it opens their routes and nothing else;
// - a person (knobs, Resume, test alerts; off loopback, every read) sends the admin
//   token, which opens no sensor route.
// The ingestion token sits in every opencode environment and in the router, so it must
// never resume a stopped tree or change a knob; the admin token is not sent by sensors,
// so a sensor's config holds no key that changes knobs. The gate takes the ingestion
// token: the router that asks the gate already posts request records with it, and a
// gate check decides nothing a request record could not.

/** Shortest token accepted when the service is reachable off loopback. */
export const MIN_TOKEN_LENGTH = 16;

declare module 'fastify' {
  interface FastifyContextConfig {
    /**
     * `ingest`: a sensor's or router's route, guarded by the ingestion token. `hook`:
     * the local hook endpoint, which checks its own peer (loopback) and key.
     */
    auth?: 'ingest' | 'hook';
  }
}

/** Route config marking a sensor's or router's route (`config: { ...SENSOR_ROUTE }`). */
export const SENSOR_ROUTE = { auth: 'ingest' } as const;

/** The paths the service's sensor routes have (the docs table and tests list them from here). */
export const INGEST_ROUTES = new Set([
  '/progress',
  '/requests',
  '/verdicts',
  '/watchdog/heartbeat',
  '/directives',
  '/directives/ack',
  '/gate',
]);

export function isLoopback(host: string): boolean {
  return host === '127.0.0.1' || host === '::1' || host === 'localhost' || host.startsWith('127.');
}

/** Whether a peer's socket address is this machine's loopback (IPv4, IPv6, or IPv4 mapped into IPv6). */
export function isLoopbackPeer(address: string | undefined): boolean {
  if (!address) return false;
  const a = address.startsWith('::ffff:') ? address.slice(7) : address;
  return a === '::1' || (isIP(a) === 4 && a.startsWith('127.'));
}

function tokenOf(req: FastifyRequest, header: string): string | undefined {
  const h = req.headers.authorization;
  if (typeof h === 'string' && h.startsWith('Bearer ')) return h.slice(7);
  const x = req.headers[header];
  return typeof x === 'string' ? x : undefined;
}

/** Constant time whatever the lengths: both sides are hashed to 32 bytes first. */
export function sameToken(given: string, expected: string): boolean {
  const a = createHash('sha256').update(given).digest();
  const b = createHash('sha256').update(expected).digest();
  return timingSafeEqual(a, b) && given.length === expected.length;
}

/** The tokens an instance's config names, read from its environment (undefined when unset or empty). */
export function tokensOf(vigil: Vigil): { admin?: string; ingest?: string } {
  const s = vigil.config.server;
  return { admin: vigil.env[s.admin_token_env] || undefined, ingest: vigil.env[s.ingest_token_env] || undefined };
}

/**
 * The admin token guard. Mutating admin routes always need it; when the service is
 * bound off loopback every route needs it. With no token configured, mutating admin
 * routes are refused (403) rather than left open.
 */
export function adminGuard(token: string | undefined) {
  return async (req: FastifyRequest, _reply: FastifyReply): Promise<void> => {
    if (!token) {
      throw Object.assign(
        new AppError('UNAUTHORIZED', 'admin token not configured: set the server.admin_token_env variable'),
        { statusCode: 403 },
      );
    }
    const given = tokenOf(req, 'x-vigil-admin-token');
    if (given === undefined || !sameToken(given, token))
      throw new AppError('UNAUTHORIZED', 'admin token missing or wrong');
  };
}

/** The ingestion token guard: open only when no token is configured (loopback alone allows that). */
export function ingestGuard(token: string | undefined) {
  return async (req: FastifyRequest, _reply: FastifyReply): Promise<void> => {
    if (!token) return;
    const given = tokenOf(req, 'x-vigil-token');
    if (given === undefined || !sameToken(given, token)) {
      throw new AppError('UNAUTHORIZED', 'ingestion token missing or wrong (server.ingest_token_env)');
    }
  };
}

type Guard = (req: FastifyRequest, reply: FastifyReply) => Promise<void>;

/**
 * The onRequest hook that authenticates each caller: a sensor route (its config
 * carries SENSOR_ROUTE) needs the ingestion token when one is set; with `guarded` (the
 * service bound off loopback) every other route goes through `reader` (the admin
 * token, less what the admin page needs before it has it). Admin routes add the admin
 * guard themselves. Undefined when there is nothing to check: an async hook costs
 * every request. What the service and an embedder's plugin both mount.
 */
export function accessHook(
  vigil: Vigil,
  o: { guarded?: boolean; reader?: Guard } = {},
): onRequestAsyncHookHandler | undefined {
  const { ingest } = tokensOf(vigil);
  if (!ingest && !o.guarded) return undefined;
  const sensor = ingestGuard(ingest);
  const reader = o.guarded ? o.reader : undefined;
  return async (req, reply) => {
    const auth = req.routeOptions.config?.auth;
    if (auth === 'ingest') return sensor(req, reply);
    if (auth === 'hook') return;
    if (reader) return reader(req, reply);
  };
}

/** Why a token cannot guard a service bound off loopback, or undefined when it can. */
export function weakToken(token: string | undefined, env: string): string | undefined {
  if (!token) return `needs a token in ${env}`;
  if (token.length < MIN_TOKEN_LENGTH) return `needs a token of at least ${MIN_TOKEN_LENGTH} characters in ${env}`;
  return undefined;
}

/** The host name of a Host header value, lowercased, without port or IPv6 brackets. */
export function hostName(header: string): string {
  const h = header.trim().toLowerCase();
  if (h.startsWith('[')) return h.slice(1, h.indexOf(']') < 0 ? undefined : h.indexOf(']'));
  const i = h.lastIndexOf(':');
  return i < 0 ? h : h.slice(0, i);
}

/**
 * Whether a Host header may reach the API. A DNS rebinding attack needs a name the
 * attacker controls, resolving to this machine: IP literals and loopback names
 * (`localhost`, `*.localhost`, which browsers resolve to loopback themselves) cannot
 * be rebound and are always accepted; any other name only when `allowed` lists it (or
 * holds "*"). A request without Host (HTTP/1.0, not a browser) is accepted.
 */
export function hostAllowed(header: string | undefined, allowed: readonly string[]): boolean {
  if (header === undefined || header === '') return true;
  if (allowed.includes('*')) return true;
  const name = hostName(header);
  if (isIP(name) !== 0) return true;
  const bare = name.endsWith('.') ? name.slice(0, -1) : name;
  if (bare === 'localhost' || bare.endsWith('.localhost')) return true;
  return allowed.includes(bare);
}

/**
 * The onRequest hook refusing a Host outside server.allowed_hosts (403 HOST_NOT_ALLOWED),
 * before any route runs. Synchronous: it runs on every request.
 */
export function hostGuard(allowed: readonly string[]): onRequestHookHandler {
  return (req, _reply, done) => {
    const h = req.headers.host;
    if (hostAllowed(h, allowed)) return done();
    const name = hostName(h ?? '')
      .replace(/[^a-z0-9.:-]/g, '?')
      .slice(0, 100);
    done(new AppError('HOST_NOT_ALLOWED', `host "${name}" is not allowed: add it to server.allowed_hosts`));
  };
}
