import type { Cluster, Redis, RedisOptions } from 'ioredis';
import { type AlertState, SEVERITIES } from '../alert.ts';
import { AppError } from '../errors.ts';
import { Lru } from '../lru.ts';
import type { Raw, UnitBackend, UnitOutcome, UnitPlan } from '../unit.ts';
import { checkPrefix, parseRedisUrl, primaries, redisClient } from './redis-connect.ts';
import { storeError } from './redis-errors.ts';
import { luaScript } from './scripts.ts';
import { hasStamp, STAMP_BYTES, stamped, unstamped } from './stamps.ts';
import {
  type AdmitRequest,
  type AdmitResult,
  type BytesUpdate,
  bytesEqual,
  type Store,
  type UpdateResult,
} from './store.ts';

const EMPTY = Buffer.alloc(0);

const CAS = luaScript('cas');
const TRIM = luaScript('trim');
const HIT = luaScript('hit');
const ADMIT = luaScript('admit');
const PUSH_CAPPED = luaScript('push-capped');
const INCR = luaScript('incr');
const UNIT = luaScript('unit');

/** The unit outbox's stream (one per namespace). */
export const OUTBOX_KEY = 'outbox';

type Commands = {
  vigilPushCapped(key: string, value: string, cap: number, ttl: number): Promise<number>;
  vigilIncr(key: string, ttl: number, ...fieldDeltas: (string | number)[]): Promise<string[]>;
  vigilAdmit(...keysThenArgs: (string | number)[]): Promise<[number, string, number?]>;
  vigilCas(
    key: string,
    expected: string | Buffer,
    mustExist: string,
    next: string | Buffer,
    op: string,
    ttl: number,
  ): Promise<[number, (string | null)?]>;
  vigilCasBuffer(
    key: string,
    expected: Buffer,
    mustExist: string,
    next: Buffer,
    op: string,
    ttl: number,
  ): Promise<[number, (Buffer | null)?]>;
  vigilHit(key: string, now: number, windowMs: number, max: number, member: string): Promise<[number, number]>;
  vigilTrim(key: string, keep: number, below: number | string): Promise<string[]>;
};

export interface RedisStoreOptions {
  /** One server, a cluster or a Sentinel-managed primary: the forms of core/store/redis-connect.ts. */
  url: string;
  /** Namespace for every key; a test run uses its own and deletes it after. */
  prefix: string;
  /** A command that has no answer by then fails (Redis down must not hang a request). */
  timeoutMs?: number;
  redisOptions?: RedisOptions;
}

const GUARDED = [
  'get',
  'set',
  'del',
  'update',
  'setIfAbsent',
  'hit',
  'admit',
  'pushCapped',
  'indexAdd',
  'indexTrim',
  'list',
  'incr',
  'counts',
  'getBytes',
  'setBytes',
  'casBytes',
  'updateBytes',
  'keys',
  'readRaw',
  'commitUnit',
  'outboxRead',
  'outboxDone',
] as const;

/** The gate script's reply ({1, as} or {0, why, n}) as the store contract answers it. */
function admitReply([ok, why, n]: [number, string, number?]): AdmitResult {
  if (ok === 1) return { ok: true, as: why as AlertState };
  if (why === 'quiet') return { ok: false, why: 'quiet', last: n ?? 0 };
  if (why === 'rate') return { ok: false, why: 'rate', count: n ?? 0 };
  return { ok: false, why: why === 'stale' ? 'stale' : 'untold' };
}

export class RedisStore implements Store, UnitBackend {
  readonly backend = 'redis' as const;
  readonly serialUnits = false;
  /** Input ids this process committed or found committed (a cache: the store decides). */
  private readonly inputsSeen = new Lru<string, true>(50_000);
  readonly client: (Redis | Cluster) & Commands;
  private readonly p: string;
  private seq = 0;
  /**
   * Last value this process read or wrote per key (bounded). update() first tries its
   * compare-and-set against it, so the usual case is one round trip; a stale entry only
   * costs a retry, never correctness, because Redis checks the value.
   */
  private readonly lastSeen = new Map<string, string | null>();
  /** The same for binary values (judge state), as stored (stamped): one round trip per event while this process owns the session. */
  private readonly lastBytes = new Lru<string, Buffer | null>(5_000);
  /** The stamp of each binary value handed to a unit, so its commit compares only that. */
  private readonly stampOf = new WeakMap<Uint8Array, Buffer>();

  /** The server this store talks to (a script touching other keys must run on the same one). */
  readonly url: string;

