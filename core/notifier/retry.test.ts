import { describe, expect, it } from 'vitest';
import { nextRetry, type RetryPolicy } from './retry.ts';

const P: RetryPolicy = { baseMs: 1_000, maxDelayMs: 60_000, maxAgeMs: 3_600_000, maxAttempts: 0 };
const mid = () => 0.5; // jitter factor exactly 1

describe('retry policy', () => {
  it('doubles from the base delay up to the ceiling', () => {
    const delays = [1, 2, 3, 4, 5, 6, 7, 8].map((a) => nextRetry(P, a, 0, undefined, mid));
    expect(delays.map((d) => (d.retry ? d.delayMs : -1))).toEqual([
      1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 60_000, 60_000,
    ]);
  });

  it('jitters each delay within [0.5, 1.5) of the exponential value', () => {
    const lo = nextRetry(P, 3, 0, undefined, () => 0);
    const hi = nextRetry(P, 3, 0, undefined, () => 0.999);
    expect(lo).toEqual({ retry: true, delayMs: 2_000 });
    expect(hi.retry && hi.delayMs).toBeGreaterThan(5_990);
    expect(hi.retry && hi.delayMs).toBeLessThan(6_000);
  });

  it("waits at least the provider's Retry-After", () => {
    expect(nextRetry(P, 1, 0, 3_000, mid)).toEqual({ retry: true, delayMs: 3_000 });
    expect(nextRetry(P, 5, 0, 3_000, mid)).toEqual({ retry: true, delayMs: 16_000 });
  });

  it('gives up when the alert would be older than max_age before the next attempt', () => {
    expect(nextRetry(P, 3, 3_590_000, undefined, mid)).toEqual({ retry: true, delayMs: 4_000 });
    expect(nextRetry(P, 3, 3_597_000, undefined, mid)).toEqual({ retry: false, why: 'age' });
  });

  it('gives up after max_attempts when set', () => {
    const p = { ...P, maxAttempts: 2 };
    expect(nextRetry(p, 1, 0, undefined, mid).retry).toBe(true);
    expect(nextRetry(p, 2, 0, undefined, mid)).toEqual({ retry: false, why: 'attempts' });
  });
});
