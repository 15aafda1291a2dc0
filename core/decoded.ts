import { Lru } from './lru.ts';
import type { Store } from './store/store.ts';
import { afterCommit, beforeCommit, unitToken } from './unit.ts';

// A detector that keeps its per-session state as bytes in a shared store (Redis) would
// decode them on every input and encode them again: for a judge's 2 KB state that was
// about 40 us an input, more than the judging itself, and a batch of one session's
// events paid it once per event. Two things spare it:
//
// - A unit of work keeps one working copy per key: decoded when the unit first changes
//   the key, changed in place by each of its inputs, encoded and written once just
//   before the unit commits (beforeCommit). A batch of 50 events encodes once.
// - The bytes a unit reads back are almost always the bytes this process wrote last, so
//   the object they were encoded from is kept beside them once that unit commits, and
//   handed to the next unit that reads the same bytes instead of decoding them. The
//   match is on the bytes, so another instance's write, or anything this process never
//   committed, simply misses and decodes.
//
// The object is handed over, never shared: the next unit takes it (it leaves the cache)
// and owns it until it commits; a discarded unit's copy is dropped with it. Readers in
// the unit that changed a key see its working copy; others decode the stored bytes.

export interface Codec<T> {
  decode(b: Uint8Array): T;
  encode(v: T): Uint8Array;
}

/** What a change of a stored state answers: the state to keep (undefined: nothing is written), its expiry, a result. */
export interface StateChange<T, R> {
  value: T | undefined;
  result: R;
  ttlMs?: number;
}

interface Working<T> {
  value: T | undefined;
  ttlMs?: number;
  /** Changed by the unit: written before it commits. */
  dirty: boolean;
}

export class StoredStates<T> {
  private readonly committed: Lru<string, { bytes: Uint8Array; value: T }>;
  /** Each open unit's working copies, by key (gone with the unit). */
  private readonly working = new WeakMap<object, Map<string, Working<T>>>();

  constructor(
    private readonly store: Store,
    private readonly codec: Codec<T>,
    max: number,
  ) {
    this.committed = new Lru(max);
  }

  /** Objects kept beside their bytes (committed units' states waiting for their next input). */
  get size(): number {
    return this.committed.size;
  }

  /**
   * Changes the state stored at `key` with `fn` (given undefined when none is stored).
   * In a unit of work `fn` changes the unit's working copy, written when the unit is
   * about to commit; outside one it is one compare-and-set of the bytes.
   */
  async change<R>(key: string, fn: (current: T | undefined) => StateChange<T, R>): Promise<R> {
    const unit = unitToken();
    if (!unit) {
      return this.store.updateBytes(key, (b) => {
        const r = fn(b === undefined ? undefined : this.codec.decode(b));
        return {
          value: r.value === undefined ? undefined : this.codec.encode(r.value),
          result: r.result,
          ttlMs: r.ttlMs,
        };
      });
    }
    let copies = this.working.get(unit);
    if (!copies) {
      copies = new Map();
      this.working.set(unit, copies);
    }
    let w = copies.get(key);
    if (!w) {
      // (the unit's read: its commit checks the key still holds these bytes)
      const b = await this.store.getBytes(key);
      w = copies.get(key) ?? { value: b === undefined ? undefined : this.take(key, b), dirty: false };
      copies.set(key, w);
    }
    const r = fn(w.value);
    if (r.value !== undefined) {
      w.value = r.value;
      w.ttlMs = r.ttlMs;
      if (!w.dirty) {
        w.dirty = true;
        const copy = w;
        void beforeCommit(() => this.write(key, copy));
      }
    }
    return r.result;
  }

  /** The state at `key` as the current unit sees it (its working copy, if it changed it). Not to be changed. */
  async read(key: string): Promise<T | undefined> {
    const w = this.copyOf(key);
    if (w) return w.value;
    const b = await this.store.getBytes(key);
    return b === undefined ? undefined : this.codec.decode(b);
  }

  /** The current unit's working copy of `key`, if it opened one (a state it is changing). */
  changing(key: string): { value: T | undefined } | undefined {
    return this.copyOf(key);
  }

  private copyOf(key: string): Working<T> | undefined {
    const unit = unitToken();
    return unit ? this.working.get(unit)?.get(key) : undefined;
  }

  /** What `bytes` decode to: the object kept with equal bytes (now the caller's), else a fresh decode. */
  private take(key: string, bytes: Uint8Array): T {
    const c = this.committed.peek(key);
    if (c) {
      this.committed.delete(key);
      if (c.bytes.length === bytes.length && Buffer.compare(c.bytes, bytes) === 0) return c.value;
    }
    return this.codec.decode(bytes);
  }

  /** A working copy, encoded and written in its unit's commit; kept beside its bytes once committed. */
  private async write(key: string, w: Working<T>): Promise<void> {
    const value = w.value as T;
    const bytes = this.codec.encode(value);
    await this.store.setBytes(key, bytes, w.ttlMs);
    afterCommit(() => this.committed.set(key, { bytes, value }));
  }
}
