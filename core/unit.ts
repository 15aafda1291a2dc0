import { AsyncLocalStorage } from 'node:async_hooks';
import { inject, injectable } from 'tsyringe';
import { AppError } from './errors.ts';
import type { Logger } from './logger.ts';
import type { AdmitRequest, AdmitResult, BytesUpdate, Store, UpdateResult } from './store/store.ts';
import { TOKENS } from './tokens.ts';

// The unit of work: everything one input causes (detector state, the tree's decision,
// directives, incident changes, the outbox entries that deliver them, the input's id)
// is buffered while the input is judged and committed in one atomic step, compared
// with what was read (docs/architecture.md, "One durable path"). Nothing of an input
// that failed is written; a client that gets the 503 retries, and a retry of an input
// already committed is a repeat (its id is in the store, shared by every instance).
// What must happen after the commit (delivering an alert) is read from the durable
// outbox: at once by the instance that committed it, and by the reconciler of any
// instance on start and on the tick.

/** A value as a unit reads it: JSON text, bytes, or absent (null). */
export type Raw = string | Uint8Array | null;

/** One write of a unit, applied in order at commit. */
export type UnitWrite =
  | { op: 'set'; key: string; value: string | Uint8Array; ttlMs: number }
  | { op: 'del'; key: string }
  | { op: 'hincr'; key: string; deltas: Record<string, number>; ttlMs: number }
  | { op: 'zadd'; key: string; member: string; score: number }
  | { op: 'lpush'; key: string; value: string; cap: number; ttlMs: number }
  | { op: 'outbox'; value: string };

export interface UnitPlan {
  /** Input ids: one already stored makes the whole unit a repeat (nothing is written). */
  inputs: string[];
  inputTtlMs: number;
  /** What the unit read, key by key (and whether as bytes): the commit happens only if each still holds it. */
  reads: [key: string, value: Raw, bytes: boolean][];
  writes: UnitWrite[];
}

export type UnitOutcome =
  /** Committed; the ids of the outbox entries it wrote, in order. */
  | { ok: true; outbox: string[] }
  /** Some of its input ids are stored already (`present`): all of them makes the unit a repeat. */
  | { ok: false; repeat: true; present: string[] }
  /** Keys read that changed meanwhile, with what they hold now. */
  | { ok: false; conflicts: [key: string, value: Raw][] };

/** What a store backend gives units (MemoryStore, RedisStore). */
export interface UnitBackend {
  /**
   * One process owns the memory backend: its units run one at a time, so a commit never
   * conflicts and a judge's in-process state is never run twice for one input.
   */
  readonly serialUnits: boolean;
  /** A value without a round trip: the store's own (memory), or what this process last saw (a guess the commit checks); undefined: unknown. */
  peekRaw(key: string, bytes: boolean): Raw | undefined;
  readRaw(key: string, bytes: boolean): Promise<Raw>;
  /** An input id this process knows is committed (a cache; the store decides). */
  inputSeen(key: string): boolean;
  commitUnit(plan: UnitPlan): UnitOutcome | Promise<UnitOutcome>;
  /** Outbox entries, oldest first; only those written before `before` (epoch ms) when given. */
  outboxRead(limit: number, before?: number): Promise<{ id: string; value: string }[]>;
  outboxDone(ids: readonly string[]): Promise<void>;
}

/** An outbox entry as a handler gets it. */
export interface OutboxEntry {
  kind: string;
  [field: string]: unknown;
}

