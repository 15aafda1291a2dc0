import { Lru } from './lru.ts';
import { afterCommit, onDiscard, unitToken } from './unit.ts';

// A detector that keeps its per-session state as bytes in a shared store (Redis) decodes
// them on every input and encodes them again: for a judge's 2 KB state
// that was about 40 us an event, more than the judging itself. The bytes it
// reads back are almost always the bytes it wrote last, so the object it encoded them
// from is kept beside them and handed out again when they match. The match is on the
// bytes themselves, so another instance's write, or one this process never committed,
// simply misses and decodes.
//
// The object is handed over, not shared: take() removes it, the caller changes it and
// keeps it again with its new bytes. Kept inside a unit of work it is visible to that
// unit's later inputs at once (a batch of one session's events), and to other units only
// once the unit commits; a discarded unit's entry is dropped. Nothing else holds it, so
// no reader sees it change under it.

interface Entry<T> {
  bytes: Uint8Array;
  value: T;
}

const same = (a: Uint8Array, b: Uint8Array) => a.length === b.length && Buffer.compare(a, b) === 0;

export class DecodedCache<T> {
  private readonly committed: Lru<string, Entry<T>>;
  /** Entries kept by a unit not committed yet, with the unit they belong to. */
  private readonly pending = new Map<string, Entry<T> & { unit: object }>();

  constructor(max: number) {
    this.committed = new Lru(max);
  }

  /** Entries held (committed and pending): a discarded unit leaves none behind. */
  get size(): number {
    return this.committed.size + this.pending.size;
  }

  /** What `bytes` decode to: the value kept with equal bytes (now the caller's to change), else `decode(bytes)`. */
  take(key: string, bytes: Uint8Array, decode: (b: Uint8Array) => T): T {
    const unit = unitToken();
    const p = this.pending.get(key);
    if (p && p.unit === unit) {
      this.pending.delete(key);
      if (same(p.bytes, bytes)) return p.value;
    }
    const c = this.committed.peek(key);
    if (c) {
      this.committed.delete(key);
      if (same(c.bytes, bytes)) return c.value;
    }
    return decode(bytes);
  }

  /** `value` encodes to `bytes`, which the caller writes to `key` in the current unit (outside one: not kept). */
  keep(key: string, bytes: Uint8Array, value: T): void {
    const unit = unitToken();
    if (!unit) return;
    const e = { bytes, value, unit };
    this.pending.set(key, e);
    // (a later input of the same unit may have taken it and kept another)
    const mine = () => this.pending.get(key) === e && this.pending.delete(key);
    afterCommit(() => {
      if (mine()) this.committed.set(key, { bytes, value });
    });
    onDiscard(mine);
  }
}
