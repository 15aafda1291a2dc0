import { describe, expect, it } from 'vitest';
import { fisherGreater, logChoose, logFactorial } from './breaker.stats.ts';

/** Exact one-sided p as a rational, with BigInt binomials: the reference for small tables. */
function exactGreater(a: number, n1: number, c: number, n2: number): number {
  const choose = (n: number, k: number): bigint => {
    if (k < 0 || k > n) return 0n;
    let r = 1n;
    for (let i = 1; i <= k; i++) r = (r * BigInt(n - k + i)) / BigInt(i);
    return r;
  };
  const K = a + c;
  let num = 0n;
  for (let x = a; x <= Math.min(n1, K); x++) num += choose(K, x) * choose(n1 + n2 - K, n1 - x);
  return Number((num * 10n ** 18n) / choose(n1 + n2, n1)) / 1e18;
}

describe('fisherGreater (one-sided Fisher exact test)', () => {
  it('matches textbook values', () => {
    // Fisher's lady tasting tea, 3 of 4 cups right: 17/70 (Fisher 1935; Agresti, Categorical Data Analysis, 3.5.1).
    expect(fisherGreater(3, 4, 1, 4)).toBeCloseTo(17 / 70, 12);
    // Agresti's larynx cancer table (surgery 21/23 vs radiation 15/18 controlled): P = 0.3808.
    expect(fisherGreater(21, 23, 15, 18)).toBeCloseTo(0.3808336825, 9);
    // Wikipedia "Fisher's exact test" dieting example [[1,9],[11,3]], one tail: 0.001379728.
    expect(fisherGreater(11, 14, 1, 10)).toBeCloseTo(0.0013797281, 9);
  });

  it('gives the breaker-sized values (cross-checked with scipy.stats.fisher_exact, alternative="greater")', () => {
    expect(fisherGreater(3, 4, 0, 8)).toBeCloseTo(0.0181818182, 9); // 4/220
    expect(fisherGreater(3, 3, 0, 5)).toBeCloseTo(1 / 56, 12);
    expect(fisherGreater(3, 3, 0, 3)).toBeCloseTo(0.05, 12); // why min_other_sessions is 5, not 3
    expect(fisherGreater(3, 6, 3, 9)).toBeCloseTo(0.4545454545, 9);
    expect(fisherGreater(7, 9, 2, 9)).toBeCloseTo(0.028342246, 9);
    expect(fisherGreater(10, 50, 5, 150)).toBeCloseTo(0.00047198829, 10);
  });

  it('equals the exact rational sum on every small table', () => {
    for (let n1 = 0; n1 <= 7; n1++)
      for (let n2 = 0; n2 <= 7; n2++)
        for (let a = 0; a <= n1; a++)
          for (let c = 0; c <= n2; c++) {
            const ref = exactGreater(a, n1, c, n2);
            expect(Math.abs(fisherGreater(a, n1, c, n2) - ref)).toBeLessThan(1e-12);
          }
  });

  it('is 1 when this model stalled none, and decreases as its stalls grow', () => {
    expect(fisherGreater(0, 10, 3, 20)).toBe(1);
    let prev = 1.0000001;
    for (let a = 0; a <= 10; a++) {
      const p = fisherGreater(a, 10, 2, 40);
      expect(p).toBeLessThan(prev);
      prev = p;
    }
  });

  it('stays finite and accurate on large tables (log-factorials, no overflow)', () => {
    // scipy.stats.hypergeom.sf(299, 2000, 400, 1000) = 4.7468844541119994e-30
    expect(fisherGreater(300, 1000, 100, 1000) / 4.7468844541119994e-30).toBeCloseTo(1, 10);
    expect(fisherGreater(100, 1000, 100, 1000)).toBeCloseTo(0.5296978435863833, 10);
  });

  it('rejects impossible tables', () => {
    expect(() => fisherGreater(4, 3, 0, 5)).toThrow(RangeError);
    expect(() => fisherGreater(1.5, 3, 0, 5)).toThrow(RangeError);
    expect(() => fisherGreater(-1, 3, 0, 5)).toThrow(RangeError);
  });

  it('log-factorials are exact sums of logs', () => {
    expect(logFactorial(0)).toBe(0);
    expect(Math.exp(logFactorial(10))).toBeCloseTo(3_628_800, 4);
    expect(Math.exp(logChoose(52, 5))).toBeCloseTo(2_598_960, 3);
  });
});