class Unit {
  /** What was read first, per key, and whether as bytes (compared at commit). */
  readonly reads = new Map<string, [Raw, boolean]>();
  /** The unit's view: what it read or wrote last, per key. */
  readonly view = new Map<string, Raw>();
  readonly writes: UnitWrite[] = [];
  /**
   * Where the last set/del (or counter add) of a key sits in `writes`: a batch's later
   * write of the key replaces it there (the commit is atomic, so only the last value of
   * a key and the sum of its counter deltas matter; keys of different kinds never share
   * a name).
   */
  readonly lastWrite = new Map<string, number>();
  readonly inputs: string[] = [];
  /** Counter deltas not yet committed, per key (read back by counts()). */
  readonly deltas = new Map<string, Record<string, number>>();
  readonly pushed = new Map<string, string[]>();
  readonly outbox: OutboxEntry[] = [];
  readonly after: (() => void)[] = [];
  readonly discard: (() => void)[] = [];
  /** Run once its judging is done, inside it, before the commit (beforeCommit). */
  readonly before: (() => void | Promise<void>)[] = [];
  /** A value was taken from a guess: the commit must check it even if nothing is written. */
  guessed = false;
  closed = false;
}

const als = new AsyncLocalStorage<Unit>();
const NO_INPUTS: ReadonlySet<string> = new Set();

/** The unit being judged now, if any (open). */
function current(): Unit | undefined {
  const u = als.getStore();
  return u && !u.closed ? u : undefined;
}

/**
 * Runs `fn` once the current unit commits (at once outside a unit): in-process caches
 * that mirror stored state are updated here, so a unit that is discarded (a conflict, a
 * store outage) leaves them as they were.
 */
export function afterCommit(fn: () => void): void {
  const u = current();
  if (u) u.after.push(fn);
  else fn();
}

/**
 * Runs `fn` if the current unit is discarded instead of committed (a conflict judged
 * again, a store outage, an error): an in-process cache changed while judging is put
 * back (or forgotten) with it. Outside a unit nothing is discarded: `fn` never runs.
 */
export function onDiscard(fn: () => void): void {
  current()?.discard.push(fn);
}

/**
 * Runs `fn` once the current unit's judging is done, still inside the unit (its store
 * writes join the commit), before it commits: a working copy kept in the process while
 * the unit's inputs change it is written here, once (core/decoded.ts). Outside a unit:
 * at once.
 */
export function beforeCommit(fn: () => void | Promise<void>): void | Promise<void> {
  const u = current();
  if (!u) return fn();
  u.before.push(fn);
}

/** Whether code runs inside a unit of work. */
export function inUnit(): boolean {
  return current() !== undefined;
}

/** The open unit as an opaque token (undefined outside one): tells whether two calls share a unit. */
export function unitToken(): object | undefined {
  return current();
}

const isBytes = (v: Raw): v is Uint8Array => v instanceof Uint8Array;

/** The unit's last write of a key that a later one may replace (set, del, counter add). */
const lastWrite = (u: Unit, key: string): UnitWrite | undefined => {
  const at = u.lastWrite.get(key);
  return at === undefined ? undefined : u.writes[at];
};
const record = (u: Unit, key: string, w: UnitWrite): void => {
  u.lastWrite.set(key, u.writes.length);
  u.writes.push(w);
};

/**
 * The store every part of Vigil is given: outside a unit it is the backend; inside one
 * its reads come from the unit's view and its writes are buffered for the commit.
 * Plugins need no change to take part: they use the Store they were given.
 */
export class UnitStore implements Store {
  constructor(readonly base: Store & UnitBackend) {}

  get backend() {
    return this.base.backend;
  }

  /**
   * A read inside a unit. On a shared store an unknown key is guessed absent (a new
   * session's keys mostly are): the commit checks every guess, and a wrong one costs a
   * second judging with the real values the commit answered, never a wrong result.
   */
  private read(u: Unit, key: string, bytes: boolean): Raw | Promise<Raw> {
    if (u.view.has(key)) return u.view.get(key) as Raw;
    const g = this.base.peekRaw(key, bytes);
    if (g !== undefined || !this.base.serialUnits) {
      if (!this.base.serialUnits) u.guessed = true;
      const v = g ?? null;
      u.reads.set(key, [v, bytes]);
      u.view.set(key, v);
      return v;
    }
    return this.base.readRaw(key, bytes).then((v) => {
      if (!u.view.has(key)) {
        u.reads.set(key, [v, bytes]);
        u.view.set(key, v);
      }
      return u.view.get(key) as Raw;
    });
  }

