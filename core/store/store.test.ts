import { afterAll, describe, expect, it } from 'vitest';
import { backends, REDIS_URL, testPrefix } from '../../test/helpers/index.ts';
import { FakeClock } from '../clock.ts';
import type { Raw, UnitWrite } from '../unit.ts';
import { MemoryStore } from './memory.ts';
import { RedisStore } from './redis.ts';
import { hasStamp, STAMP_BYTES } from './stamps.ts';
import type { Store } from './store.ts';

// One contract, two backends: the Redis run uses the real Redis on 127.0.0.1:6379
// under a key prefix of its own, deleted afterwards.
const redisStores: RedisStore[] = [];
const makers: [string, () => Store][] = [
  ['memory', () => new MemoryStore(new FakeClock())],
  [
    'redis',
    () => {
      const s = new RedisStore({ url: REDIS_URL, prefix: testPrefix() });
      redisStores.push(s);
      return s;
    },
  ],
];

afterAll(async () => {
  for (const s of redisStores) {
    await s.flushNamespace();
    await s.close();
  }
});

describe.each(makers.filter(([name]) => backends().includes(name as 'memory')))(
  'store contract (%s)',
  (_name, make) => {
    it('gets, sets and deletes JSON values', async () => {
      const s = make();
      expect(await s.get('a')).toBeUndefined();
      await s.set('a', { x: 1, y: ['z'] });
      expect(await s.get('a')).toEqual({ x: 1, y: ['z'] });
      await s.del('a');
      expect(await s.get('a')).toBeUndefined();
    });

    it('does not alias stored objects', async () => {
      const s = make();
      const v = { n: 1 };
      await s.set('k', v);
      v.n = 2;
      expect(await s.get('k')).toEqual({ n: 1 });
    });

    it('update is atomic under concurrent callers', async () => {
      const s = make();
      await Promise.all(
        Array.from({ length: 50 }, () =>
          s.update<number, void>('ctr', (cur) => ({ value: (cur ?? 0) + 1, result: undefined })),
        ),
      );
      expect(await s.get('ctr')).toBe(50);
    });

    it('update returns the result and can delete', async () => {
      const s = make();
      const r = await s.update<string, string>('u', (cur) => ({ value: 'v', result: `was ${cur}` }));
      expect(r).toBe('was undefined');
      await s.update<string, void>('u', () => ({ value: undefined, result: undefined }));
      expect(await s.get('u')).toBeUndefined();
    });

    it('setIfAbsent lets exactly one caller take a key', async () => {
      const s = make();
      const r = await Promise.all(Array.from({ length: 20 }, () => s.setIfAbsent('lock', 'me', 60_000)));
      expect(r.filter(Boolean)).toHaveLength(1);
    });

    it('hit admits max hits per sliding window', async () => {
      const s = make();
      const t0 = 1_000_000;
      const admitted = [];
      for (let i = 0; i < 5; i++) admitted.push((await s.hit('rl', t0 + i, 60_000, 3)).allowed);
      expect(admitted).toEqual([true, true, true, false, false]);
      // After the window has passed the oldest hits no longer count.
      expect((await s.hit('rl', t0 + 60_001, 60_000, 3)).allowed).toBe(true);
    });

    it('keeps a capped list, newest first', async () => {
      const s = make();
      for (let i = 0; i < 7; i++) await s.pushCapped('log', { i }, 5);
      expect(await s.list('log', 10)).toEqual([{ i: 6 }, { i: 5 }, { i: 4 }, { i: 3 }, { i: 2 }]);
      expect(await s.list('log', 2)).toEqual([{ i: 6 }, { i: 5 }]);
    });

    it('counters add atomically under concurrent callers and read by field', async () => {
      const s = make();
      const got = await Promise.all(
        Array.from({ length: 40 }, (_, i) => s.incr('ctrs', { n: 1, usd: 0.25, [`m.${i % 2}`]: 2 }, 60_000)),
      );
      expect(await s.counts('ctrs', ['n', 'usd', 'm.0', 'm.1', 'absent'])).toEqual({
        n: 40,
        usd: 10,
        'm.0': 40,
        'm.1': 40,
        absent: 0,
      });
      // Each caller saw the totals its own add made: every count from 1 to 40 once.
      expect(got.map((g) => g.n).sort((a, b) => a - b)).toEqual(Array.from({ length: 40 }, (_, i) => i + 1));
      expect(await s.counts('ctrs')).toEqual({ n: 40, usd: 10, 'm.0': 40, 'm.1': 40 });
      expect(await s.counts('none', ['x'])).toEqual({ x: 0 });
      expect(await s.counts('none')).toEqual({});
      expect(await s.incr('ctrs', { usd: -2.5 })).toEqual({ usd: 7.5 });
    });

    it('keeps a capped list with an expiry, renewed by each push', async () => {
      const s = make();
      await s.pushCapped('exp', { i: 1 }, 5, 60_000);
      await s.pushCapped('exp', { i: 2 }, 5);
      expect(await s.list('exp', 10)).toEqual([{ i: 2 }, { i: 1 }]);
      if (s instanceof RedisStore) {
        const ttl = await s.client.pttl(`${(s as unknown as { p: string }).p}exp`);
        expect(ttl).toBeGreaterThan(50_000);
      }
    });

    it('stores bytes and compares-and-sets them', async () => {
      const s = make();
      const a = new Uint8Array([1, 2, 3, 0, 255]);
      expect(await s.casBytes('b', undefined, a)).toBe(true);
      expect(await s.casBytes('b', undefined, a)).toBe(false);
      expect(await s.getBytes('b')).toEqual(a);
      const b = new Uint8Array([9]);
      expect(await s.casBytes('b', new Uint8Array([1, 2]), b)).toBe(false);
      expect(await s.casBytes('b', a, b)).toBe(true);
      expect(await s.getBytes('b')).toEqual(b);
    });

    it('updateBytes is atomic under concurrent callers, and hands fn a copy', async () => {
      const s = make();
      const inc = (cur: Uint8Array | undefined) => {
        const n = cur ? cur[0] : 0;
        if (cur) cur[0] = 200; // fn changing what it was given must not change the store's copy
        return { value: new Uint8Array([n + 1]), result: n };
      };
      const seen = await Promise.all(Array.from({ length: 50 }, () => s.updateBytes('ub', inc)));
      expect(await s.getBytes('ub')).toEqual(new Uint8Array([50]));
      expect([...seen].sort((a, b) => a - b)).toEqual(Array.from({ length: 50 }, (_, i) => i));
      // Deleted behind it: the next update starts from nothing.
      await s.del('ub');
      expect(await s.updateBytes('ub', inc)).toBe(0);
    });

    it('lists keys by prefix', async () => {
      const s = make();
      await s.set('alert:a', 1);
      await s.set('alert:b', 2);
      await s.set('other', 3);
      expect((await s.keys('alert:')).sort()).toEqual(['alert:a', 'alert:b']);
      expect(await s.ping()).toBe(true);
    });
  },
);