  constructor(opts: RedisStoreOptions) {
    this.url = opts.url;
    this.p = `${opts.prefix}:`;
    const target = parseRedisUrl(opts.url);
    checkPrefix(target, opts.prefix);
    // Fail fast when Redis is down: one reconnect try per command, and a command timeout.
    const client = redisClient(target, {
      maxRetriesPerRequest: 1,
      commandTimeout: opts.timeoutMs ?? 1_000,
      connectTimeout: 2_000,
      // Commands issued in the same tick (concurrent requests, the detectors of one
      // event) go out in one write.
      enableAutoPipelining: true,
      ...opts.redisOptions,
    });
    client.defineCommand('vigilCas', { numberOfKeys: 1, lua: CAS });
    client.defineCommand('vigilHit', { numberOfKeys: 1, lua: HIT });
    client.defineCommand('vigilAdmit', { numberOfKeys: 1 + SEVERITIES.length, lua: ADMIT });
    client.defineCommand('vigilTrim', { numberOfKeys: 1, lua: TRIM });
    client.defineCommand('vigilPushCapped', { numberOfKeys: 1, lua: PUSH_CAPPED });
    client.defineCommand('vigilIncr', { numberOfKeys: 1, lua: INCR });
    client.defineCommand('vigilUnit', { lua: UNIT });
    // Errors surface on the calls that fail; an unhandled 'error' event would crash the process.
    client.on('error', () => {});
    this.client = client as (Redis | Cluster) & Commands;
    // Every store method turns a Redis that does not answer into STORE_UNAVAILABLE.
    for (const m of GUARDED) {
      const f = (this[m] as (...a: unknown[]) => Promise<unknown>).bind(this);
      (this as unknown as Record<string, unknown>)[m] = (...a: unknown[]) =>
        f(...a).catch((e: unknown) => {
          throw storeError(e);
        });
    }
  }

  private k(key: string): string {
    return this.p + key;
  }

  /** The Redis key of a store key (this store's namespace prepended), for a script that names it. */
  redisKey(key: string): string {
    return this.p + key;
  }

  /**
   * What update() would expect a key to hold: the JSON this process last read or wrote
   * (null: absent, or never seen, which is guessed absent). A wrong guess costs a retry.
   */
  guess(key: string): string | null {
    const k = this.k(key);
    return this.lastSeen.has(k) ? (this.lastSeen.get(k) as string | null) : null;
  }

  /** Tells update() what a key holds after a script outside it read or wrote it (null: absent). */
  saw(key: string, value: string | null): void {
    this.remember(this.k(key), value);
  }

  async get<T>(key: string): Promise<T | undefined> {
    const s = await this.client.get(this.k(key));
    return s === null ? undefined : (JSON.parse(s) as T);
  }

  async set<T>(key: string, value: T, ttlMs?: number): Promise<void> {
    if (ttlMs) await this.client.set(this.k(key), JSON.stringify(value), 'PX', ttlMs);
    else await this.client.set(this.k(key), JSON.stringify(value));
  }

  async del(key: string): Promise<void> {
    this.lastBytes.delete(this.k(key));
    await this.client.del(this.k(key));
  }

  async update<T, R>(key: string, fn: (current: T | undefined) => UpdateResult<T, R>): Promise<R> {
    const k = this.k(key);
    // Unknown keys are guessed absent (new incidents, new sessions): right most of the time.
    let cur: string | null = this.lastSeen.has(k) ? (this.lastSeen.get(k) as string | null) : null;
    for (let attempt = 0; attempt < 100; attempt++) {
      const r = fn(cur === null ? undefined : (JSON.parse(cur) as T));
      const next = r.value === undefined ? '' : JSON.stringify(r.value);
      const op = r.value === undefined ? 'del' : 'set';
      const [ok, actual] = await this.client.vigilCas(k, cur ?? '', cur === null ? '0' : '1', next, op, r.ttlMs ?? 0);
      if (ok === 1) {
        this.remember(k, r.value === undefined ? null : next);
        return r.result;
      }
      cur = actual ?? null;
    }
    throw new Error(`store update of ${key} kept conflicting`);
  }

  private remember(k: string, v: string | null): void {
    this.lastSeen.delete(k);
    this.lastSeen.set(k, v);
    if (this.lastSeen.size > 10_000) this.lastSeen.delete(this.lastSeen.keys().next().value as string);
  }

  async setIfAbsent(key: string, value: string, ttlMs: number): Promise<boolean> {
    const r = await this.client.set(this.k(key), JSON.stringify(value), 'PX', ttlMs, 'NX');
    return r === 'OK';
  }

