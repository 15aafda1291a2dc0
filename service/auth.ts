import { timingSafeEqual } from 'node:crypto';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { AppError } from '../core/errors.ts';

export function isLoopback(host: string): boolean {
  return host === '127.0.0.1' || host === '::1' || host === 'localhost' || host.startsWith('127.');
}

function tokenOf(req: FastifyRequest): string | undefined {
  const h = req.headers.authorization;
  if (typeof h === 'string' && h.startsWith('Bearer ')) return h.slice(7);
  const x = req.headers['x-vigil-admin-token'];
  return typeof x === 'string' ? x : undefined;
}

function same(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
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
        {
          statusCode: 403,
        },
      );
    }
    const given = tokenOf(req);
    if (!given || !same(given, token)) throw new AppError('UNAUTHORIZED', 'admin token missing or wrong');
  };
}
