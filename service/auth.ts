import { createHash, timingSafeEqual } from 'node:crypto';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { AppError } from '../core/errors.ts';

// Two tokens, two jobs: the admin token guards what a person does (knobs, Resume, test
// alerts; and, off loopback, every read); the ingestion token is what the sensors send
// (the opencode plugin, the watchdog, a router posting request records). They are
// distinct so a sensor's token, which sits in every opencode environment, cannot
// resume a stopped tree or change a knob.

/** Shortest token accepted when the service is reachable off loopback. */
export const MIN_TOKEN_LENGTH = 16;

/** The routes sensors post to: they need the ingestion token when one is configured. */
export const INGEST_ROUTES = new Set([
  '/progress',
  '/requests',
  '/verdicts',
  '/watchdog/heartbeat',
  '/directives',
  '/directives/ack',
]);

export function isLoopback(host: string): boolean {
  return host === '127.0.0.1' || host === '::1' || host === 'localhost' || host.startsWith('127.');
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

/** Why a token cannot guard a service bound off loopback, or undefined when it can. */
export function weakToken(token: string | undefined, env: string): string | undefined {
  if (!token) return `needs a token in ${env}`;
  if (token.length < MIN_TOKEN_LENGTH) return `needs a token of at least ${MIN_TOKEN_LENGTH} characters in ${env}`;
  return undefined;
}