  private write(u: Unit, key: string, value: string | Uint8Array | undefined, ttlMs = 0): void {
    if (value === undefined) {
      if (u.view.get(key) === null) return;
      u.view.set(key, null);
      this.put(u, { op: 'del', key });
      return;
    }
    u.view.set(key, value);
    this.put(u, { op: 'set', key, value, ttlMs });
  }

  /** A set or del of a key, in place of the unit's earlier set or del of it. */
  private put(u: Unit, w: UnitWrite & { op: 'set' | 'del' }): void {
    const prev = lastWrite(u, w.key);
    if (prev?.op === 'set' || prev?.op === 'del') u.writes[u.lastWrite.get(w.key)!] = w;
    else record(u, w.key, w);
  }

  async get<T>(key: string): Promise<T | undefined> {
    const u = current();
    if (!u) return this.base.get<T>(key);
    const v = await this.read(u, key, false);
    return v === null ? undefined : (JSON.parse(isBytes(v) ? Buffer.from(v).toString() : v) as T);
  }

  async set<T>(key: string, value: T, ttlMs?: number): Promise<void> {
    const u = current();
    if (!u) return this.base.set(key, value, ttlMs);
    this.write(u, key, JSON.stringify(value), ttlMs);
  }

  async del(key: string): Promise<void> {
    const u = current();
    if (!u) return this.base.del(key);
    // Deleting needs no read: the commit deletes whatever is there.
    u.view.set(key, null);
    this.put(u, { op: 'del', key });
  }

  async update<T, R>(key: string, fn: (current: T | undefined) => UpdateResult<T, R>): Promise<R> {
    const u = current();
    if (!u) return this.base.update(key, fn);
    let v = this.read(u, key, false);
    if (typeof (v as Promise<Raw>)?.then === 'function') v = await v;
    const cur =
      v === null
        ? undefined
        : (JSON.parse(isBytes(v as Raw) ? Buffer.from(v as Uint8Array).toString() : (v as string)) as T);
    const r = fn(cur);
    const next = r.value === undefined ? undefined : JSON.stringify(r.value);
    // An unchanged value with no new expiry is no write (most updates of a quiet session).
    if (next !== v || r.ttlMs) this.write(u, key, next, r.ttlMs);
    return r.result;
  }

  async setIfAbsent(key: string, value: string, ttlMs: number): Promise<boolean> {
    const u = current();
    if (!u) return this.base.setIfAbsent(key, value, ttlMs);
    if ((await this.read(u, key, false)) !== null) return false;
    this.write(u, key, JSON.stringify(value), ttlMs);
    return true;
  }

  // Not part of a unit: sliding windows and the channel gate run where they are called
  // (the service's admission, the notifier's delivery after a commit).
  hit(key: string, now: number, windowMs: number, max: number) {
    return this.base.hit(key, now, windowMs, max);
  }

  admit(q: AdmitRequest): Promise<AdmitResult> {
    return this.base.admit(q);
  }

  async indexAdd(key: string, member: string, score: number): Promise<void> {
    const u = current();
    if (!u) return this.base.indexAdd(key, member, score);
    u.writes.push({ op: 'zadd', key, member, score });
  }

  indexTrim(key: string, keep: number, below?: number): Promise<string[]> {
    return this.base.indexTrim(key, keep, below);
  }

  async pushCapped<T>(key: string, value: T, cap: number, ttlMs?: number): Promise<void> {
    const u = current();
    if (!u) return this.base.pushCapped(key, value, cap, ttlMs);
    const s = JSON.stringify(value);
    u.writes.push({ op: 'lpush', key, value: s, cap, ttlMs: ttlMs ?? 0 });
    u.pushed.set(key, [s, ...(u.pushed.get(key) ?? [])]);
  }

