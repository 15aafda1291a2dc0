import { AppError } from '../errors.ts';

// (the last line: a cluster between failover and settling, no Sentinel answering)
const DOWN =
  /Command timed out|Connection is closed|ECONNREFUSED|ECONNRESET|EPIPE|ETIMEDOUT|Stream isn't writeable|LOADING|READONLY|getaddrinfo|MaxRetriesPerRequest|CLUSTERDOWN|TRYAGAIN|slots cache|startup nodes|sentinels are unreachable/;

/** Redis refusing the password or the user: it answers, so it is not "down". */
const AUTH = /WRONGPASS|NOAUTH|invalid password|invalid username-password/;

/**
 * A Redis that does not answer is a 503 for the caller (STORE_UNAVAILABLE), not a 500;
 * one that refuses the credentials is AUTH_FAILED (a configuration to fix).
 */
export function storeError(e: unknown): unknown {
  const err = e as Error;
  if (err && AUTH.test(err.message ?? '')) {
    const why = (err.message.match(AUTH)?.[0] ?? 'refused').toUpperCase();
    return new AppError('AUTH_FAILED', `Redis refused the credentials (${why})`, { retryable: true, cause: e });
  }
  if (err && (err.name === 'MaxRetriesPerRequestError' || DOWN.test(err.message ?? ''))) {
    const why = (err.message ?? 'error')
      .split('\n')[0]
      .replace(/redis:\/\/[^\s]*/g, 'redis://[REDACTED]')
      .slice(0, 80);
    return new AppError('STORE_UNAVAILABLE', `store unavailable (${why})`, { retryable: true, cause: e });
  }
  return e;
}
