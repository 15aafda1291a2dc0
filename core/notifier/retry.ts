// When to try a failed delivery again: exponential backoff with jitter, a provider's
// Retry-After when it said one, until the alert is older than max_age (or max_attempts,
// when set). Pure: the caller passes time and randomness.

export interface RetryPolicy {
  /** Delay before the first retry, ms. */
  baseMs: number;
  /** Ceiling of one delay, ms. */
  maxDelayMs: number;
  /** Give up once the alert is this old, ms. */
  maxAgeMs: number;
  /** Give up after this many attempts (0: only max_age limits). */
  maxAttempts: number;
}

export type RetryDecision = { retry: true; delayMs: number } | { retry: false; why: 'attempts' | 'age' };

/**
 * The next delay after failed attempt number `attempt` (1-based): base * 2^(attempt-1),
 * capped, with jitter in [0.5, 1.5) so many failed deliveries do not retry in step; at
 * least the provider's Retry-After. No retry when the attempts are spent or the alert
 * would be older than max_age by then.
 */
export function nextRetry(
  p: RetryPolicy,
  attempt: number,
  ageMs: number,
  retryAfterMs: number | undefined,
  random: () => number = Math.random,
): RetryDecision {
  if (p.maxAttempts > 0 && attempt >= p.maxAttempts) return { retry: false, why: 'attempts' };
  const exp = Math.min(p.maxDelayMs, p.baseMs * 2 ** Math.min(attempt - 1, 30));
  const delayMs = Math.max(Math.round(exp * (0.5 + random())), retryAfterMs ?? 0);
  if (ageMs + delayMs > p.maxAgeMs) return { retry: false, why: 'age' };
  return { retry: true, delayMs };
}