describe.each(makers.filter(([name]) => backends().includes(name as 'memory')))(
  'store admit gate (%s)',
  (_name, make) => {
    // One channel's gate: quiet window 1 s, at most 2 incidents per 10 s. An incident is a
    // dedup_key (its marks) and an episode (its opening); severity ranks 0 info, 1 warning, 2 critical.
    const req = (
      now: number,
      o: {
        key?: string;
        episode?: number;
        seq?: number;
        state?: 'trigger' | 'escalate' | 'resolve';
        sev?: number;
      } = {},
    ) => {
      const key = o.key ?? 'k';
      const episode = o.episode ?? 1;
      return {
        markKey: `m:${key}`,
        episode,
        seq: o.seq ?? 1,
        state: o.state ?? 'trigger',
        severity: o.sev ?? 1,
        now,
        quietMs: 1000,
        markTtlMs: 60_000,
        rateKeys: ['r:0', 'r:1', 'r:2'],
        windowMs: 10_000,
        max: 2,
        member: `${key}#${episode}`,
      };
    };
    it('a sorted index keeps the newest and gives back the oldest when trimmed', async () => {
      const s = make();
      for (const [m, t] of [
        ['a', 3],
        ['b', 1],
        ['c', 2],
        ['d', 4],
        ['e', 5],
      ] as const)
        await s.indexAdd('ix', m, t);
      await s.indexAdd('ix', 'b', 9); // active again: it moves up
      await s.indexAdd('ix', 'd', 0); // never down
      expect(await s.indexTrim('ix', 5)).toEqual([]);
      expect(await s.indexTrim('ix', 3)).toEqual(['c', 'a']);
      expect(await s.indexTrim('ix', 3)).toEqual([]);
      // Members scored at or above `below` stay even past `keep`.
      expect(await s.indexTrim('ix', 0, 5)).toEqual(['d']);
      expect(await s.indexTrim('ix', 0)).toEqual(['e', 'b']);
    });

    it('a rise of an incident the channel knows passes the quiet window and a spent rate limit', async () => {
      const s = make();
      expect(await s.admit(req(1_000, { key: 'a' }))).toEqual({ ok: true, as: 'trigger' });
      expect(await s.admit(req(1_010, { key: 'b' }))).toEqual({ ok: true, as: 'trigger' });
      // Two incidents opened: the room is spent; a third is held...
      expect(await s.admit(req(1_020, { key: 'c' }))).toEqual({ ok: false, why: 'rate', count: 2 });
      // ...but a's escalations (a higher stage, then critical), inside its quiet window, go out.
      expect(await s.admit(req(1_100, { key: 'a', seq: 2, state: 'escalate' }))).toEqual({ ok: true, as: 'escalate' });
      expect(await s.admit(req(1_200, { key: 'a', seq: 3, state: 'escalate', sev: 2 }))).toEqual({
        ok: true,
        as: 'escalate',
      });
      expect(await s.admit(req(1_300, { key: 'a', seq: 4, state: 'resolve', sev: 2 }))).toEqual({
        ok: true,
        as: 'resolve',
      });
    });

    it('the rate limit counts incidents, not their states; warnings do not use up the room of a critical one', async () => {
      const s = make();
      for (const [seq, state] of [
        [1, 'trigger'],
        [2, 'escalate'],
        [3, 'resolve'],
      ] as const)
        expect((await s.admit(req(1_000 + seq, { key: 'a', seq, state }))).ok).toBe(true);
      expect(await s.admit(req(2_000, { key: 'b' }))).toEqual({ ok: true, as: 'trigger' });
      expect(await s.admit(req(2_100, { key: 'c' }))).toEqual({ ok: false, why: 'rate', count: 2 });
      expect(await s.admit(req(2_200, { key: 'd', sev: 0 }))).toEqual({ ok: false, why: 'rate', count: 2 });
      // A critical counts only critical incidents: two fit, the third is held.
      expect(await s.admit(req(2_300, { key: 'e', sev: 2 }))).toEqual({ ok: true, as: 'trigger' });
      expect(await s.admit(req(2_400, { key: 'f', sev: 2 }))).toEqual({ ok: true, as: 'trigger' });
      expect(await s.admit(req(2_500, { key: 'g', sev: 2 }))).toEqual({ ok: false, why: 'rate', count: 2 });
      // A held incident left nothing behind: once the window frees, it is opened.
      expect(await s.admit(req(12_401, { key: 'c' }))).toEqual({ ok: true, as: 'trigger' });
    });

    it('an incident the channel was not told of starts with a trigger there; its resolve alone is not sent', async () => {
      const s = make();
      // Its trigger was below this channel's min_severity: the escalation is the channel's trigger.
      expect(await s.admit(req(1_000, { seq: 2, state: 'escalate', sev: 2 }))).toEqual({ ok: true, as: 'trigger' });
      expect(await s.admit(req(1_100, { seq: 3, state: 'resolve', sev: 2 }))).toEqual({ ok: true, as: 'resolve' });
      // Another episode of the same dedup_key, never told here: its resolve is not sent.
      expect(await s.admit(req(5_000, { episode: 2, seq: 5, state: 'resolve' }))).toEqual({
        ok: false,
        why: 'untold',
      });
    });

    it('the quiet window holds a flapping incident at no higher severity, not a worse one', async () => {
      const s = make();
      expect((await s.admit(req(1_000))).ok).toBe(true);
      expect((await s.admit(req(1_100, { seq: 2, state: 'resolve' }))).ok).toBe(true);
      // Opened again 0.2 s after its first opening here, at the same severity: held.
      expect(await s.admit(req(1_200, { episode: 2, seq: 3 }))).toEqual({ ok: false, why: 'quiet', last: 1_000 });
      // Its escalation to critical is news: the channel's trigger of this episode.
      expect(await s.admit(req(1_300, { episode: 2, seq: 4, state: 'escalate', sev: 2 }))).toEqual({
        ok: true,
        as: 'trigger',
      });
      // The window runs from the last opening here; after it, a reopening is one more incident.
      expect((await s.admit(req(1_400, { episode: 2, seq: 5, state: 'resolve', sev: 2 }))).ok).toBe(true);
      expect(await s.admit(req(2_200, { episode: 3, seq: 6 }))).toEqual({ ok: false, why: 'quiet', last: 1_300 });
      expect(await s.admit(req(2_400, { episode: 3, seq: 6 }))).toEqual({ ok: false, why: 'rate', count: 2 });
    });

    it('the same transition admitted again passes as it went, without counting twice; an older one is stale', async () => {
      const s = make();
      expect(await s.admit(req(1_000, { seq: 2, state: 'escalate' }))).toEqual({ ok: true, as: 'trigger' });
      // Inside the quiet window, the same transition passes again, as the trigger it went out as...
      expect(await s.admit(req(1_000, { seq: 2, state: 'escalate' }))).toEqual({ ok: true, as: 'trigger' });
      expect(await s.admit(req(1_000, { seq: 2, state: 'escalate' }))).toEqual({ ok: true, as: 'trigger' });
      // ...and took one slot: another incident fits.
      expect(await s.admit(req(1_300, { key: 'b' }))).toEqual({ ok: true, as: 'trigger' });
      // An older transition than the channel got (a slow fan-out of seq 1) is stale.
      expect(await s.admit(req(1_400, { seq: 1 }))).toEqual({ ok: false, why: 'stale' });
    });
  },
);

