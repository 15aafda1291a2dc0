import type { Clock } from '../clock.ts';
import { systemClock } from '../clock.ts';
import { Lru } from '../lru.ts';
import type { Raw, UnitBackend, UnitOutcome, UnitPlan } from '../unit.ts';
import { type AdmitMarks, admitRule } from './admit.ts';
import {
  type AdmitRequest,
  type AdmitResult,
  type BytesUpdate,
  bytesEqual,
  type Store,
  type UpdateResult,
} from './store.ts';

interface Entry {
  v: unknown;
  exp?: number;
}

/**
 * The embedded default: one process, no Redis. Values are kept serialised (JSON
 * strings, copied bytes) so callers cannot alias stored state, exactly as with Redis.
 */
export class MemoryStore implements Store, UnitBackend {
  readonly backend = 'memory' as const;
  readonly serialUnits = true;
  private readonly m = new Map<string, Entry>();
  /** Input ids committed (bounded: the oldest go first; a retry comes within minutes). */
  private readonly inputs = new Lru<string, true>(200_000);
  private readonly outbox: { id: string; at: number; value: string }[] = [];
  private outboxSeq = 0;

  constructor(private readonly clock: Clock = systemClock) {}

  private live(key: string): Entry | undefined {
    const e = this.m.get(key);
    if (e && e.exp !== undefined && e.exp <= this.clock.now()) {
      this.m.delete(key);
      return undefined;
    }
    return e;
  }

  private put(key: string, v: unknown, ttlMs?: number): void {
    this.m.set(key, { v, exp: ttlMs ? this.clock.now() + ttlMs : undefined });
  }

  async get<T>(key: string): Promise<T | undefined> {
    const e = this.live(key);
    return e === undefined ? undefined : (JSON.parse(e.v as string) as T);
  }

  async set<T>(key: string, value: T, ttlMs?: number): Promise<void> {
    this.put(key, JSON.stringify(value), ttlMs);
  }

  async del(key: string): Promise<void> {
    this.m.delete(key);
  }

  async update<T, R>(key: string, fn: (current: T | undefined) => UpdateResult<T, R>): Promise<R> {
    // Single-threaded: no await between read and write, so this is atomic.
    const e = this.live(key);
    const cur = e === undefined ? undefined : (JSON.parse(e.v as string) as T);
    const r = fn(cur);
    if (r.value === undefined) this.m.delete(key);
    else this.put(key, JSON.stringify(r.value), r.ttlMs);
    return r.result;
  }

  async setIfAbsent(key: string, value: string, ttlMs: number): Promise<boolean> {
    if (this.live(key)) return false;
    this.put(key, JSON.stringify(value), ttlMs);
    return true;
  }

  async hit(key: string, now: number, windowMs: number, max: number): Promise<{ allowed: boolean; count: number }> {
    const e = this.live(key);
    const hits = ((e?.v as number[] | undefined) ?? []).filter((t) => t > now - windowMs);
    const allowed = hits.length < max;
    if (allowed) hits.push(now);
    this.put(key, hits, windowMs);
    return { allowed, count: hits.length };
  }

  async indexAdd(key: string, member: string, score: number): Promise<void> {
    const e = this.live(key);
    const idx = (e?.v as Map<string, number> | undefined) ?? new Map<string, number>();
    if (!(score <= (idx.get(member) ?? Number.NEGATIVE_INFINITY))) idx.set(member, score);
    if (!e) this.put(key, idx);
  }

  async indexTrim(key: string, keep: number, below = Number.POSITIVE_INFINITY): Promise<string[]> {
    const idx = this.live(key)?.v as Map<string, number> | undefined;
    if (!idx || idx.size <= keep) return [];
    const out = [...idx]
      .sort((a, b) => a[1] - b[1] || (a[0] < b[0] ? -1 : 1))
      .slice(0, idx.size - keep)
      .filter(([, score]) => score < below);
    for (const [m] of out) idx.delete(m);
    return out.map(([m]) => m);
  }

  async admit(q: AdmitRequest): Promise<AdmitResult> {
    const marks = (this.live(q.markKey)?.v as AdmitMarks | undefined) ?? {};
    const sets = q.rateKeys.map((k) =>
      ((this.live(k)?.v as [string, number][] | undefined) ?? []).filter(([, t]) => t > q.now - q.windowMs),
    );
    const step = admitRule(marks, q, (rank) => sets[rank]?.length ?? 0);
    if (step.count !== undefined) {
      const set = sets[step.count].filter(([m]) => m !== q.member);
      set.push([q.member, q.now]);
      this.put(q.rateKeys[step.count], set, q.windowMs);
    }
    if (step.marks) this.put(q.markKey, step.marks, q.markTtlMs);
    return step.result;
  }

  async pushCapped<T>(key: string, value: T, cap: number, ttlMs?: number): Promise<void> {
    const e = this.live(key);
    const arr = (e?.v as string[] | undefined) ?? [];
    arr.unshift(JSON.stringify(value));
    if (arr.length > cap) arr.length = cap;
    // Without a ttl the list keeps the expiry it had (as LPUSH does on Redis).
    if (ttlMs) this.put(key, arr, ttlMs);
    else this.m.set(key, { v: arr, exp: e?.exp });
  }

  async add(key: string, deltas: Readonly<Record<string, number>>, ttlMs?: number): Promise<void> {
    await this.incr(key, deltas, ttlMs);
  }

