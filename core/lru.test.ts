import { describe, expect, it } from 'vitest';
import { Lru } from './lru.ts';

describe('Lru', () => {
  it('small: past max exactly the oldest goes; a read makes a key the newest', () => {
    const l = new Lru<string, number>(3);
    for (const [i, k] of ['a', 'b', 'c'].entries()) l.set(k, i);
    expect(l.get('a')).toBe(0);
    l.set('d', 3);
    expect([...l.entries()].map(([k]) => k)).toEqual(['c', 'a', 'd']);
    expect(l.has('b')).toBe(false);
  });

  it('large: never above max, the oldest go in a batch, the newest and refreshed stay', () => {
    const max = 6_400;
    const l = new Lru<number, number>(max);
    for (let i = 0; i < max; i++) l.set(i, i);
    l.get(0); // refreshed: now the newest
    for (let i = max; i < 3 * max; i++) {
      l.set(i, i);
      expect(l.size).toBeLessThanOrEqual(max);
    }
    // Evicted in batches of max/64: at least max - max/64 entries are kept.
    expect(l.size).toBeGreaterThanOrEqual(max - max / 64);
    const keys = [...l.entries()].map(([k]) => k);
    expect(keys.at(-1)).toBe(3 * max - 1);
    // The kept keys are the newest ones, in order.
    expect(keys).toEqual(Array.from({ length: keys.length }, (_, i) => 3 * max - keys.length + i));
    expect(l.has(0)).toBe(false);
  });
});
