import type { AdmitRequest, AdmitResult } from './admit.ts';

// The store contract: everything Vigil keeps (alert lifecycle, last-notified marks,
// rate limits, knobs, mode and breaker state, delivery log, judge windows) goes
// through it, so the in-process backend and Redis behave the same. One contract
// test suite (store.test.ts) runs against both.

export interface UpdateResult<T, R> {
  /** The new value; `undefined` deletes the key. */
  value: T | undefined;
  /** What the caller gets back from update(). */
  result: R;
  /** Optional expiry of the new value. */
  ttlMs?: number;
}

export interface BytesUpdate<R> {
  /** The bytes to write; undefined leaves the key as it is (a decision not to write). */
  value: Uint8Array | undefined;
  result: R;
  ttlMs?: number;
}

export interface Store {
  readonly backend: 'memory' | 'redis';
  get<T>(key: string): Promise<T | undefined>;
  set<T>(key: string, value: T, ttlMs?: number): Promise<void>;
  del(key: string): Promise<void>;
  /**
   * Atomic read-modify-write of a JSON value. `fn` must be pure: on Redis it may run
   * again when another instance changed the key in between (compare-and-set).
   */
  update<T, R>(key: string, fn: (current: T | undefined) => UpdateResult<T, R>): Promise<R>;
  /** SET NX with expiry: true when this caller took the key. */
  setIfAbsent(key: string, value: string, ttlMs: number): Promise<boolean>;
  /**
   * Sliding-window counter: records one hit at `now` unless `max` hits already fall
   * inside the last `windowMs`. Returns whether the hit was admitted.
   */
  hit(key: string, now: number, windowMs: number, max: number): Promise<{ allowed: boolean; count: number }>;
  /**
   * The notifier's per-channel gate, atomic in one step (the rules: core/store/admit.ts,
   * `admitRule`): what this channel was told of the incident decides whether the
   * transition goes out, and as which state; the quiet window and the rate limit hold
   * only a new incident for the channel, never a rise of one it knows.
   */
  admit(q: AdmitRequest): Promise<AdmitResult>;
  /** A sorted index (a set ordered by score): add `member` at `score`, or move it up to `score` (never down). */
  indexAdd(key: string, member: string, score: number): Promise<void>;
  /**
   * Removes and returns the members with the lowest scores beyond the first `keep` from
   * the top, only those scored below `below` (members at or above it stay, past `keep`).
   */
  indexTrim(key: string, keep: number, below?: number): Promise<string[]>;
  /** Prepend to a list and keep the newest `cap` entries; `ttlMs` (optional) renews the list's expiry. */
  pushCapped<T>(key: string, value: T, cap: number, ttlMs?: number): Promise<void>;
  /** Newest first. */
  list<T>(key: string, limit: number): Promise<T[]>;
  /**
   * Counters: adds each delta to its numeric field of the hash at `key` atomically (fields
   * start at 0) and returns the new value of every field named; `ttlMs` (optional) renews
   * the hash's expiry. Many writers on one key never conflict (no compare-and-set).
   */
  incr(key: string, deltas: Readonly<Record<string, number>>, ttlMs?: number): Promise<Record<string, number>>;
  /**
   * incr() when the new values are not needed: nothing is read back (inside a unit of
   * work the deltas only join the commit, no read before it).
   */
  add(key: string, deltas: Readonly<Record<string, number>>, ttlMs?: number): Promise<void>;
  /** The counters at `key`: the fields named (0 when absent), or every field. */
  counts(key: string, fields?: readonly string[]): Promise<Record<string, number>>;
  /** Binary values (compact judge state). */
  getBytes(key: string): Promise<Uint8Array | undefined>;
  setBytes(key: string, value: Uint8Array, ttlMs?: number): Promise<void>;
  /**
   * update() for binary values (compact judge state): `fn` must be pure, it may run
   * again on a conflict. On Redis the usual case is one round trip: the compare-and-set
   * is tried first against the bytes this process last saw.
   */
  updateBytes<R>(key: string, fn: (current: Uint8Array | undefined) => BytesUpdate<R>): Promise<R>;
  /** Set only if the current bytes equal `expected` (undefined: key absent). */
  casBytes(key: string, expected: Uint8Array | undefined, next: Uint8Array, ttlMs?: number): Promise<boolean>;
  /** Keys starting with `prefix` (the store's own namespace prefix is not included). */
  keys(prefix: string): Promise<string[]>;
  /** Reachability for /health. */
  ping(): Promise<boolean>;
  close(): Promise<void>;
}

export type { AdmitRequest, AdmitResult } from './admit.ts';

export function bytesEqual(a: Uint8Array | undefined, b: Uint8Array | undefined): boolean {
  if (a === undefined || b === undefined) return a === b;
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}