describe.runIf(backends().includes('redis'))('store updateBytes across instances (redis)', () => {
  it('two processes on one key lose no update: a stale local copy only costs a retry', async () => {
    const prefix = testPrefix();
    const a = new RedisStore({ url: REDIS_URL, prefix });
    const b = new RedisStore({ url: REDIS_URL, prefix });
    redisStores.push(a, b);
    const inc = (cur: Uint8Array | undefined) => {
      const n = cur ? new DataView(cur.buffer, cur.byteOffset).getUint32(0) : 0;
      const out = new Uint8Array(4);
      new DataView(out.buffer).setUint32(0, n + 1);
      return { value: out, result: n };
    };
    // Interleaved: each store's remembered bytes are stale after the other's write.
    for (let i = 0; i < 20; i++) await Promise.all([a.updateBytes('k', inc), b.updateBytes('k', inc)]);
    const end = await a.getBytes('k');
    expect(new DataView(end!.buffer, end!.byteOffset).getUint32(0)).toBe(40);
  });
});

describe.runIf(backends().includes('redis'))('binary values behind a write stamp (redis)', () => {
  const make = (prefix = testPrefix()) => {
    const s = new RedisStore({ url: REDIS_URL, prefix });
    redisStores.push(s);
    return s;
  };
  const write = (key: string, value: Uint8Array) => ({ op: 'set' as const, key, value, ttlMs: 0 });
  const commit = (s: RedisStore, reads: [string, Raw, boolean][], writes: UnitWrite[] = []) =>
    s.commitUnit({ inputs: [], inputTtlMs: 60_000, reads, writes });

  it('stores a stamp before the value, new on every write; every reader gets the value alone', async () => {
    const s = make();
    await s.setBytes('k', new Uint8Array([1, 2, 3]));
    const first = (await s.client.getBuffer(s.redisKey('k'))) as Buffer;
    expect(hasStamp(first)).toBe(true);
    expect([...first.subarray(STAMP_BYTES)]).toEqual([1, 2, 3]);
    expect([...((await s.getBytes('k')) as Uint8Array)]).toEqual([1, 2, 3]);
    expect([...((await s.readRaw('k', true)) as Uint8Array)]).toEqual([1, 2, 3]);
    // The same value written again gets another stamp: the stamp names the write.
    await s.setBytes('k', new Uint8Array([1, 2, 3]));
    const second = (await s.client.getBuffer(s.redisKey('k'))) as Buffer;
    expect(second.subarray(0, STAMP_BYTES).equals(first.subarray(0, STAMP_BYTES))).toBe(false);
    expect(
      await s.updateBytes('k', (cur) => ({ value: new Uint8Array([...(cur ?? []), 4]), result: [...(cur ?? [])] })),
    ).toEqual([1, 2, 3]);
    expect(await s.casBytes('k', new Uint8Array([1, 2, 3, 4]), new Uint8Array([9]))).toBe(true);
    expect(await s.casBytes('k', new Uint8Array([1, 2, 3, 4]), new Uint8Array([8]))).toBe(false);
    expect([...((await s.getBytes('k')) as Uint8Array)]).toEqual([9]);
  });

  it("a unit's commit checks a stamped value by its stamp alone, so a write by another instance conflicts even with equal bytes", async () => {
    const prefix = testPrefix();
    const s = make(prefix);
    const other = make(prefix);
    await s.setBytes('k', new Uint8Array([7, 7]));
    const read = (await s.readRaw('k', true)) as Uint8Array;
    // Only the stamp is compared: bytes past it changed behind the stamp's back are not seen
    // (no Vigil writer does that; this shows what the commit sends and checks).
    const raw = Buffer.from((await s.client.getBuffer(s.redisKey('k'))) as Buffer);
    raw[STAMP_BYTES] = 1;
    await s.client.set(s.redisKey('k'), raw);
    expect((await commit(s, [['k', read, true]], [write('k', new Uint8Array([8]))])).ok).toBe(true);
    // Another instance writes the same bytes the unit read: a new stamp, so a conflict,
    // answered with the value alone.
    const read2 = (await s.readRaw('k', true)) as Uint8Array;
    await other.setBytes('k', new Uint8Array([8]));
    const r = await commit(s, [['k', read2, true]], [write('k', new Uint8Array([9]))]);
    expect(r.ok).toBe(false);
    expect('conflicts' in r && r.conflicts.map(([k, v]) => [k, [...(v as Uint8Array)]])).toEqual([['k', [8]]]);
    // Judged again against what the conflict answered: commits.
    const again = s.peekRaw('k', true) as Uint8Array;
    expect((await commit(s, [['k', again, true]], [write('k', new Uint8Array([9]))])).ok).toBe(true);
    expect([...((await other.getBytes('k')) as Uint8Array)]).toEqual([9]);
  });

  it('values written before stamps still read and are compared whole; a value the store did not hand out is compared past its stamp', async () => {
    const s = make();
    await s.client.set(s.redisKey('old'), Buffer.from([5, 6]));
    expect([...((await s.getBytes('old')) as Uint8Array)]).toEqual([5, 6]);
    const read = (await s.readRaw('old', true)) as Uint8Array;
    expect((await commit(s, [['old', new Uint8Array([5, 9]), true]])).ok).toBe(false);
    expect((await commit(s, [['old', read, true]], [write('old', new Uint8Array([6]))])).ok).toBe(true);
    expect(hasStamp((await s.client.getBuffer(s.redisKey('old'))) as Buffer)).toBe(true);
    // Bytes equal to the stored value past its stamp, not handed out by this store.
    expect((await commit(s, [['old', new Uint8Array([6]), true]])).ok).toBe(true);
    expect((await commit(s, [['old', new Uint8Array([7]), true]])).ok).toBe(false);
    expect((await commit(s, [['gone', new Uint8Array([7]), true]])).ok).toBe(false);
  });
});

describe('memory store: counters and lists expire like Redis keys', () => {
  it('incr and pushCapped with a ttl expire; without one they keep the expiry they had', async () => {
    const clock = new FakeClock();
    const s = new MemoryStore(clock);
    await s.incr('c', { n: 1 }, 1_000);
    await s.pushCapped('l', 1, 5, 1_000);
    clock.advance(600);
    await s.incr('c', { n: 1 });
    await s.pushCapped('l', 2, 5);
    expect(await s.counts('c')).toEqual({ n: 2 });
    clock.advance(600);
    expect(await s.counts('c')).toEqual({});
    expect(await s.list('l', 5)).toEqual([]);
  });
});
