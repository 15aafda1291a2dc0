import { afterAll, describe, expect, it } from 'vitest';
import { backends, REDIS_URL, testPrefix } from '../test/helpers/index.ts';
import { FakeClock } from './clock.ts';
import { DecodedCache } from './decoded.ts';
import { silentLogger } from './logger.ts';
import { MemoryStore } from './store/memory.ts';
import { RedisStore } from './store/redis.ts';
import { UnitStore, Units } from './unit.ts';

// The decoded-state cache as a detector uses it: inside units of work, over the bytes a
// store hands back (Redis: the real one, a prefix of its own; two instances are two
// stores on one namespace).
const opened: RedisStore[] = [];
afterAll(async () => {
  for (const s of opened.splice(0)) {
    await s.flushNamespace().catch(() => {});
    await s.close();
  }
});

interface State {
  n: number;
}

function instance(backend: 'memory' | 'redis', prefix: string) {
  const base = backend === 'memory' ? new MemoryStore(new FakeClock()) : new RedisStore({ url: REDIS_URL, prefix });
  if (base instanceof RedisStore) opened.push(base);
  const store = new UnitStore(base);
  const cache = new DecodedCache<State>(100);
  let decodes = 0;
  const decode = (b: Uint8Array): State => {
    decodes++;
    return JSON.parse(Buffer.from(b).toString()) as State;
  };
  /** A detector's step: take the state, change it, write and keep it; answers the object it changed. */
  const step = (key: string, fn: (s: State) => void = (s) => s.n++) =>
    store.updateBytes(key, (b) => {
      const s = b === undefined ? { n: 0 } : cache.take(key, b, decode);
      fn(s);
      const value = new Uint8Array(Buffer.from(JSON.stringify(s)));
      cache.keep(key, value, s);
      return { value, result: s };
    });
  return { store, units: new Units(store, silentLogger()), cache, step, decodes: () => decodes };
}

describe.each(backends())('decoded state beside its bytes (%s)', (backend) => {
  it("a committed unit's state is handed to the next unit without a decode; a batch's later inputs get it too", async () => {
    const a = instance(backend, testPrefix());
    const first = (await a.units.run(() => a.step('s'))).value!;
    const second = (await a.units.run(() => a.step('s'))).value!;
    expect(second).toBe(first);
    expect(second.n).toBe(2);
    // One unit, three inputs of one session (a batch): one object throughout, no decode.
    const batch = await a.units.run(async () => [await a.step('s'), await a.step('s'), await a.step('s')]);
    expect(new Set(batch.value)).toEqual(new Set([first]));
    expect(first.n).toBe(5);
    expect(a.decodes()).toBe(0);
  });

  it("a discarded unit's state is not handed out: the next unit decodes what is stored", async () => {
    const a = instance(backend, testPrefix());
    const kept = (await a.units.run(() => a.step('s'))).value!;
    await expect(
      a.units.run(async () => {
        await a.step('s', (s) => (s.n = 99));
        throw new Error('judge failed');
      }),
    ).rejects.toThrow(/judge failed/);
    expect(a.cache.size).toBe(0);
    // (the object the failed unit changed is the one it took: it must not come back)
    expect(kept.n).toBe(99);
    const next = (await a.units.run(() => a.step('s'))).value!;
    expect(next).not.toBe(kept);
    expect(next.n).toBe(2);
    expect(a.decodes()).toBe(1);
  });

  it.runIf(backend === 'redis')(
    "a unit's state not committed yet is not shared with a unit running beside it",
    async () => {
      const a = instance(backend, testPrefix());
      await a.units.run(() => a.step('s'));
      let release!: () => void;
      const held = new Promise<void>((r) => {
        release = r;
      });
      const got: [string, State][] = [];
      // The first leaves the state as it is: its bytes are the stored ones, so only the
      // unit tells its object from the committed one.
      const first = a.units.run(async () => {
        got.push(['first', await a.step('s', () => {})]);
        await held;
      });
      await new Promise((r) => setTimeout(r, 20));
      // The second unit judges and commits while the first holds its state, not committed.
      await a.units.run(async () => {
        got.push(['second', await a.step('s')]);
      });
      release();
      await first;
      expect(got.map(([w]) => w)).toEqual(['first', 'second', 'first']);
      expect(got[1][1]).not.toBe(got[0][1]);
      // The first was judged again on what the second committed.
      const stored = (await a.units.run(() => a.step('s', () => {}))).value!;
      expect(stored.n).toBe(2);
    },
  );

  it.runIf(backend === 'redis')("another instance's write is decoded, not answered from the stale object", async () => {
    const prefix = testPrefix();
    const a = instance(backend, prefix);
    const b = instance(backend, prefix);
    const mine = (await a.units.run(() => a.step('s'))).value!;
    await b.units.run(() => b.step('s', (s) => (s.n = 40)));
    const next = (await a.units.run(() => a.step('s'))).value!;
    expect(next).not.toBe(mine);
    expect(next.n).toBe(41);
  });

  it('outside a unit nothing is kept', async () => {
    const a = instance(backend, testPrefix());
    const s = await a.step('s');
    const t = await a.step('s');
    expect(t).not.toBe(s);
    expect(t.n).toBe(2);
  });
});
