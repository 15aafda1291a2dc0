import { afterAll, describe, expect, it } from 'vitest';
import { backends, REDIS_URL, testPrefix } from '../test/helpers/index.ts';
import { FakeClock } from './clock.ts';
import { StoredStates } from './decoded.ts';
import { silentLogger } from './logger.ts';
import { MemoryStore } from './store/memory.ts';
import { RedisStore } from './store/redis.ts';
import { UnitStore, Units } from './unit.ts';

// Stored states as a detector uses them: inside units of work, over the bytes a store
// hands back (Redis: the real one, a prefix of its own; two instances are two stores on
// one namespace).
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
  const counts = { decodes: 0, encodes: 0 };
  const states = new StoredStates<State>(
    store,
    {
      decode: (b) => {
        counts.decodes++;
        return JSON.parse(Buffer.from(b).toString()) as State;
      },
      encode: (s) => {
        counts.encodes++;
        return new Uint8Array(Buffer.from(JSON.stringify(s)));
      },
    },
    100,
  );
  /** A detector's step: change the state (a new one counts from 0); answers the object it changed. */
  const step = (key: string, fn: (s: State) => void = (s) => s.n++) =>
    states.change(key, (cur) => {
      const s = cur ?? { n: 0 };
      fn(s);
      return { value: s, result: s };
    });
  /** What the store holds (its own bytes, decoded here). */
  const stored = async (key: string) => {
    const b = await base.getBytes(key);
    return b === undefined ? undefined : (JSON.parse(Buffer.from(b).toString()) as State);
  };
  return { store, units: new Units(store, silentLogger()), states, step, stored, counts };
}

describe.each(backends())('stored states (%s)', (backend) => {
  it('a unit changes one working copy, encoded and written once; the next unit gets the object, not a decode', async () => {
    const a = instance(backend, testPrefix());
    // One unit, three inputs of one session (a batch): one object, one encoding.
    const batch = await a.units.run(async () => [await a.step('s'), await a.step('s'), await a.step('s')]);
    const first = batch.value![0];
    expect(new Set(batch.value)).toEqual(new Set([first]));
    expect(a.counts).toEqual({ decodes: 0, encodes: 1 });
    expect(await a.stored('s')).toEqual({ n: 3 });
    // The next unit reads back the bytes it wrote: the same object is handed over.
    const next = (await a.units.run(() => a.step('s'))).value!;
    expect(next).toBe(first);
    expect(next.n).toBe(4);
    expect(a.counts).toEqual({ decodes: 0, encodes: 2 });
    expect(await a.stored('s')).toEqual({ n: 4 });
  });

  it("a reader in the unit sees the unit's change; a reader outside it sees what is stored", async () => {
    const a = instance(backend, testPrefix());
    await a.units.run(() => a.step('s'));
    await a.units.run(async () => {
      await a.step('s', (s) => (s.n = 10));
      expect(await a.states.read('s')).toEqual({ n: 10 });
      expect(a.states.changing('s')?.value).toEqual({ n: 10 });
      expect(a.states.changing('other')).toBeUndefined();
      expect(await a.stored('s')).toEqual({ n: 1 });
    });
    expect(await a.states.read('s')).toEqual({ n: 10 });
  });

  it('a discarded unit writes nothing and its object is not handed out: the next unit decodes what is stored', async () => {
    const a = instance(backend, testPrefix());
    const kept = (await a.units.run(() => a.step('s'))).value!;
    await expect(
      a.units.run(async () => {
        await a.step('s', (s) => (s.n = 99));
        throw new Error('judge failed');
      }),
    ).rejects.toThrow(/judge failed/);
    expect(a.states.size).toBe(0);
    expect(await a.stored('s')).toEqual({ n: 1 });
    // (the object the failed unit changed is the one it took: it must not come back)
    expect(kept.n).toBe(99);
    const next = (await a.units.run(() => a.step('s'))).value!;
    expect(next).not.toBe(kept);
    expect(next.n).toBe(2);
    expect(a.counts.decodes).toBe(1);
  });

  it.runIf(backend === 'redis')(
    "a unit's copy is never shared with a unit running beside it; the one that loses the commit is judged again",
    async () => {
      const a = instance(backend, testPrefix());
      await a.units.run(() => a.step('s'));
      let release!: () => void;
      const held = new Promise<void>((r) => {
        release = r;
      });
      const got: [string, State][] = [];
      const first = a.units.run(async () => {
        got.push(['first', await a.step('s')]);
        await held;
      });
      await new Promise((r) => setTimeout(r, 20));
      // The second unit judges and commits while the first holds its copy, not committed.
      await a.units.run(async () => {
        got.push(['second', await a.step('s')]);
      });
      release();
      await first;
      expect(got.map(([w]) => w)).toEqual(['first', 'second', 'first']);
      expect(got[1][1]).not.toBe(got[0][1]);
      // The first was judged again on what the second committed: both counted.
      expect(await a.stored('s')).toEqual({ n: 3 });
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
    expect(await a.stored('s')).toEqual({ n: 41 });
  });

  it('outside a unit: one compare-and-set, nothing kept', async () => {
    const a = instance(backend, testPrefix());
    const s = await a.step('s');
    const t = await a.step('s');
    expect(t).not.toBe(s);
    expect(t.n).toBe(2);
    expect(await a.stored('s')).toEqual({ n: 2 });
    expect(a.states.size).toBe(0);
  });

  it('a change that keeps nothing writes nothing', async () => {
    const a = instance(backend, testPrefix());
    const r = await a.units.run(() => a.states.change('s', (cur) => ({ value: undefined, result: cur })));
    expect(r.value).toBeUndefined();
    expect(await a.stored('s')).toBeUndefined();
    expect(a.counts.encodes).toBe(0);
  });
});