  async list<T>(key: string, limit: number): Promise<T[]> {
    const u = current();
    const stored = await this.base.list<T>(key, limit);
    const mine = u?.pushed.get(key);
    if (!mine) return stored;
    return [...mine.map((s) => JSON.parse(s) as T), ...stored].slice(0, limit);
  }

  async incr(key: string, deltas: Readonly<Record<string, number>>, ttlMs?: number): Promise<Record<string, number>> {
    const u = current();
    if (!u) return this.base.incr(key, deltas, ttlMs);
    // Counters commute: the commit adds the deltas to whatever is there (no compare).
    const before = await this.counts(key, Object.keys(deltas));
    const out: Record<string, number> = {};
    for (const [f, d] of Object.entries(deltas)) out[f] = (before[f] ?? 0) + d;
    this.buffer(u, key, deltas, ttlMs);
    return out;
  }

  async add(key: string, deltas: Readonly<Record<string, number>>, ttlMs?: number): Promise<void> {
    const u = current();
    if (!u) return this.base.add(key, deltas, ttlMs);
    this.buffer(u, key, deltas, ttlMs);
  }

  private buffer(u: Unit, key: string, deltas: Readonly<Record<string, number>>, ttlMs?: number): void {
    // Both sums are the unit's own objects, so a batch's adds merge in place (no copy per add).
    const acc = u.deltas.get(key);
    if (acc) for (const f in deltas) acc[f] = (acc[f] ?? 0) + deltas[f]!;
    else u.deltas.set(key, { ...deltas });
    const prev = lastWrite(u, key);
    if (prev?.op === 'hincr') {
      // (counters add up: one write with the sums; the latest expiry)
      for (const f in deltas) prev.deltas[f] = (prev.deltas[f] ?? 0) + deltas[f]!;
      if (ttlMs) prev.ttlMs = ttlMs;
      return;
    }
    record(u, key, { op: 'hincr', key, deltas: { ...deltas }, ttlMs: ttlMs ?? 0 });
  }

  async counts(key: string, fields?: readonly string[]): Promise<Record<string, number>> {
    const stored = await this.base.counts(key, fields);
    const mine = current()?.deltas.get(key);
    if (!mine) return stored;
    const out = { ...stored };
    for (const [f, d] of Object.entries(mine)) if (!fields || fields.includes(f)) out[f] = (out[f] ?? 0) + d;
    return out;
  }

  async getBytes(key: string): Promise<Uint8Array | undefined> {
    const u = current();
    if (!u) return this.base.getBytes(key);
    const v = await this.read(u, key, true);
    return v === null ? undefined : new Uint8Array(isBytes(v) ? v : Buffer.from(v));
  }

  async setBytes(key: string, value: Uint8Array, ttlMs?: number): Promise<void> {
    const u = current();
    if (!u) return this.base.setBytes(key, value, ttlMs);
    this.write(u, key, new Uint8Array(value), ttlMs);
  }

  async updateBytes<R>(key: string, fn: (current: Uint8Array | undefined) => BytesUpdate<R>): Promise<R> {
    const u = current();
    if (!u) return this.base.updateBytes(key, fn);
    let v = this.read(u, key, true);
    if (typeof (v as Promise<Raw>)?.then === 'function') v = await v;
    const cur =
      v === null ? undefined : new Uint8Array(isBytes(v as Raw) ? (v as Uint8Array) : Buffer.from(v as string));
    const r = fn(cur);
    if (r.value !== undefined) this.write(u, key, new Uint8Array(r.value), r.ttlMs);
    return r.result;
  }

  async casBytes(key: string, expected: Uint8Array | undefined, next: Uint8Array, ttlMs?: number): Promise<boolean> {
    const u = current();
    if (!u) return this.base.casBytes(key, expected, next, ttlMs);
    const v = await this.read(u, key, true);
    const cur = v === null ? undefined : isBytes(v) ? v : Buffer.from(v);
    if (
      cur === undefined
        ? expected !== undefined
        : expected === undefined || !Buffer.from(cur).equals(Buffer.from(expected))
    )
      return false;
    this.write(u, key, new Uint8Array(next), ttlMs);
    return true;
  }

