import { createWriteStream } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { createLogger } from '../core/logger.ts';
import type { Vigil } from '../core/vigil.ts';
import { type App, buildServer } from '../service/server.ts';
import { http, sleep, stopProc, until } from './fixtures/opencode-e2e/procs.ts';
import { needsRedisServer } from './helpers/external.ts';
import { testVigil } from './helpers/index.ts';
import { TestRedis } from './helpers/redis-server.ts';
import { crash, postUntilAccepted, type Served, vigilServe } from './helpers/serve.ts';
import { WebhookReceiver as Receiver, webhookChannel, webhookSecret } from './helpers/webhook-receiver.ts';

// What an SRE checks before trusting a pager: pages survive a receiver that is down for
// a minute, a provider's Retry-After, a clean stop and a crash of the service, and a
// Redis that is shut down or killed under a stream of transitions while every client
// retries its 5xx. Each transition is counted at a local webhook receiver by its
// identity (dedup_key, state, seq; the webhook-id header is derived from it).

/** The cases that start a redis-server of their own skip without one. */
const OWN_REDIS = needsRedisServer(import.meta.filename);
const SECRET = webhookSecret();

const verdict = (session: string, level: 'looping' | 'ok') => ({
  session_id: session,
  level,
  reason: `${level} (chaos)`,
  source: 'chaos',
});

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
});

async function service(receiver: Receiver, o: { redis?: string; notifications?: Record<string, unknown> } = {}) {
  const v: Vigil = await testVigil({
    // VIGIL_TEST_LOG=file keeps the service's log (json) to read after a failure.
    logger: process.env.VIGIL_TEST_LOG
      ? createLogger({ level: 'info', format: 'json', destination: createWriteStream(process.env.VIGIL_TEST_LOG) })
      : undefined,
    backend: o.redis ? 'redis' : 'memory',
    env: { HOOK_SECRET: SECRET },
    channels: [webhookChannel(receiver.port)],
    notifications: { max_attempts: 0, ...(o.notifications ?? {}) },
    overlay: {
      ...(o.redis ? { store: { backend: 'redis', redis_url: o.redis, key_prefix: `dg${Date.now()}` } } : {}),
      detection: { tick_interval: 300 },
      server: { rate_limit: { max: 1_000_000 } },
    },
  });
  const app: App = await buildServer(v);
  await app.listen({ host: '127.0.0.1', port: 0 });
  cleanups.push(async () => {
    await app.close();
    await v.close();
  });
  return { v, url: `http://127.0.0.1:${(app.server.address() as AddressInfo).port}` };
}