  async incr(key: string, deltas: Readonly<Record<string, number>>, ttlMs?: number): Promise<Record<string, number>> {
    const e = this.live(key);
    const h = (e?.v as Record<string, number> | undefined) ?? {};
    const out: Record<string, number> = {};
    for (const [f, d] of Object.entries(deltas)) {
      h[f] = (h[f] ?? 0) + d;
      out[f] = h[f];
    }
    if (ttlMs) this.put(key, h, ttlMs);
    else this.m.set(key, { v: h, exp: e?.exp });
    return out;
  }

  async counts(key: string, fields?: readonly string[]): Promise<Record<string, number>> {
    const h = (this.live(key)?.v as Record<string, number> | undefined) ?? {};
    if (!fields) return { ...h };
    const out: Record<string, number> = {};
    for (const f of fields) out[f] = h[f] ?? 0;
    return out;
  }

  async list<T>(key: string, limit: number): Promise<T[]> {
    const arr = (this.live(key)?.v as string[] | undefined) ?? [];
    return arr.slice(0, limit).map((s) => JSON.parse(s) as T);
  }

  async getBytes(key: string): Promise<Uint8Array | undefined> {
    const e = this.live(key);
    return e === undefined ? undefined : new Uint8Array(e.v as Uint8Array);
  }

  async setBytes(key: string, value: Uint8Array, ttlMs?: number): Promise<void> {
    this.put(key, new Uint8Array(value), ttlMs);
  }

  async updateBytes<R>(key: string, fn: (current: Uint8Array | undefined) => BytesUpdate<R>): Promise<R> {
    const cur = this.live(key)?.v as Uint8Array | undefined;
    const r = fn(cur === undefined ? undefined : new Uint8Array(cur));
    if (r.value !== undefined) this.put(key, new Uint8Array(r.value), r.ttlMs);
    return r.result;
  }

  async casBytes(key: string, expected: Uint8Array | undefined, next: Uint8Array, ttlMs?: number): Promise<boolean> {
    const cur = this.live(key)?.v as Uint8Array | undefined;
    if (!bytesEqual(cur, expected)) return false;
    this.put(key, new Uint8Array(next), ttlMs);
    return true;
  }

  peekRaw(key: string): Raw {
    const v = this.live(key)?.v;
    return v === undefined ? null : typeof v === 'string' ? v : v instanceof Uint8Array ? new Uint8Array(v) : null;
  }

  async readRaw(key: string): Promise<Raw> {
    return this.peekRaw(key);
  }

  inputSeen(key: string): boolean {
    return this.inputs.peek(key) === true;
  }

  /** Single-threaded and run one unit at a time: the reads still hold, so the writes apply as they are. */
  commitUnit(plan: UnitPlan): UnitOutcome {
    const present = plan.inputs.filter((k) => this.inputs.peek(k));
    if (present.length) return { ok: false, repeat: true, present };
    const conflicts: [string, Raw][] = [];
    for (const [k, v] of plan.reads) {
      const cur = this.peekRaw(k);
      const same =
        cur === null || v === null ? cur === v : typeof cur === 'string' ? cur === v : bytesEqual(cur, v as Uint8Array);
      if (!same) conflicts.push([k, cur]);
    }
    if (conflicts.length) return { ok: false, conflicts };
    const out: string[] = [];
    for (const w of plan.writes) {
      switch (w.op) {
        case 'set':
          this.put(w.key, typeof w.value === 'string' ? w.value : new Uint8Array(w.value), w.ttlMs || undefined);
          break;
        case 'del':
          this.m.delete(w.key);
          break;
        case 'hincr':
          void this.incr(w.key, w.deltas, w.ttlMs || undefined);
          break;
        case 'zadd':
          void this.indexAdd(w.key, w.member, w.score);
          break;
        case 'lpush': {
          const e = this.live(w.key);
          const arr = (e?.v as string[] | undefined) ?? [];
          arr.unshift(w.value);
          if (arr.length > w.cap) arr.length = w.cap;
          if (w.ttlMs) this.put(w.key, arr, w.ttlMs);
          else this.m.set(w.key, { v: arr, exp: e?.exp });
          break;
        }
        case 'outbox': {
          const id = `${Date.now()}-${this.outboxSeq++}`;
          this.outbox.push({ id, at: Date.now(), value: w.value });
          out.push(id);
          break;
        }
      }
    }
    for (const k of plan.inputs) this.inputs.set(k, true);
    return { ok: true, outbox: out };
  }

  async outboxRead(limit: number, before?: number): Promise<{ id: string; value: string }[]> {
    return this.outbox
      .filter((e) => before === undefined || e.at < before)
      .slice(0, limit)
      .map(({ id, value }) => ({ id, value }));
  }

  async outboxDone(ids: readonly string[]): Promise<void> {
    for (const id of ids) {
      const i = this.outbox.findIndex((e) => e.id === id);
      if (i >= 0) this.outbox.splice(i, 1);
    }
  }

  async keys(prefix: string): Promise<string[]> {
    const out: string[] = [];
    for (const k of this.m.keys()) if (k.startsWith(prefix) && this.live(k)) out.push(k);
    return out;
  }

  async ping(): Promise<boolean> {
    return true;
  }

  async close(): Promise<void> {}
}