  async hit(key: string, now: number, windowMs: number, max: number): Promise<{ allowed: boolean; count: number }> {
    const member = `${now}-${process.pid}-${this.seq++}`;
    const [ok, n] = await this.client.vigilHit(this.k(key), now, windowMs, max, member);
    return { allowed: ok === 1, count: n };
  }

  async admit(q: AdmitRequest): Promise<AdmitResult> {
    const c = this.admitCall(q);
    return admitReply(await this.client.vigilAdmit(...c.keys, ...c.args));
  }

  /** The gate script's keys and args for a request (the notifier's commit script runs the same function). */
  admitCall(q: AdmitRequest): { keys: string[]; args: (string | number)[] } {
    if (q.rateKeys.length !== SEVERITIES.length) throw new Error('admit: one rate set per severity');
    return {
      keys: [this.k(q.markKey), ...q.rateKeys.map((k) => this.k(k))],
      args: [q.episode, q.seq, q.state, q.severity, q.now, q.quietMs, q.markTtlMs, q.windowMs, q.max, q.member],
    };
  }

  async indexAdd(key: string, member: string, score: number): Promise<void> {
    await this.client.zadd(this.k(key), 'GT', score, member);
  }

  async indexTrim(key: string, keep: number, below = Number.POSITIVE_INFINITY): Promise<string[]> {
    return this.client.vigilTrim(this.k(key), keep, Number.isFinite(below) ? below : '+inf');
  }

  async pushCapped<T>(key: string, value: T, cap: number, ttlMs?: number): Promise<void> {
    await this.client.vigilPushCapped(this.k(key), JSON.stringify(value), cap, ttlMs ?? 0);
  }

  async add(key: string, deltas: Readonly<Record<string, number>>, ttlMs?: number): Promise<void> {
    await this.incr(key, deltas, ttlMs);
  }

  async incr(key: string, deltas: Readonly<Record<string, number>>, ttlMs?: number): Promise<Record<string, number>> {
    const fields = Object.keys(deltas);
    const args: (string | number)[] = [];
    for (const f of fields) args.push(f, deltas[f]);
    const vs = await this.client.vigilIncr(this.k(key), ttlMs ?? 0, ...args);
    const out: Record<string, number> = {};
    fields.forEach((f, i) => {
      out[f] = Number(vs[i]);
    });
    return out;
  }

  async counts(key: string, fields?: readonly string[]): Promise<Record<string, number>> {
    const k = this.k(key);
    const out: Record<string, number> = {};
    if (!fields) {
      for (const [f, v] of Object.entries(await this.client.hgetall(k))) out[f] = Number(v);
      return out;
    }
    if (!fields.length) return out;
    const vs = await this.client.hmget(k, ...fields);
    fields.forEach((f, i) => {
      out[f] = vs[i] === null ? 0 : Number(vs[i]);
    });
    return out;
  }

  async list<T>(key: string, limit: number): Promise<T[]> {
    const arr = await this.client.lrange(this.k(key), 0, limit - 1);
    return arr.map((s) => JSON.parse(s) as T);
  }

  async getBytes(key: string): Promise<Uint8Array | undefined> {
    const b = await this.client.getBuffer(this.k(key));
    return b === null ? undefined : unstamped(b);
  }

  /** A stored binary value as a unit gets it: unstamped, its stamp remembered for the commit. */
  private handOut(b: Buffer): Uint8Array {
    const v = unstamped(b);
    if (hasStamp(b)) this.stampOf.set(v, Buffer.from(b.subarray(0, STAMP_BYTES)));
    return v;
  }

  async setBytes(key: string, value: Uint8Array, ttlMs?: number): Promise<void> {
    const b = stamped(value);
    if (ttlMs) await this.client.set(this.k(key), b, 'PX', ttlMs);
    else await this.client.set(this.k(key), b);
  }

  async updateBytes<R>(key: string, fn: (current: Uint8Array | undefined) => BytesUpdate<R>): Promise<R> {
    const k = this.k(key);
    let cur = this.lastBytes.get(k) ?? null;
    // Whether cur is what Redis held at some point of this call (not a remembered guess).
    let confirmed = false;
    for (let attempt = 0; attempt < 100; attempt++) {
      // A copy: fn may decode views over it and change them.
      const r = fn(cur === null ? undefined : unstamped(cur));
      if (r.value === undefined) {
        // No write: right only if fn saw the real value.
        if (confirmed) return r.result;
        const actual = await this.client.getBuffer(k);
        if (actual === null ? cur === null : cur !== null && actual.equals(cur)) return r.result;
        cur = actual;
        confirmed = true;
        if (actual) this.lastBytes.set(k, actual);
        continue;
      }
      const next = stamped(r.value);
      const [ok, actual] = await this.client.vigilCasBuffer(
        k,
        cur ?? EMPTY,
        cur === null ? '0' : '1',
        next,
        'set',
        r.ttlMs ?? 0,
      );
      if (ok === 1) {
        this.lastBytes.set(k, next);
        return r.result;
      }
      cur = actual ?? null;
      confirmed = true;
    }
    throw new Error(`store update of ${key} kept conflicting`);
  }

