import { afterAll, describe, expect, it } from 'vitest';
import { backends, REDIS_URL, testPrefix } from '../../test/helpers/index.ts';
import { FakeClock } from '../clock.ts';
import { MemoryStore } from './memory.ts';
import { RedisStore } from './redis.ts';
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
    const req = (now: number, field = 'trigger', ident = `t${now}`) => ({
      markKey: 'm',
      field,
      ident,
      now,
      quietMs: 1000,
      markTtlMs: 60_000,
      rateKey: 'r',
      windowMs: 10_000,
      max: 2,
    });
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

    it('quiet window first, then the rate limit; refusals record nothing', async () => {
      const s = make();
      expect(await s.admit(req(1_000))).toEqual({ ok: true });
      expect(await s.admit(req(1_500))).toEqual({ ok: false, why: 'quiet', last: 1_000 });
      expect(await s.admit(req(1_600, 'resolve'))).toEqual({ ok: true });
      expect(await s.admit(req(2_100))).toEqual({ ok: false, why: 'rate', count: 2 });
      expect(await s.admit(req(2_200, 'escalate'))).toEqual({ ok: false, why: 'rate', count: 2 });
      // The refused escalate left no mark: once the window frees, it passes.
      expect(await s.admit(req(11_001, 'escalate'))).toEqual({ ok: true });
    });

    it('the same transition admitted again passes without counting twice (a fan-out run again)', async () => {
      const s = make();
      expect(await s.admit(req(1_000, 'trigger', 'k#1'))).toEqual({ ok: true });
      // Inside the quiet window and against the rate limit, the same ident passes again...
      expect(await s.admit(req(1_100, 'trigger', 'k#1'))).toEqual({ ok: true });
      expect(await s.admit(req(1_200, 'trigger', 'k#1'))).toEqual({ ok: true });
      // ...and took one slot of the rate limit only: one more transition fits.
      expect(await s.admit(req(1_300, 'resolve', 'k#2'))).toEqual({ ok: true });
      expect(await s.admit(req(1_400, 'escalate', 'k#3'))).toEqual({ ok: false, why: 'rate', count: 2 });
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