  keys(prefix: string): Promise<string[]> {
    return this.base.keys(prefix);
  }

  ping(): Promise<boolean> {
    return this.base.ping();
  }

  close(): Promise<void> {
    return this.base.close();
  }
}

/** How many times a unit is judged again after a conflict before the client gets a 503. */
const MAX_ATTEMPTS = 20;
/** The reconciler leaves entries younger than this to the instance that wrote them. */
const RECONCILE_AFTER_MS = 5_000;
/** Input ids are kept this long: a client's retry comes within it. */
export const INPUT_TTL_MS = 15 * 60_000;

/**
 * Delivers one outbox entry (`id`: its id in the outbox); the entry is removed once it
 * resolves. Delivering an entry twice must be safe (the reconciler may).
 */
export type OutboxHandler = (entry: OutboxEntry, id: string) => Promise<unknown>;

type Delivery = [id: string, entry: OutboxEntry];

/**
 * Runs units: judge, commit (or judge again on a conflict), then the after-commit work
 * and the outbox entries the unit wrote. One per Vigil instance.
 */
@injectable()
export class Units {
  private readonly handlers = new Map<string, OutboxHandler>();
  /** The memory backend's units, one at a time. */
  private tail: Promise<unknown> = Promise.resolve();
  /** Outbox entries being delivered by this process now (the reconciler leaves them). */
  private readonly draining = new Set<string>();

  constructor(
    @inject(TOKENS.Store) private readonly store: UnitStore,
    @inject(TOKENS.Logger) private readonly logger: Logger,
  ) {}

  /** Who delivers outbox entries of a kind (the notifier: `alert`). */
  handle(kind: string, h: OutboxHandler): void {
    this.handlers.set(kind, h);
  }

  /** Appends an entry to the current unit's outbox (outside a unit: its own unit). */
  async emit(entry: OutboxEntry): Promise<void> {
    const u = current();
    if (u) {
      u.outbox.push(entry);
      u.writes.push({ op: 'outbox', value: JSON.stringify(entry) });
      return;
    }
    await this.run(async () => this.emit(entry));
  }

  /**
   * Judges `fn` as one unit: its store writes commit together, or not at all. Inside a
   * unit it joins it. `inputs` are the ids of the inputs it judges; `fn` gets those
   * already committed (`seen`) and must skip them: a batch retried after part of it
   * committed judges only the rest. When every input is committed already the unit is a
   * repeat: `fn` is not run and `repeat` is true (nothing written).
   */
  async run<T>(
    fn: (seen: ReadonlySet<string>) => Promise<T> | T,
    inputs: readonly string[] = [],
  ): Promise<{ value?: T; repeat: boolean }> {
    if (current()) return { value: await fn(NO_INPUTS), repeat: false };
    const base = this.store.base;
    let done: { value?: T; repeat: boolean; entries: Delivery[]; after: (() => void)[] };
    if (base.serialUnits) {
      const p = this.tail.then(() => this.attempts(fn, inputs));
      this.tail = p.catch(() => {});
      done = await p;
    } else done = await this.attempts(fn, inputs);
    for (const f of done.after) {
      try {
        f();
      } catch (err) {
        this.logger.warn({ err: (err as Error).message }, 'after-commit step failed');
      }
    }
    if (done.entries.length) await this.deliver(done.entries);
    return { value: done.value, repeat: done.repeat };
  }

