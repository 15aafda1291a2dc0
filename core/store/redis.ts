import type { Cluster, Redis, RedisOptions } from 'ioredis';
import { AppError } from '../errors.ts';
import { Lru } from '../lru.ts';
import { checkPrefix, parseRedisUrl, primaries, redisClient } from './redis-connect.ts';
import {
  type AdmitRequest,
  type AdmitResult,
  type BytesUpdate,
  bytesEqual,
  type Store,
  type UpdateResult,
} from './store.ts';

const EMPTY = Buffer.alloc(0);

// Compare-and-set of a string value: KEYS[1], ARGV[1] = expected ('' with ARGV[2]='0'
// when the key must be absent), ARGV[3] = next ('' + ARGV[4]='del' deletes), ARGV[5] = ttl ms.
// On a mismatch it returns {0, current} so the caller can retry without another GET.
const CAS = `
local cur = redis.call('GET', KEYS[1])
if ARGV[2] == '0' then
  if cur then return {0, cur} end
else
  if not cur then return {0} end
  if cur ~= ARGV[1] then return {0, cur} end
end
if ARGV[4] == 'del' then redis.call('DEL', KEYS[1]) return {1} end
if tonumber(ARGV[5]) > 0 then redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[5])
else redis.call('SET', KEYS[1], ARGV[3]) end
return {1}`;

// Sliding-window counter on a sorted set: KEYS[1], ARGV = now, window ms, max, member.
const HIT = `
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', tonumber(ARGV[1]) - tonumber(ARGV[2]))
local n = redis.call('ZCARD', KEYS[1])
if n < tonumber(ARGV[3]) then
  redis.call('ZADD', KEYS[1], ARGV[1], ARGV[4])
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, n + 1}
end
return {0, n}`;

// The notifier gate: KEYS = mark hash, rate zset; ARGV = field, now, quiet ms, mark ttl,
// window ms, max, member, ident. Same rule as MemoryStore.admit: the same transition
// (ident) admitted again passes without counting twice.
const ADMIT = `
if redis.call('HGET', KEYS[1], 'id:' .. ARGV[1]) == ARGV[8] then return {1} end
local last = redis.call('HGET', KEYS[1], ARGV[1])
if last and tonumber(ARGV[2]) - tonumber(last) < tonumber(ARGV[3]) then return {0, 'quiet', tonumber(last)} end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', tonumber(ARGV[2]) - tonumber(ARGV[5]))
local n = redis.call('ZCARD', KEYS[2])
if n >= tonumber(ARGV[6]) then return {0, 'rate', n} end
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[7])
redis.call('PEXPIRE', KEYS[2], ARGV[5])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2], 'id:' .. ARGV[1], ARGV[8])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return {1}`;

type Commands = {
  vigilAdmit(
    markKey: string,
    rateKey: string,
    field: string,
    now: number,
    quietMs: number,
    markTtl: number,
    windowMs: number,
    max: number,
    member: string,
    ident: string,
  ): Promise<[number, string?, number?]>;
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

// (the last line: a cluster between failover and settling, no Sentinel answering)
const DOWN =
  /Command timed out|Connection is closed|ECONNREFUSED|ECONNRESET|EPIPE|ETIMEDOUT|Stream isn't writeable|LOADING|READONLY|getaddrinfo|MaxRetriesPerRequest|CLUSTERDOWN|TRYAGAIN|slots cache|startup nodes|sentinels are unreachable/;

/** A Redis that does not answer is a 503 for the caller (STORE_UNAVAILABLE), not a 500. */
export function storeError(e: unknown): unknown {
  const err = e as Error;
  if (err && (err.name === 'MaxRetriesPerRequestError' || DOWN.test(err.message ?? ''))) {
    const why = (err.message ?? 'error')
      .split('\n')[0]
      .replace(/redis:\/\/[^\s]*/g, 'redis://[REDACTED]')
      .slice(0, 80);
    return new AppError('STORE_UNAVAILABLE', `store unavailable (${why})`, { retryable: true, cause: e });
  }
  return e;
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
  'getBytes',
  'setBytes',
  'casBytes',
  'updateBytes',
  'keys',
] as const;

export class RedisStore implements Store {
  readonly backend = 'redis' as const;
  readonly client: (Redis | Cluster) & Commands;
  private readonly p: string;
  private seq = 0;
  /**
   * Last value this process read or wrote per key (bounded). update() first tries its
   * compare-and-set against it, so the usual case is one round trip; a stale entry only
   * costs a retry, never correctness, because Redis checks the value.
   */
  private readonly lastSeen = new Map<string, string | null>();
  /** The same for binary values (judge state): one round trip per event while this process owns the session. */
  private readonly lastBytes = new Lru<string, Buffer>(5_000);

  constructor(opts: RedisStoreOptions) {
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
    client.defineCommand('vigilAdmit', { numberOfKeys: 2, lua: ADMIT });
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
    const [ok, why, n] = await this.client.vigilAdmit(
      this.k(q.markKey),
      this.k(q.rateKey),
      q.field,
      q.now,
      q.quietMs,
      q.markTtlMs,
      q.windowMs,
      q.max,
      `${q.now}-${process.pid}-${this.seq++}`,
      q.ident,
    );
    if (ok === 1) return { ok: true };
    return why === 'quiet' ? { ok: false, why: 'quiet', last: n ?? 0 } : { ok: false, why: 'rate', count: n ?? 0 };
  }

  async indexAdd(key: string, member: string, score: number): Promise<void> {
    await this.client.zadd(this.k(key), 'NX', score, member);
  }

  async indexTrim(key: string, keep: number): Promise<string[]> {
    const k = this.k(key);
    const n = await this.client.zcard(k);
    if (n <= keep) return [];
    const r = await this.client.zpopmin(k, n - keep);
    return r.filter((_, i) => i % 2 === 0);
  }

  async pushCapped<T>(key: string, value: T, cap: number): Promise<void> {
    const k = this.k(key);
    await this.client
      .multi()
      .lpush(k, JSON.stringify(value))
      .ltrim(k, 0, cap - 1)
      .exec();
  }

  async list<T>(key: string, limit: number): Promise<T[]> {
    const arr = await this.client.lrange(this.k(key), 0, limit - 1);
    return arr.map((s) => JSON.parse(s) as T);
  }

  async getBytes(key: string): Promise<Uint8Array | undefined> {
    const b = await this.client.getBuffer(this.k(key));
    return b === null ? undefined : new Uint8Array(b);
  }

  async setBytes(key: string, value: Uint8Array, ttlMs?: number): Promise<void> {
    const b = Buffer.from(value);
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
      const r = fn(cur === null ? undefined : new Uint8Array(cur));
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
      const next = Buffer.from(r.value);
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
    const exp = expected === undefined ? Buffer.alloc(0) : Buffer.from(expected);
    const [ok] = await this.client.vigilCas(
      this.k(key),
      exp,
      expected === undefined ? '0' : '1',
      Buffer.from(next),
      'set',
      ttlMs ?? 0,
    );
    return ok === 1;
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
    let t: NodeJS.Timeout | undefined;
    try {
      const late = new Promise<string>((r) => {
        t = setTimeout(() => r('timeout'), timeoutMs);
      });
      return (await Promise.race([this.client.ping(), late])) === 'PONG';
    } catch {
      return false;
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
