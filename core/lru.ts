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
    if (this.m.size > this.max) this.m.delete(this.m.keys().next().value as K);
    return this;
  }

  delete(k: K): boolean {
    return this.m.delete(k);
  }

  entries(): IterableIterator<[K, V]> {
    return this.m.entries();
  }
}
