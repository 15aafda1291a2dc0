import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRegistry } from '../builtins.ts';
import type { Alert } from '../core/alert.ts';
import type { RedisStore } from '../core/store/redis.ts';
import { hashTagOf, primaries } from '../core/store/redis-connect.ts';
import type { Vigil } from '../core/vigil.ts';
import { LOOP_KNOBS, loopEvents } from '../service/admin/testkit.ts';
import { type App, buildServer } from '../service/server.ts';
import { sleep } from './fixtures/opencode-e2e/procs.ts';
import { needsRedisServer } from './helpers/external.ts';
import {
  type Behaviour,
  behaviour,
  eventually,
  recordingPlugin,
  testPrefix,
  testVigil,
  withRedis,
} from './helpers/index.ts';
import { TestRedisCluster, TestSentinel } from './helpers/redis-server.ts';

// Vigil on a Redis Cluster (three masters) and on a Sentinel-managed primary, each
// started here on free loopback ports: two instances share it and go through the
// paths that make several instances one service (verdicts paged once per transition,
// the judge's state and the tree state written by one and read by the other, runtime
// knobs, the BullMQ queue, idempotent enqueues). On the cluster every key Vigil wrote
// is in the one slot of the prefix's hash tag. Behind Sentinel the primary is killed
// during a stream of verdicts whose clients retry their 5xx: no transition is lost.

const TOKEN = 'topologies-admin-token';
const admin = { authorization: `Bearer ${TOKEN}` };
const OWN_REDIS = withRedis && needsRedisServer(import.meta.filename);

interface Instance {
  v: Vigil;
  app: App;
}

async function instances(url: string, prefix: string, b: Behaviour, n = 2): Promise<Instance[]> {
  const out: Instance[] = [];
  for (let i = 0; i < n; i++) {
    const v = await testVigil({
      backend: 'redis',
      registry: createRegistry().register(recordingPlugin(b)),
      env: { VIGIL_ADMIN_TOKEN: TOKEN },
      channels: [
        { name: 'rec', type: 'recording', min_severity: 'info', quiet_window: 0, rate_limit: { max: 100_000 } },
      ],
      notifications: { max_attempts: 0, retry_delay: 100, retry_max_delay: 1_000 },
      overlay: {
        store: { backend: 'redis', redis_url: url, key_prefix: prefix },
        progress: LOOP_KNOBS,
        modes: { mode: 'auto_recover' },
        server: { rate_limit: { max: 1_000_000 } },
      },
    });
    out.push({ v, app: await buildServer(v) });
  }
  return out;
}

async function closeAll(xs: Instance[]): Promise<void> {
  for (const x of xs) {
    await x.app.close();
    await x.v.close();
  }
}

const post = (x: Instance, url: string, payload: unknown, headers = {}) =>
  x.app.inject({ method: 'POST', url, payload: payload as object, headers });

const verdict = (session: string, level: 'looping' | 'ok') => ({
  session_id: session,
  level,
  reason: `${level} (topology test)`,
  source: 'topology',
});

/** Transitions delivered, by identity; duplicates counted. */
function tally(sent: Alert[]): { distinct: number; duplicates: number } {
  const seen = new Set<string>();
  let duplicates = 0;
  for (const a of sent) {
    const k = `${a.dedup_key}/${a.state}/${a.seq}`;
    if (seen.has(k)) duplicates++;
    seen.add(k);
  }
  return { distinct: seen.size, duplicates };
}