  private async attempts<T>(fn: (seen: ReadonlySet<string>) => Promise<T> | T, inputs: readonly string[]) {
    const base = this.store.base;
    // (checked here, inside the memory backend's one-at-a-time section: a repeat is never judged)
    const seen = new Set<string>();
    for (const k of inputs) if (base.inputSeen(k)) seen.add(k);
    const REPEAT = { repeat: true, entries: [], after: [] };
    if (seen.size && inputs.every((k) => seen.has(k))) return REPEAT;
    for (let attempt = 0; attempt < MAX_ATTEMPTS; attempt++) {
      const u = new Unit();
      for (const k of inputs) if (!seen.has(k)) u.inputs.push(k);
      let value: T;
      let r: UnitOutcome;
      try {
        try {
          value = await als.run(u, fn, seen);
          // (in order; one may add another)
          for (let i = 0; i < u.before.length; i++) await als.run(u, u.before[i]);
        } finally {
          u.closed = true;
        }
        if (!u.writes.length && !u.inputs.length && !u.guessed)
          return { value, repeat: false, entries: [], after: u.after };
        r = await base.commitUnit({
          inputs: u.inputs,
          inputTtlMs: INPUT_TTL_MS,
          reads: [...u.reads].map(([k, [v, b]]) => [k, v, b] as [string, Raw, boolean]),
          writes: u.writes,
        });
      } catch (err) {
        this.discarded(u);
        throw err;
      }
      if (!r.ok) this.discarded(u);
      if (r.ok) {
        return {
          value,
          repeat: false,
          entries: r.outbox.map((id, i): Delivery => [id, u.outbox[i]]),
          after: u.after,
        };
      }
      if ('repeat' in r) {
        // Inputs another instance (or an earlier try of this batch) committed: judge the rest.
        for (const k of r.present) seen.add(k);
        if (inputs.every((k) => seen.has(k))) return REPEAT;
      }
      // Another writer changed what this unit read: judge again against what is there now.
    }
    throw new AppError('STORE_UNAVAILABLE', 'the store kept changing under this input; retry', { retryable: true });
  }

  private discarded(u: Unit): void {
    for (const f of u.discard.reverse()) {
      try {
        f();
      } catch (err) {
        this.logger.warn({ err: (err as Error).message }, 'discard step failed');
      }
    }
  }

  /** Delivers outbox entries and marks them done; one that fails stays for the reconciler. */
  private async deliver(entries: readonly Delivery[]): Promise<number> {
    let n = 0;
    for (const [id, e] of entries) {
      if (this.draining.has(id)) continue;
      this.draining.add(id);
      try {
        const h = this.handlers.get(e.kind);
        if (!h) throw new Error(`no handler for outbox entries of kind "${e.kind}"`);
        await h(e, id);
        await this.store.base.outboxDone([id]);
        n++;
      } catch (err) {
        this.logger.warn(
          { err: (err as Error).message, entry: id },
          'outbox entry not delivered yet; the reconciler will',
        );
      } finally {
        this.draining.delete(id);
      }
    }
    return n;
  }

  /**
   * The reconciler: outbox entries a crash, an outage or another instance left behind,
   * delivered now (on start: all of them; on the tick: those older than a few seconds,
   * which their own instance did not finish). Delivering twice is safe: the channel
   * gate answers a transition it passed as it did, and the job id refuses a copy.
   */
  async reconcile(all = false, now = Date.now()): Promise<number> {
    let n = 0;
    for (let round = 0; round < 100; round++) {
      const batch = await this.store.base.outboxRead(200, all ? undefined : now - RECONCILE_AFTER_MS);
      const todo = batch.filter((b) => !this.draining.has(b.id));
      if (!todo.length) break;
      const entries: Delivery[] = [];
      for (const b of todo) {
        try {
          entries.push([b.id, JSON.parse(b.value) as OutboxEntry]);
        } catch {
          await this.store.base.outboxDone([b.id]);
        }
      }
      const done = await this.deliver(entries);
      n += done;
      if (done < entries.length || batch.length < 200) break;
    }
    if (n) this.logger.warn({ entries: n }, 'outbox entries delivered by the reconciler');
    return n;
  }
}
