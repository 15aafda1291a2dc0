/**
 * A Map bounded to `max` entries: setting or reading a key makes it the newest, and
 * past `max` the oldest goes. Every bounded in-process memory (the service's caches, the
 * plugin's per-session memories) is one of these,
 * so a long-running process never grows one without bound.
 */
export class Lru<K, V> {
  private readonly m = new Map<K, V>();

  constructor(readonly max: number) {}

  get size(): number {
    return this.m.size;
  }

  has(k: K): boolean {
    return this.m.has(k);
  }

  get(k: K): V | undefined {
    if (!this.m.has(k)) return undefined;
    const v = this.m.get(k) as V;
    this.m.delete(k);
    this.m.set(k, v);
    return v;
  }

  /** Read without refreshing the entry's age. */
  peek(k: K): V | undefined {
    return this.m.get(k);
  }

  set(k: K, v: V): this {
    this.m.delete(k);
    this.m.set(k, v);
    if (this.m.size > this.max) this.evict();
    return this;
  }

  /**
   * Past `max`, the oldest 1/64 go at once: a Map keeps deleted entries as holes at its
   * front until it rehashes, and finding the oldest live key walks past them, so one
   * walk per many evictions instead of one each (a full cache had made every set cost
   * about 3x).
   */
  private evict(): void {
    let n = this.m.size - this.max + (this.max >> 6);
    for (const k of this.m.keys()) {
      if (n-- <= 0) break;
      this.m.delete(k);
    }
  }

  delete(k: K): boolean {
    return this.m.delete(k);
  }

  entries(): IterableIterator<[K, V]> {
    return this.m.entries();
  }
}