/** What two instances on one Redis must agree on, whatever the topology. */
async function sharedPaths(url: string, prefix: string): Promise<void> {
  const b = behaviour();
  const [x, y] = await instances(url, prefix, b);
  try {
    // verdicts: each session turns looping on one instance and ok on the other; one page per transition
    for (let i = 0; i < 10; i++) {
      expect((await post(i % 2 ? x : y, '/verdicts', verdict(`ses_v${i}`, 'looping'))).statusCode).toBe(202);
      expect((await post(i % 2 ? y : x, '/verdicts', verdict(`ses_v${i}`, 'ok'))).statusCode).toBe(202);
    }
    await eventually(() => tally(b.sent).distinct >= 20, 20_000);

    // the same transition reported to both at once: one incident transition, one page
    const before = b.sent.length;
    await Promise.all([
      post(x, '/verdicts', verdict('ses_twice', 'looping')),
      post(y, '/verdicts', verdict('ses_twice', 'looping')),
    ]);
    await eventually(() => b.sent.some((a) => a.dedup_key === 'ses_twice'), 10_000);
    await x.v.queue.idle();
    await y.v.queue.idle();
    expect(b.sent.slice(before).filter((a) => a.dedup_key === 'ses_twice')).toHaveLength(1);
    expect(tally(b.sent).duplicates).toBe(0);

    // idempotent enqueue: a job id already queued by one instance is a duplicate for the other
    const job = { id: 'rec-ses_job-trigger-1', channel: 'rec', alert: b.sent[0] };
    expect(await x.v.queue.enqueue(job)).toBe(true);
    expect(await y.v.queue.enqueue(job)).toBe(false);
    expect(await x.v.store.setIfAbsent('idem:one', 'x', 60_000)).toBe(true);
    expect(await y.v.store.setIfAbsent('idem:one', 'y', 60_000)).toBe(false);

    // the judge's state: a loop whose reads alternate between the instances is judged as one stream
    const loop = loopEvents('ses_loop', 12);
    for (let i = 0; i < loop.length; i++) {
      expect((await post(i % 2 ? x : y, '/progress', loop[i])).statusCode).toBeLessThan(300);
    }
    const warned = (await y.app.inject({ method: 'GET', url: '/warnings' })).json() as {
      session: string;
      level: string;
    }[];
    expect(warned.find((w) => w.session === 'ses_loop')?.level).toBe('looping');

    // tree state: written by the instance that judged, the other's gate refuses the tree
    expect((await x.v.engine.treeState('ses_loop'))?.stage).toBe(1);
    expect((await y.v.engine.treeState('ses_loop'))?.stage).toBe(1);
    expect((await post(y, '/gate', { conversation: 'ses_loop' })).json().action).toBe('refuse');

    // runtime knobs: a PATCH on one is read by the other
    const patched = await x.app.inject({
      method: 'PATCH',
      url: '/knobs',
      headers: admin,
      payload: { progress: { stall_turns: 4 } },
    });
    expect(patched.statusCode).toBe(200);
    expect((await y.app.inject({ method: 'GET', url: '/knobs' })).json().progress.stall_turns).toBe(4);
  } finally {
    await closeAll([x, y]);
  }
}

describe.runIf(withRedis && OWN_REDIS)('Redis Cluster, three masters', () => {
  let cluster: TestRedisCluster;
  beforeAll(async () => {
    cluster = await TestRedisCluster.start(3);
  }, 60_000);
  afterAll(async () => {
    await cluster?.stop();
  });

  it('two instances share verdicts, judge state, tree state, knobs, the queue and idempotency keys', async () => {
    const prefix = `{${testPrefix()}}`;
    const t0 = Date.now();
    await sharedPaths(cluster.url, prefix);
    console.log(`cluster: shared paths in ${Date.now() - t0} ms`);

    // every key written (store and BullMQ queues) is in the slot of the prefix's hash tag
    const v = await testVigil({
      backend: 'redis',
      overlay: { store: { backend: 'redis', redis_url: cluster.url, key_prefix: prefix } },
    });
    try {
      const client = (v.store.base as RedisStore).client;
      const slot = await client.cluster('KEYSLOT', `{${hashTagOf(prefix)}}`);
      const found: string[] = [];
      for (const node of primaries(client)) {
        let cursor = '0';
        do {
          const [next, batch] = await node.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 500);
          cursor = next;
          found.push(...batch);
        } while (cursor !== '0');
      }
      expect(found.some((k) => k.startsWith(`${prefix}:q:`))).toBe(true);
      expect(found.length).toBeGreaterThan(20);
      const slots = new Set(await Promise.all(found.map((k) => client.cluster('KEYSLOT', k))));
      expect([...slots]).toEqual([slot]);
      await (v.store.base as RedisStore).flushNamespace();
    } finally {
      await v.close();
    }
  }, 90_000);

  it('a prefix without a hash tag is refused at start, naming store.key_prefix', async () => {
    await expect(
      testVigil({
        backend: 'redis',
        overlay: { store: { backend: 'redis', redis_url: cluster.url, key_prefix: 'vigil' } },
      }),
    ).rejects.toThrow(/store\.key_prefix: "vigil" has no hash tag.*\{vigil\}/);
  });
});

