// The significance test of the behavior breaker: a one-sided Fisher exact test on the
// 2x2 table (this model vs the other models) x (stalled vs not). Exact rather than a
// z-test because the counts are small (3 stalled sessions of 5 against 0 of 8 is a
// typical trip) and a normal approximation is poor there. Computed from log-factorials
// (a running sum of logs, exact to floating point) so large tables neither overflow
// nor lose the tail.

const LOG_FACT: number[] = [0];

/** ln(n!) for an integer n >= 0; the table grows on demand and is shared. */
export function logFactorial(n: number): number {
  if (!Number.isInteger(n) || n < 0) throw new RangeError(`logFactorial: ${n} is not a non-negative integer`);
  for (let i = LOG_FACT.length; i <= n; i++) LOG_FACT.push(LOG_FACT[i - 1] + Math.log(i));
  return LOG_FACT[n];
}

/** ln C(n, k). */
export function logChoose(n: number, k: number): number {
  return logFactorial(n) - logFactorial(k) - logFactorial(n - k);
}

function count(name: string, v: number): void {
  if (!Number.isInteger(v) || v < 0) throw new RangeError(`fisher: ${name} must be a non-negative integer, got ${v}`);
}

/**
 * One-sided Fisher exact p-value that group 1's rate exceeds group 2's:
 * P(X >= a) where X is hypergeometric with the table's margins fixed
 * (n1 draws from n1 + n2 sessions of which a + c stalled).
 *
 * @param a stalled in group 1 (this model)
 * @param n1 sessions in group 1
 * @param c stalled in group 2 (the other models)
 * @param n2 sessions in group 2
 */
export function fisherGreater(a: number, n1: number, c: number, n2: number): number {
  for (const [k, v] of [
    ['a', a],
    ['n1', n1],
    ['c', c],
    ['n2', n2],
  ] as const)
    count(k, v);
  if (a > n1 || c > n2) throw new RangeError(`fisher: stalled exceeds sessions (${a}/${n1}, ${c}/${n2})`);
  const N = n1 + n2;
  const K = a + c;
  const hi = Math.min(n1, K);
  const den = logChoose(N, n1);
  const terms: number[] = [];
  for (let x = a; x <= hi; x++) terms.push(logChoose(K, x) + logChoose(N - K, n1 - x) - den);
  // Sum relative to the largest term: no underflow of the tail's small terms.
  const m = Math.max(...terms);
  let s = 0;
  for (const t of terms) s += Math.exp(t - m);
  return Math.min(1, Math.exp(m) * s);
}