describe('delivery guarantees', () => {
  it('a receiver down for 60 s then back gets every alert raised meanwhile', async () => {
    const r = new Receiver();
    await r.start();
    cleanups.push(() => r.stop());
    const { url } = await service(r, { notifications: { retry_delay: '1s', retry_max_delay: '5s' } });
    const port = r.port;
    await r.stop();
    for (let i = 0; i < 6; i++) {
      expect((await http('POST', `${url}/verdicts`, verdict(`ses_down${i}`, 'looping'))).status).toBe(202);
      await sleep(10_000);
    }
    await r.start(port);
    await until('every alert', () => r.tally().distinct === 6 || undefined, { timeoutMs: 30_000 });
    expect(r.tally()).toMatchObject({ distinct: 6, duplicates: 0 });
  }, 120_000);

  it('a 429 with Retry-After: 3 is retried no sooner than 3 s later', async () => {
    const r = new Receiver();
    await r.start();
    cleanups.push(() => r.stop());
    r.script.push({ status: 429, headers: { 'retry-after': '3' } });
    const { url } = await service(r);
    const t0 = Date.now();
    await http('POST', `${url}/verdicts`, verdict('ses_429', 'looping'));
    await until('the retried alert', () => r.got.length === 1 || undefined, { timeoutMs: 20_000 });
    const waited = r.got[0].at - t0;
    console.log(`429 Retry-After 3: delivered ${waited} ms after the alert`);
    expect(waited).toBeGreaterThanOrEqual(3_000);
  }, 30_000);

  describe('a stop of vigil serve with alerts queued', () => {
    const serve = (r: Receiver, env: NodeJS.ProcessEnv, notifications: Record<string, unknown> = {}): Promise<Served> =>
      vigilServe({
        name: 'vigil-stop',
        config: {
          notifications: { max_attempts: 0, ...notifications, channels: [webhookChannel(r.port)] },
          server: { rate_limit: { max: 1_000_000, window: '1m' } },
        },
        env: { HOOK_SECRET: SECRET, ...env },
      });

    it('memory backend, SIGTERM: the queue drains before the process exits', async () => {
      const r = new Receiver();
      await r.start();
      cleanups.push(() => r.stop());
      r.delayMs = 150; // a slow receiver: 20 alerts queue up behind it
      const { proc, url } = await serve(r, {});
      for (let i = 0; i < 20; i++) await http('POST', `${url}/verdicts`, verdict(`ses_term${i}`, 'looping'));
      expect(r.got.length).toBeLessThan(20);
      await stopProc(proc, 30_000);
      expect(r.tally()).toMatchObject({ distinct: 20, duplicates: 0 });
    }, 60_000);

    it('Redis backend, SIGKILL mid-delivery: the next process delivers every queued alert', async (ctx) => {
      if (!OWN_REDIS) return ctx.skip();
      const redis = await TestRedis.start({ aof: true });
      cleanups.push(() => redis.down('kill'));
      const r = new Receiver();
      await r.start();
      cleanups.push(() => r.stop());
      r.delayMs = 300;
      const env = { REDIS_URL: redis.url };
      // A dead worker's job is taken over after its lock expires.
      const lock = { lock_duration: '2s', stalled_interval: '1s' };
      const first = await serve(r, env, lock);
      for (let i = 0; i < 20; i++) await http('POST', `${first.url}/verdicts`, verdict(`ses_kill${i}`, 'looping'));
      await crash(first);
      const before = r.tally().distinct;
      const second = await serve(r, env, lock);
      cleanups.push(() => stopProc(second.proc));
      await until('every alert after the restart', () => r.tally().distinct === 20 || undefined, { timeoutMs: 45_000 });
      console.log(
        `SIGKILL: ${before} of 20 delivered before the kill, 20 after the restart, ${r.tally().duplicates} duplicate(s)`,
      );
      expect(r.tally().ids).toBe(true);
      // A delivery cut by the kill may go out again: at most the one in flight.
      expect(r.tally().duplicates).toBeLessThanOrEqual(1);
    }, 90_000);
  });

  it('chaos: Redis shut down and restarted, then killed, under a stream of transitions; clients retry their 5xx', async (ctx) => {
    if (!OWN_REDIS) return ctx.skip();
    const redis = await TestRedis.start({ aof: true });
    cleanups.push(() => redis.down('kill'));
    const r = new Receiver();
    await r.start();
    cleanups.push(() => r.stop());
    const svc = await service(r, {
      redis: redis.url,
      notifications: { retry_delay: '200ms', retry_max_delay: '2s', lock_duration: '2s', stalled_interval: '1s' },
    });

    const { url } = svc;
    // A client posts until it gets a 2xx: what the plugin and the watchdog do.
    let retries = 0;
    const post = (body: unknown) =>
      postUntilAccepted(`${url}/verdicts`, body, {
        onRetry: () => {
          retries++;
        },
      });
    const CLIENTS = 4;
    const SESSIONS = 20;
    let posted = 0;
    const client = async (c: number) => {
      for (let j = 0; j < SESSIONS; j++) {
        await post(verdict(`ses_c${c}_${j}`, 'looping'));
        await post(verdict(`ses_c${c}_${j}`, 'ok'));
        posted += 2;
      }
    };
    const faults = (async () => {
      await until('a third of the stream', () => posted >= 50 || undefined);
      await redis.down('shutdown');
      await sleep(1_500);
      await redis.up();
      await until('two thirds of the stream', () => posted >= 100 || undefined, { timeoutMs: 60_000 });
      await redis.down('kill');
      await sleep(1_500);
      await redis.up();
    })();
    await Promise.all([...Array.from({ length: CLIENTS }, (_, c) => client(c)), faults]);
    const expected = CLIENTS * SESSIONS * 2;
    const { v } = svc;
    // On a failure: what the store holds (transitions written, fan-outs not finished, jobs queued).
    const debug = async () => {
      const incidents = await v.store.keys('alert:');
      let transitions = 0;
      for (const k of incidents) transitions += (await v.store.get<{ seq: number }>(k))?.seq ?? 0;
      // Transitions committed but not yet queued for every channel (the unit outbox).
      const outbox = (await v.store.base.outboxRead(10_000)).length;
      return JSON.stringify({
        ...r.tally(),
        incidents: incidents.length,
        transitions,
        outbox,
        depth: await v.queue.depth(),
        // Sessions whose trigger or resolve is missing, with the delivery rows of each.
        missing: await Promise.all(
          Array.from({ length: CLIENTS * SESSIONS }, (_, i) => `ses_c${Math.floor(i / SESSIONS)}_${i % SESSIONS}`)
            .filter((s) => r.got.filter((g) => g.key.startsWith(`${s}/`)).length < 2)
            .map(async (s) => ({
              session: s,
              got: r.got.filter((g) => g.key.startsWith(`${s}/`)).map((g) => g.key),
              rows: (await v.deliveryLog.recent(1000))
                .filter((x) => x.dedup_key === s)
                .map((x) => `${x.state}:${x.outcome}:${x.reason ?? ''}`),
            })),
        ),
      });
    };
    // A trigger still being retried when its incident's resolve went out is dropped, not
    // sent after it (by design: "superseded" when the later one was delivered first,
    // "dropped" when the incident resolved first): it counts as accounted for when the
    // receiver got a later transition of the same incident.
    const superseded = async () => {
      const rows = await v.deliveryLog.recent(1000);
      return rows.filter(
        (x) =>
          x.outcome === 'suppressed' &&
          /^(superseded|dropped)/.test(x.reason ?? '') &&
          r.got.some((g) => g.key.startsWith(`${x.dedup_key}/`) && !g.key.startsWith(`${x.dedup_key}/${x.state}/`)),
      ).length;
    };
    let last = '';
    await until(
      'every transition at the receiver',
      async () => {
        last = await debug();
        return r.tally().distinct + (await superseded()) >= expected || undefined;
      },
      {
        timeoutMs: 60_000,
        detail: () => last,
      },
    );
    const t = r.tally();
    const dropped = await superseded();
    console.log(
      `chaos: ${expected} transitions, ${t.distinct} delivered, ${dropped} superseded by a later one delivered, ${t.duplicates} duplicate(s), ${retries} client retries`,
    );
    expect(t.distinct + dropped).toBe(expected);
    expect(t.ids).toBe(true);
    expect(t.duplicates).toBeLessThanOrEqual(2); // at most one per fault
  }, 180_000);
});
