import { afterAll, describe, expect, it } from 'vitest';
import { backends, REDIS_URL, testPrefix } from '../test/helpers/index.ts';
import { FakeClock } from './clock.ts';
import { AppError } from './errors.ts';
import { silentLogger } from './logger.ts';
import { MemoryStore } from './store/memory.ts';
import { RedisStore } from './store/redis.ts';
import { afterCommit, type OutboxEntry, onDiscard, type UnitPlan, UnitStore, Units } from './unit.ts';

// The unit of work against both backends (Redis: the real one, a prefix of its own).
// Two "instances" are two stores (and two Units) on one namespace.
const opened: RedisStore[] = [];
afterAll(async () => {
  for (const s of opened.splice(0)) {
    await s.flushNamespace().catch(() => {});
    await s.close();
  }
});

function instance(backend: 'memory' | 'redis', prefix: string, shared?: MemoryStore) {
  let base: MemoryStore | RedisStore;
  if (backend === 'memory') base = shared ?? new MemoryStore(new FakeClock());
  else {
    base = new RedisStore({ url: REDIS_URL, prefix });
    opened.push(base);
  }
  const store = new UnitStore(base);
  return { store, units: new Units(store, silentLogger()), base };
}

describe.each(backends())('units of work (%s)', (backend) => {
  it('commit all or nothing: a unit that fails part way writes nothing', async () => {
    const { store, units } = instance(backend, testPrefix());
    await expect(
      units.run(async () => {
        await store.set('a', 1);
        await store.incr('h', { n: 1 });
        await store.pushCapped('l', 'x', 10);
        throw new Error('judge failed');
      }),
    ).rejects.toThrow(/judge failed/);
    expect(await store.get('a')).toBeUndefined();
    expect(await store.counts('h', ['n'])).toEqual({ n: 0 });
    expect(await store.list('l', 10)).toEqual([]);
    await units.run(async () => {
      await store.set('a', 1);
      // read your own writes, inside the unit
      expect(await store.get('a')).toBe(1);
      expect(await store.incr('h', { n: 2 })).toEqual({ n: 2 });
      expect(await store.counts('h', ['n'])).toEqual({ n: 2 });
    });
    expect(await store.get('a')).toBe(1);
    expect(await store.counts('h', ['n'])).toEqual({ n: 2 });
  });

  it('add: counters without a read back, in and out of a unit; a zero delta changes nothing', async () => {
    const { store, units, base } = instance(backend, testPrefix());
    await store.add('c', { n: 1, usd: 0.5 }, 60_000);
    let reads = 0;
    const counts = base.counts.bind(base);
    base.counts = (key: string, fields?: readonly string[]) => {
      reads++;
      return counts(key, fields);
    };
    await units.run(async () => {
      await store.add('c', { n: 2, usd: 0, zero: 0 }, 60_000);
      await store.add('c', { n: 1 });
      // (read your own writes: the stored counts plus this unit's deltas)
      expect(await store.counts('c', ['n', 'usd'])).toEqual({ n: 4, usd: 0.5 });
    });
    base.counts = counts;
    expect(reads).toBe(1); // the counts() above, none for the adds
    expect(await store.counts('c', ['n', 'usd', 'zero'])).toEqual({ n: 4, usd: 0.5, zero: 0 });
    await expect(
      units.run(async () => {
        await store.add('c', { n: 5 });
        throw new Error('judge failed');
      }),
    ).rejects.toThrow(/judge failed/);
    expect(await store.counts('c', ['n'])).toEqual({ n: 4 });
  });

  it('an input id committed once makes every later unit with it a repeat, on any instance', async () => {
    const prefix = testPrefix();
    const one = instance(backend, prefix);
    const two = backend === 'memory' ? { ...one, units: one.units } : instance(backend, prefix);
    const bump = (s: UnitStore) =>
      s.update<number, number>('n', (c) => ({ value: (c ?? 0) + 1, result: (c ?? 0) + 1 }));
    expect(await one.units.run(() => bump(one.store), ['in:x'])).toEqual({ value: 1, repeat: false });
    expect(await two.units.run(() => bump(two.store), ['in:x'])).toEqual({ repeat: true });
    expect(await one.units.run(() => bump(one.store), ['in:x'])).toEqual({ repeat: true });
    expect(await one.store.get('n')).toBe(1);
  });

  it('a batch whose inputs are partly committed (on another instance) judges only the rest, once', async () => {
    const prefix = testPrefix();
    const one = instance(backend, prefix);
    const two = backend === 'memory' ? one : instance(backend, prefix);
    // Each input adds its number: a and b committed by one, then the batch a..d on two.
    const batch = (u: typeof one, ids: string[]) =>
      u.units.run(
        async (seen) => {
          const did: string[] = [];
          for (const id of ids) {
            if (seen.has(`in:${id}`)) continue;
            did.push(id);
            await u.store.add('sum', { [id]: 1 });
          }
          return did;
        },
        ids.map((id) => `in:${id}`),
      );
    expect(await batch(one, ['a', 'b'])).toEqual({ value: ['a', 'b'], repeat: false });
    // Instance two does not know a and b are committed: the commit tells it, and it judges again.
    expect(await batch(two, ['a', 'b', 'c', 'd'])).toEqual({ value: ['c', 'd'], repeat: false });
    expect(await batch(one, ['b', 'c'])).toEqual({ repeat: true });
    expect(await one.store.counts('sum')).toEqual({ a: 1, b: 1, c: 1, d: 1 });
  });

  it('a key written many times in one unit is committed once, with its last value; counters summed', async () => {
    const { store, units, base } = instance(backend, testPrefix());
    const plans: UnitPlan[] = [];
    const commit = base.commitUnit.bind(base);
    base.commitUnit = ((plan: UnitPlan) => {
      plans.push(structuredClone(plan));
      return commit(plan);
    }) as typeof base.commitUnit;
    await units.run(async () => {
      for (let i = 1; i <= 5; i++) {
        await store.update<number, void>('n', () => ({ value: i, result: undefined, ttlMs: 60_000 }));
        await store.setBytes('b', new Uint8Array([i]));
        await store.add('c', { x: 1, y: i });
      }
      await store.add('c', { x: 1 }, 5_000);
      await store.del('gone');
      await store.set('gone', 'back');
    });
    expect(plans).toHaveLength(1);
    expect(plans[0].writes.map((w) => [w.op, 'key' in w ? w.key : ''])).toEqual([
      ['set', 'n'],
      ['set', 'b'],
      ['hincr', 'c'],
      ['set', 'gone'],
    ]);
    expect(plans[0].writes[2]).toMatchObject({ deltas: { x: 6, y: 15 }, ttlMs: 5_000 });
    expect(await store.get('n')).toBe(5);
    expect([...((await store.getBytes('b')) ?? [])]).toEqual([5]);
    expect(await store.counts('c')).toEqual({ x: 6, y: 15 });
    expect(await store.get('gone')).toBe('back');
  });

  it('concurrent units on two instances: every one counted once (a conflict is judged again)', async () => {
    const prefix = testPrefix();
    const one = instance(backend, prefix);
    const two = backend === 'memory' ? one : instance(backend, prefix);
    let judged = 0;
    let discarded = 0;
    let committed = 0;
    const unit = (i: { store: UnitStore; units: Units }, id: string) =>
      i.units.run(async () => {
        judged++;
        onDiscard(() => discarded++);
        afterCommit(() => committed++);
        const cur = (await i.store.get<string[]>('ids')) ?? [];
        await i.store.set('ids', [...cur, id]);
      }, [`in:${id}`]);
    // Each id posted to both instances at the same moment.
    await Promise.all(Array.from({ length: 20 }, (_, n) => [unit(one, `e${n}`), unit(two, `e${n}`)]).flat());
    const ids = (await one.store.get<string[]>('ids')) ?? [];
    expect(ids.sort()).toEqual(Array.from({ length: 20 }, (_, n) => `e${n}`).sort());
    expect(committed).toBe(20);
    // Every judging that did not commit was discarded (its caches put back).
    expect(judged - committed).toBeLessThanOrEqual(discarded + 20);
    if (backend === 'memory') expect([judged, discarded]).toEqual([20, 0]);
  });

  it('an outbox entry is delivered after the commit; one whose delivery failed waits for the reconciler', async () => {
    const { units, base } = instance(backend, testPrefix());
    const got: OutboxEntry[] = [];
    let fail = true;
    units.handle('note', async (e) => {
      if (fail) throw new Error('channel away');
      got.push(e);
    });
    await units.run(() => units.emit({ kind: 'note', n: 1 }));
    expect(got).toEqual([]);
    expect(await base.outboxRead(10)).toHaveLength(1);
    // The tick leaves young entries to the instance that wrote them.
    expect(await units.reconcile(false)).toBe(0);
    fail = false;
    expect(await units.reconcile(true)).toBe(1);
    expect(got).toEqual([{ kind: 'note', n: 1 }]);
    expect(await base.outboxRead(10)).toEqual([]);
    // A discarded unit leaves no entry.
    await expect(
      units.run(async () => {
        await units.emit({ kind: 'note', n: 2 });
        throw new Error('no');
      }),
    ).rejects.toThrow();
    expect(await base.outboxRead(10)).toEqual([]);
  });
});

describe.runIf(backends().includes('redis'))('units of work when Redis is away', () => {
  it('the commit fails as STORE_UNAVAILABLE and nothing is written; the same unit goes through once it is back', async () => {
    const prefix = testPrefix();
    const down = new RedisStore({ url: 'redis://127.0.0.1:1', prefix, timeoutMs: 200 });
    opened.push(down);
    const units = new Units(new UnitStore(down), silentLogger());
    const s = new UnitStore(down);
    const err = await units
      .run(() => s.update<number, void>('n', (c) => ({ value: (c ?? 0) + 1, result: undefined })), ['in:a'])
      .catch((e) => e);
    expect(err).toBeInstanceOf(AppError);
    expect((err as AppError).code).toBe('STORE_UNAVAILABLE');
    const up = instance('redis', prefix);
    expect(await up.store.get('n')).toBeUndefined();
    const r = await up.units.run(
      () => up.store.update<number, void>('n', (c) => ({ value: (c ?? 0) + 1, result: undefined })),
      ['in:a'],
    );
    expect(r.repeat).toBe(false);
    expect(await up.store.get('n')).toBe(1);
  });
});
