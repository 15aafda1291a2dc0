import { mkdtempSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { backends, REDIS_URL, testPrefix, withMemory } from '../test/helpers/index.ts';
import { SessionBindings } from './binding.ts';
import { FakeClock } from './clock.ts';
import { isAppError } from './errors.ts';
import { loadSensorSecret, parseSessionKeys, sensorSecretFile, sessionKey, sessionKeyHeader } from './session-key.ts';
import { keys, TTL } from './store/keys.ts';
import { MemoryStore } from './store/memory.ts';
import { RedisStore } from './store/redis.ts';
import type { Store } from './store/store.ts';

// Session bindings on both backends; on Redis two instances (two stores, two caches) on
// one namespace, as two `vigil serve` processes share one Redis.

const redisStores: RedisStore[] = [];
afterAll(async () => {
  for (const s of redisStores) {
    await s.flushNamespace().catch(() => {});
    await s.close();
  }
});

/** Two instances on one store namespace: on memory one store (one process), on Redis two clients. */
function pair(backend: 'memory' | 'redis', clock: FakeClock): [SessionBindings, SessionBindings, Store, string] {
  if (backend === 'memory') {
    const s = new MemoryStore(clock);
    return [new SessionBindings(s, clock), new SessionBindings(s, clock), s, ''];
  }
  const prefix = testPrefix();
  const a = new RedisStore({ url: REDIS_URL, prefix });
  const b = new RedisStore({ url: REDIS_URL, prefix });
  redisStores.push(a, b);
  return [new SessionBindings(a, clock), new SessionBindings(b, clock), a, prefix];
}

const secret = Buffer.alloc(32, 7);
const other = Buffer.alloc(32, 9);

async function refusal(p: Promise<unknown>): Promise<{ code: string; message: string } | undefined> {
  try {
    await p;
    return undefined;
  } catch (e) {
    if (!isAppError(e)) throw e;
    return { code: e.code, message: e.message };
  }
}

describe.each(backends())('session bindings (%s)', (backend) => {
  it('the first key binds; from then on only that key passes, on every instance', async () => {
    const clock = new FakeClock(1_000_000);
    const [one, two, store] = pair(backend, clock);
    const k = sessionKey(secret, 'ses_a');
    // Unbound: a keyless input passes and binds nothing.
    await one.check(['ses_a'], () => undefined);
    expect(await two.isBound('ses_a')).toBe(false);
    await one.check(['ses_a'], () => k);
    // Stored as the key's hash, never the key.
    const stored = await store.get<string>(keys.binding('ses_a'));
    expect(stored).toMatch(/^[A-Za-z0-9_-]{22}$/);
    expect(stored).not.toContain(k);
    // The other instance agrees without having seen the key.
    expect(await two.isBound('ses_a')).toBe(true);
    await two.check(['ses_a'], () => k);
    expect(await refusal(two.check(['ses_a'], () => undefined))).toEqual({
      code: 'SESSION_KEY_MISMATCH',
      message: 'headers.x-vigil-session-key: no key for session "ses_a", which is bound to its sensor\'s key',
    });
    expect((await refusal(two.check(['ses_a'], () => sessionKey(other, 'ses_a'))))?.message).toBe(
      'headers.x-vigil-session-key: the key for session "ses_a" is not the key it is bound to',
    );
    // Another session's key is not this one's.
    expect(await refusal(one.check(['ses_a'], () => sessionKey(secret, 'ses_b')))).toMatchObject({
      code: 'SESSION_KEY_MISMATCH',
    });
  });

  it('a refused input binds none of the sessions it names', async () => {
    const clock = new FakeClock(1_000_000);
    const [one, two] = pair(backend, clock);
    await one.check(['ses_bound'], (id) => sessionKey(secret, id));
    const err = await refusal(two.check(['ses_new', 'ses_bound'], (id) => sessionKey(other, id)));
    expect(err?.code).toBe('SESSION_KEY_MISMATCH');
    expect(await one.isBound('ses_new')).toBe(false);
  });

  it('two instances binding one session at once with different keys: one key wins everywhere', async () => {
    const clock = new FakeClock(1_000_000);
    const [one, two] = pair(backend, clock);
    const results = await Promise.allSettled([
      one.check(['ses_race'], () => sessionKey(secret, 'ses_race')),
      two.check(['ses_race'], () => sessionKey(other, 'ses_race')),
    ]);
    expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(1);
    const winner = results[0].status === 'fulfilled' ? secret : other;
    const loser = winner === secret ? other : secret;
    for (const b of [one, two]) {
      await b.check(['ses_race'], () => sessionKey(winner, 'ses_race'));
      expect((await refusal(b.check(['ses_race'], () => sessionKey(loser, 'ses_race'))))?.code).toBe(
        'SESSION_KEY_MISMATCH',
      );
    }
  });

  it("an active session's binding is renewed, so it does not expire under it", async () => {
    const clock = new FakeClock(1_000_000);
    const [one, two, store, prefix] = pair(backend, clock);
    const k = () => sessionKey(secret, 'ses_long');
    await one.check(['ses_long'], k);
    // Every few hours for longer than the binding's lifetime: still bound, still only to k.
    const step = 6 * 3_600_000;
    for (let t = 0; t < TTL.binding + 2 * step; t += step) {
      clock.advance(step);
      await one.check(['ses_long'], k);
    }
    expect(await store.get(keys.binding('ses_long'))).toBeDefined();
    if (backend === 'redis') {
      // Redis keeps real time: the binding about to expire there is renewed by the next use.
      const redis = (store as RedisStore).client;
      const full = `${prefix}:${keys.binding('ses_long')}`;
      await redis.pexpire(full, 5_000);
      clock.advance(step);
      await one.check(['ses_long'], k);
      expect(await redis.pttl(full)).toBeGreaterThan(TTL.binding - 60_000);
    }
    expect(await two.isBound('ses_long')).toBe(true);
  });
});

describe.runIf(withMemory)('the sensor side', () => {
  it('the secret file is made once, 0600 in a 0700 folder, and every sensor reads the same', async () => {
    const home = mkdtempSync(join(tmpdir(), 'vigil-key-'));
    const file = sensorSecretFile({ HOME: home });
    expect(file).toBe(join(home, '.local/state/vigil/sensor-secret'));
    expect(sensorSecretFile({ HOME: home, XDG_STATE_HOME: '/x/state' })).toBe('/x/state/vigil/sensor-secret');
    expect(sensorSecretFile({ HOME: home, VIGIL_SENSOR_SECRET_FILE: '/k/s' })).toBe('/k/s');
    // Many sensors starting at once agree on one secret.
    const all = Array.from({ length: 20 }, () => loadSensorSecret(file, { create: true }));
    for (const s of all) expect(s.equals(all[0])).toBe(true);
    expect(all[0]).toHaveLength(32);
    expect(statSync(file).mode & 0o777).toBe(0o600);
    expect(statSync(join(home, '.local/state/vigil')).mode & 0o777).toBe(0o700);
    expect(readFileSync(file, 'utf8')).toMatch(/^[0-9a-f]{64}\n$/);
    expect(() => loadSensorSecret(join(home, 'absent'), { create: false })).toThrow(/ENOENT/);
    writeFileSync(join(home, 'bad'), 'not a secret');
    expect(() => loadSensorSecret(join(home, 'bad'), { create: true })).toThrow(/not a sensor secret/);
  });

  it('keys are HMAC-SHA256 of the session id, base64url; the header names each session', () => {
    const k = sessionKey(secret, 'ses_a');
    expect(k).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(k).not.toBe(sessionKey(secret, 'ses_b'));
    expect(k).not.toBe(sessionKey(other, 'ses_a'));
    const h = sessionKeyHeader([
      ['ses_a', k],
      ['we=ird,id', sessionKey(secret, 'we=ird,id')],
    ]);
    const parsed = parseSessionKeys(h);
    expect(typeof parsed).toBe('object');
    if (typeof parsed === 'string') return;
    expect(parsed.bySession.get('ses_a')).toBe(k);
    expect(parsed.bySession.get('we=ird,id')).toBe(sessionKey(secret, 'we=ird,id'));
    // Repeated headers, as Node joins them.
    const joined = parseSessionKeys(`ses_a=${k}, ses_b=${sessionKey(secret, 'ses_b')}`);
    expect(typeof joined === 'object' && joined.bySession.size).toBe(2);
    expect(parseSessionKeys(k)).toEqual({ bySession: new Map(), bare: k });
    expect(parseSessionKeys('ses_a=short')).toBe('a key is not 32 to 128 base64url characters');
    expect(parseSessionKeys(`${k} ${k}`)).toBe('a bare key must be the only one');
  });
});