describe.runIf(withRedis && OWN_REDIS)('Redis behind Sentinel (a primary, a replica, three Sentinels)', () => {
  let s: TestSentinel;
  beforeAll(async () => {
    s = await TestSentinel.start();
  }, 60_000);
  afterAll(async () => {
    await s?.stop();
  });

  it('two instances share verdicts, judge state, tree state, knobs, the queue and idempotency keys', async () => {
    const t0 = Date.now();
    await sharedPaths(s.url, testPrefix());
    console.log(`sentinel: shared paths in ${Date.now() - t0} ms`);
  }, 90_000);

  it('the primary is killed during a stream of verdicts: the Sentinels promote the replica, no transition is lost', async () => {
    const b = behaviour();
    const xs = await instances(s.url, testPrefix(), b);
    try {
      let retries = 0;
      let posted = 0;
      // a client posts until it gets a 2xx, as the plugin and the watchdog do
      const send = async (x: Instance, body: unknown) => {
        for (;;) {
          const r = await post(x, '/verdicts', body).catch(() => ({ statusCode: 0 }));
          if (r.statusCode === 202) return;
          retries++;
          await sleep(100);
        }
      };
      const CLIENTS = 2;
      const SESSIONS = 15;
      const client = async (c: number) => {
        for (let j = 0; j < SESSIONS; j++) {
          await send(xs[(c + j) % 2], verdict(`ses_f${c}_${j}`, 'looping'));
          await send(xs[(c + j + 1) % 2], verdict(`ses_f${c}_${j}`, 'ok'));
          posted += 2;
        }
      };
      let failoverMs = 0;
      const fault = (async () => {
        await eventually(() => posted >= 16, 60_000);
        const t = Date.now();
        await s.killPrimary();
        failoverMs = Date.now() - t;
      })();
      await Promise.all([...Array.from({ length: CLIENTS }, (_, c) => client(c)), fault]);
      const expected = CLIENTS * SESSIONS * 2;
      // a trigger still being retried when its resolve went out is dropped by design: accounted for
      const superseded = async () =>
        (await xs[0].v.deliveryLog.recent(1000)).filter(
          (r) =>
            r.outcome === 'suppressed' &&
            /^superseded/.test(r.reason ?? '') &&
            b.sent.some((a) => a.dedup_key === r.dedup_key && a.state !== r.state),
        ).length;
      // A delivery cut short by the failover waits in the outbox for the reconciler, which
      // the service runs on its tick (these instances run no timer: the test ticks it).
      await eventually(async () => {
        for (const x of xs) await x.v.units.reconcile().catch(() => 0);
        return tally(b.sent).distinct + (await superseded()) >= expected;
      }, 60_000);
      const t = tally(b.sent);
      const dropped = await superseded();
      console.log(
        `sentinel failover: primary killed after ${16} verdicts, replica promoted in ${failoverMs} ms; ${expected} transitions, ${t.distinct} delivered, ${dropped} superseded, ${t.duplicates} duplicate(s), ${retries} client retries`,
      );
      expect(t.distinct + dropped).toBe(expected);
      expect(await s.primaryPort()).toBe(s.replica.port);
    } finally {
      await closeAll(xs);
    }
  }, 120_000);
});