  async casBytes(key: string, expected: Uint8Array | undefined, next: Uint8Array, ttlMs?: number): Promise<boolean> {
    // The stored form carries a stamp the caller does not know: read it, then set only
    // if the key still holds that stored form.
    const k = this.k(key);
    const cur = await this.client.getBuffer(k);
    if (expected === undefined ? cur !== null : cur === null || !bytesEqual(unstamped(cur), expected)) return false;
    const n = stamped(next);
    const [ok] = await this.client.vigilCasBuffer(k, cur ?? EMPTY, cur === null ? '0' : '1', n, 'set', ttlMs ?? 0);
    if (ok === 1) this.lastBytes.set(k, n);
    return ok === 1;
  }

  peekRaw(key: string, bytes: boolean): Raw | undefined {
    // What this process last saw: the unit's commit checks it (a unit with a guess
    // commits even when it writes nothing, so a stale one is judged again).
    const k = this.k(key);
    if (bytes) {
      const b = this.lastBytes.get(k);
      return b === undefined ? undefined : b === null ? null : this.handOut(b);
    }
    return this.lastSeen.has(k) ? (this.lastSeen.get(k) as string | null) : undefined;
  }

  async readRaw(key: string, bytes: boolean): Promise<Raw> {
    const k = this.k(key);
    if (bytes) {
      const b = await this.client.getBuffer(k);
      // (an absent key is remembered too: most sessions have no state of some detectors)
      this.lastBytes.set(k, b);
      return b === null ? null : this.handOut(b);
    }
    const s = await this.client.get(k);
    this.remember(k, s);
    return s;
  }

  inputSeen(key: string): boolean {
    return this.inputsSeen.peek(this.k(key)) === true;
  }

  async commitUnit(plan: UnitPlan): Promise<UnitOutcome> {
    const ks: string[] = [];
    const index = new Map<string, number>();
    const ki = (key: string) => {
      const k = this.k(key);
      let i = index.get(k);
      if (i === undefined) {
        ks.push(k);
        i = ks.length;
        index.set(k, i);
      }
      return i;
    };
    const args: (string | number | Uint8Array)[] = [plan.inputs.length, plan.inputTtlMs];
    for (const k of plan.inputs) args.push(ki(k));
    args.push(plan.reads.length);
    for (const [k, v] of plan.reads) {
      if (v === null) args.push(ki(k), '0', '');
      else if (typeof v === 'string') args.push(ki(k), '1', v);
      else {
        const st = this.stampOf.get(v);
        args.push(ki(k), st ? '2' : '3', st ?? Buffer.from(v));
      }
    }
    args.push(plan.writes.length);
    // (the stored form of each binary value written, for lastBytes once committed)
    const wrote = new Map<string, Buffer>();
    for (const w of plan.writes) {
      switch (w.op) {
        case 'set':
          if (typeof w.value === 'string') args.push('s', ki(w.key), w.value, w.ttlMs);
          else {
            const b = stamped(w.value);
            wrote.set(w.key, b);
            args.push('s', ki(w.key), b, w.ttlMs);
          }
          break;
        case 'del':
          args.push('d', ki(w.key));
          break;
        case 'hincr': {
          // (a zero adds nothing: an absent field counts as 0; the expiry is still renewed)
          const fs = Object.entries(w.deltas).filter(([, d]) => d !== 0);
          args.push('h', ki(w.key), w.ttlMs, fs.length);
          for (const [f, d] of fs) args.push(f, d);
          break;
        }
        case 'zadd':
          args.push('z', ki(w.key), w.score, w.member);
          break;
        case 'lpush':
          args.push('l', ki(w.key), w.value, w.cap, w.ttlMs);
          break;
        case 'outbox':
          args.push('x', ki(OUTBOX_KEY), w.value);
          break;
      }
    }
    const client = this.client as unknown as Record<string, (...a: unknown[]) => Promise<unknown[]>>;
    const r = await client.vigilUnitBuffer(ks.length, ...ks, ...args);
    const code = Number(r[0]);
    if (code === 2) {
      const present = r.slice(1).map((i) => plan.inputs[Number(i) - 1]);
      for (const k of present) this.inputsSeen.set(this.k(k), true);
      return { ok: false, repeat: true, present };
    }
    const bytesKeys = new Set<string>();
    for (const [k, v, bytes] of plan.reads) if (bytes || v instanceof Uint8Array) bytesKeys.add(k);
    for (const w of plan.writes) if (w.op === 'set' && typeof w.value !== 'string') bytesKeys.add(w.key);
    if (code === 0) {
      const bad = r[1] as (number | Buffer)[];
      const conflicts: [string, Raw][] = [];
      for (let i = 0; i < bad.length; i += 3) {
        const k = ks[Number(bad[i]) - 1];
        const key = k.slice(this.p.length);
        const present = Number(bad[i + 1]) === 1;
        const b = bad[i + 2] as Buffer;
        if (bytesKeys.has(key)) {
          this.lastBytes.set(k, present ? b : null);
          conflicts.push([key, present ? this.handOut(b) : null]);
        } else {
          const s = present ? b.toString() : null;
          this.remember(k, s);
          conflicts.push([key, s]);
        }
      }
      return { ok: false, conflicts };
    }
    // Committed: what this process saw is what Redis holds now.
    for (const w of plan.writes) {
      if (w.op === 'outbox') continue;
      const k = this.k(w.key);
      if (w.op === 'set') {
        if (typeof w.value === 'string') this.remember(k, w.value);
        else this.lastBytes.set(k, wrote.get(w.key) as Buffer);
      } else if (w.op === 'del') {
        this.lastBytes.set(k, null);
        this.remember(k, null);
      }
    }
    for (const k of plan.inputs) this.inputsSeen.set(this.k(k), true);
    return { ok: true, outbox: (r[1] as Buffer[]).map((x) => String(x)) };
  }

