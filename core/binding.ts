import { createHash, timingSafeEqual } from 'node:crypto';
import type { Clock } from './clock.ts';
import { AppError } from './errors.ts';
import { Lru } from './lru.ts';
import { SESSION_KEY_HEADER } from './session-key.ts';
import { keys, TTL } from './store/keys.ts';
import type { Store } from './store/store.ts';
import { afterCommit } from './unit.ts';

// Which sensor a session belongs to (docs/api.md, Session keys). The first input that
// names a session with a key binds the session to that key (trust on first use): the
// store keeps a hash of the key, set only if absent, so every instance agrees on the
// first. From then on an input naming the session without that key is refused whole.
// A session no key has named yet takes keyless inputs as before (sensors that send no
// key, embedders' in-process calls). Bindings never change, so each instance caches
// the ones it has seen; an active session's binding is renewed now and then, so it
// lives as long as the session does. Run inside a unit of work (POST /progress), the
// reads are checked by its commit and a new binding is written with it: the cache
// takes them once committed.

/** Bindings cached per process (a binding never changes: a cached one is never stale). */
const CACHED = 100_000;
/** A cached binding older than this is written again with a fresh expiry when its key is used. */
const RENEW_MS = 3_600_000;

/**
 * What the store keeps of a key: the first 128 bits of its sha256, base64url (22
 * characters; a binding costs about 140 bytes in Redis). Finding another key with the
 * same 128 bits is as hard as guessing the key.
 */
const hashOf = (key: string) => createHash('sha256').update(key).digest().subarray(0, 16).toString('base64url');

function same(a: string, b: string): boolean {
  const x = Buffer.from(a, 'base64url');
  const y = Buffer.from(b, 'base64url');
  return x.length === y.length && timingSafeEqual(x, y);
}

/** A refused input: the session named is bound and the request lacks its key. */
export function keyMismatch(session: string, why: 'missing' | 'wrong'): AppError {
  const id = session.slice(0, 128);
  return new AppError(
    'SESSION_KEY_MISMATCH',
    why === 'missing'
      ? `headers.${SESSION_KEY_HEADER}: no key for session "${id}", which is bound to its sensor's key`
      : `headers.${SESSION_KEY_HEADER}: the key for session "${id}" is not the key it is bound to`,
  );
}

export class SessionBindings {
  private readonly cache = new Lru<string, { hash: string; at: number }>(CACHED);

  constructor(
    private readonly store: Store,
    private readonly clock: Clock,
  ) {}

  /** The hash a session is bound to, or undefined while no key has named it. */
  private async bound(id: string): Promise<{ hash: string; at: number } | undefined> {
    const c = this.cache.get(id);
    if (c) return c;
    const hash = await this.store.get<string>(keys.binding(id));
    if (hash === undefined) return undefined;
    const e = { hash, at: this.clock.now() };
    // (in a unit the read may be a guess the commit checks: cached once it is committed)
    afterCommit(() => this.cache.set(id, e));
    return e;
  }

  /**
   * Checks every session an input names against its binding, then binds the ones no key
   * named before to the key given for them. `keyOf` gives the request's key for a session.
   * Throws SESSION_KEY_MISMATCH when a bound session has no key or another one; that is
   * found before anything is written. Nothing is read or written for an empty list.
   */
  async check(sessions: Iterable<string>, keyOf: (session: string) => string | undefined): Promise<void> {
    const ids = [...new Set(sessions)];
    if (!ids.length) return;
    const found = await Promise.all(ids.map((id) => this.bound(id)));
    const now = this.clock.now();
    const fresh: { id: string; hash: string }[] = [];
    const renew: { id: string; hash: string }[] = [];
    for (let i = 0; i < ids.length; i++) {
      const id = ids[i];
      const key = keyOf(id);
      const b = found[i];
      if (!b) {
        if (key !== undefined) fresh.push({ id, hash: hashOf(key) });
        continue;
      }
      if (key === undefined) throw keyMismatch(id, 'missing');
      if (!same(hashOf(key), b.hash)) throw keyMismatch(id, 'wrong');
      if (now - b.at > RENEW_MS) renew.push({ id, hash: b.hash });
    }
    for (const r of renew) {
      await this.store.set(keys.binding(r.id), r.hash, TTL.binding);
      afterCommit(() => this.cache.set(r.id, { hash: r.hash, at: now }));
    }
    for (const f of fresh) {
      if (!(await this.store.setIfAbsent(keys.binding(f.id), f.hash, TTL.binding))) {
        // Another request (or instance) bound it first: its key decides.
        const won = await this.store.get<string>(keys.binding(f.id));
        if (won !== undefined && !same(f.hash, won)) throw keyMismatch(f.id, 'wrong');
      }
      afterCommit(() => this.cache.set(f.id, { hash: f.hash, at: now }));
    }
  }

  /** Whether a session is bound (readouts and tests); never says to what. */
  async isBound(id: string): Promise<boolean> {
    return (await this.bound(id)) !== undefined;
  }
}