  async outboxRead(limit: number, before?: number): Promise<{ id: string; value: string }[]> {
    const end = before === undefined ? '+' : `${Math.max(0, Math.floor(before))}`;
    const rows = await this.client.xrange(this.k(OUTBOX_KEY), '-', end, 'COUNT', limit);
    return rows.map(([id, fields]) => ({ id, value: fields[fields.indexOf('v') + 1] ?? '' }));
  }

  async outboxDone(ids: readonly string[]): Promise<void> {
    if (ids.length) await this.client.xdel(this.k(OUTBOX_KEY), ...ids);
  }

  async keys(prefix: string): Promise<string[]> {
    const out: string[] = [];
    await this.scan(`${this.p}${prefix}*`, async (batch) => {
      for (const k of batch) out.push(k.slice(this.p.length));
    });
    return out;
  }

  /** SCAN on every primary (a cluster's keys are spread over its nodes). */
  private async scan(match: string, each: (batch: string[]) => Promise<void>): Promise<void> {
    for (const node of primaries(this.client)) {
      let cursor = '0';
      do {
        const [next, batch] = await node.scan(cursor, 'MATCH', match, 'COUNT', 500);
        cursor = next;
        if (batch.length) await each(batch);
      } while (cursor !== '0');
    }
  }

  /** Reachability for /health, answered within `timeoutMs` whatever Redis does. */
  async ping(timeoutMs = 500): Promise<boolean> {
    return (await this.unusable(timeoutMs)) === undefined;
  }

  /** Why Redis cannot serve (STORE_UNAVAILABLE or AUTH_FAILED), or undefined when it answers PING within `timeoutMs`. */
  async unusable(timeoutMs = 500): Promise<AppError | undefined> {
    let t: NodeJS.Timeout | undefined;
    try {
      const late = new Promise<string>((r) => {
        t = setTimeout(() => r('timeout'), timeoutMs);
      });
      const r = await Promise.race([this.client.ping(), late]);
      return r === 'PONG' ? undefined : new AppError('STORE_UNAVAILABLE', 'store unavailable (no answer to PING)');
    } catch (e) {
      const err = storeError(e);
      return err instanceof AppError ? err : new AppError('STORE_UNAVAILABLE', 'store unavailable', { cause: e });
    } finally {
      clearTimeout(t);
    }
  }

  /** Deletes every key of this store's namespace (test cleanup). */
  async flushNamespace(): Promise<void> {
    // one DEL per key: keys of one node may still be in different slots
    await this.scan(`${this.p}*`, async (batch) => {
      await Promise.all(batch.map((k) => this.client.del(k)));
    });
  }

  async close(): Promise<void> {
    await this.client.quit().catch(() => this.client.disconnect());
  }
}

export { bytesEqual };
