import { afterEach, describe, expect, it } from 'vitest';
import { createRegistry } from '../../builtins.ts';
import {
  backends,
  behaviour,
  eventually,
  finalRow,
  flushPrefix,
  recordingPlugin,
  testPrefix,
  testVigil,
  withMemory,
  withRedis,
} from '../../test/helpers/index.ts';
import { FakeClock } from '../clock.ts';
import { keys } from '../store/keys.ts';
import type { RedisStore } from '../store/redis.ts';
import type { Vigil } from '../vigil.ts';

const running: { v: Vigil; prefix?: string }[] = [];
afterEach(async () => {
  for (const r of running.splice(0)) {
    await r.v.close();
    if (r.prefix) await flushPrefix(r.prefix);
  }
});

const alert = (over: Record<string, unknown> = {}) => ({
  dedup_key: 'tree-1',
  severity: 'warning' as const,
  title: 'No progress: worker',
  summary: '120 calls, 30% duplicates',
  source: 'no-progress',
  ...over,
});

async function setup(
  backend: 'memory' | 'redis',
  channels: Record<string, unknown>[],
  mode: 'ok' | 'hang' | 'fail' | 'permanent' = 'ok',
  clock?: FakeClock,
) {
  const b = behaviour(mode);
  const registry = createRegistry().register(recordingPlugin(b));
  const prefix = backend === 'redis' ? testPrefix() : undefined;
  const v = await testVigil({
    backend,
    prefix,
    registry,
    clock,
    channels: channels.map((c) => ({ type: 'recording', ...c })),
  });
  running.push({ v, prefix });
  return { v, b };
}

describe.each(backends())('notifier pipeline (%s)', (backend) => {
  it('a delivery the receiver got is in the log read right after (its row is batched, not out of sight)', async () => {
    const { v, b } = await setup(backend, [{ name: 'rec' }]);
    await v.notifier.notify(alert());
    // (polled every tick: the read comes within the row's batching delay)
    await eventually(() => b.sent.length === 1, 10_000, 0);
    expect((await v.deliveryLog.recent()).map((r) => r.outcome)).toEqual(['delivered']);
  });

  it('1,000 triggers of one dedup_key in a burst deliver once', async () => {
    const { v, b } = await setup(backend, [{ name: 'rec', rate_limit: { max: 1000, window: '1m' } }]);
    const results = await Promise.all(Array.from({ length: 1000 }, () => v.notifier.notify(alert())));
    expect(results.filter((r) => r.fired === 'trigger')).toHaveLength(1);
    await v.queue.idle();
    await eventually(async () => (await v.deliveryLog.recent()).length === 1);
    expect(b.sent).toHaveLength(1);
    expect(b.sent[0]).toMatchObject({ dedup_key: 'tree-1', state: 'trigger', severity: 'warning' });
  });

  it('trigger, escalate, resolve deliver three messages; two with resolve_messages off', async () => {
    const { v, b } = await setup(backend, [
      { name: 'all', min_severity: 'info' },
      { name: 'noresolve', min_severity: 'info', resolve_messages: false },
    ]);
    await v.notifier.notify(alert());
    await v.notifier.notify(alert({ severity: 'warning' })); // repeat: nothing
    await v.notifier.notify(alert({ severity: 'critical', summary: 'looping' }));
    await v.notifier.notify(alert({ state: 'resolve', summary: 'landed' }));
    await v.notifier.notify(alert({ state: 'resolve' })); // already closed: nothing
    await v.queue.idle();
    await eventually(async () => (await v.deliveryLog.recent()).length === 5);
    const by = (ch: string) =>
      (b.sent as unknown as { state: string }[]).length &&
      v.deliveryLog.recent().then((rows) =>
        rows
          .filter((r) => r.channel === ch)
          .map((r) => r.state)
          .reverse(),
      );
    expect(await by('all')).toEqual(['trigger', 'escalate', 'resolve']);
    expect(await by('noresolve')).toEqual(['trigger', 'escalate']);
    expect(b.sent).toHaveLength(5);
  });

  it('a channel with min_severity critical gets no warning, but gets the escalation', async () => {
    const { v } = await setup(backend, [
      { name: 'desk', min_severity: 'warning' },
      { name: 'pager', min_severity: 'critical' },
    ]);
    const r1 = await v.notifier.notify(alert());
    expect(r1.channels.find((c) => c.name === 'pager')).toMatchObject({
      outcome: 'filtered',
      reason: 'below min_severity',
    });
    await v.notifier.notify(alert({ severity: 'critical' }));
    await v.queue.idle();
    await eventually(async () => (await v.deliveryLog.recent()).length === 3);
    const rows = await v.deliveryLog.recent();
    // The pager was never told of the warning: the critical is its trigger (its story starts there).
    expect(rows!.filter((r) => r.channel === 'pager').map((r) => `${r.state}/${r.severity}`)).toEqual([
      'trigger/critical',
    ]);
  });

  it('a duplicate enqueue of the same transition is not delivered twice', async () => {
    const { v, b } = await setup(backend, [{ name: 'rec' }]);
    const r = await v.notifier.notify(alert());
    const job = { id: r.channels[0].job_id!, channel: 'rec', alert: { ...b.sent[0], dedup_key: 'tree-1' } } as never;
    await v.queue.idle();
    // The queue itself refuses an id it has seen, and the notifier's claim refuses it too.
    expect(await v.queue.enqueue(job)).toBe(false);
    await v.queue.idle();
    expect(b.sent).toHaveLength(1);
  });

  it('a hanging channel times out, is retried once, then shows as failed; enqueueing others is not held up', async () => {
    const b = behaviour('hang');
    const ok = behaviour('ok');
    const registry = createRegistry().register(recordingPlugin(b, 'hanging')).register(recordingPlugin(ok, 'fine'));
    const prefix = backend === 'redis' ? testPrefix() : undefined;
    const v = await testVigil({
      backend,
      prefix,
      registry,
      notifications: { delivery_timeout: 300, retry_delay: 20 },
      channels: [
        { name: 'hung', type: 'hanging', min_severity: 'critical' },
        { name: 'fine', type: 'fine', min_severity: 'info', rate_limit: { max: 100, window: '1m' } },
      ],
    });
    running.push({ v, prefix });
    await v.notifier.notify(alert({ dedup_key: 'stuck', severity: 'critical' }));
    // While the hung delivery is in flight, other alerts are accepted and delivered.
    for (let i = 0; i < 20; i++) await v.notifier.notify(alert({ dedup_key: `other-${i}` }));
    await eventually(() => ok.sent.length === 21);
    const hungRow = await eventually(async () =>
      (await v.deliveryLog.recent(200)).find(
        (r) => r.channel === 'hung' && r.dedup_key === 'stuck' && r.outcome !== 'retried',
      ),
    );
    expect(hungRow).toMatchObject({ outcome: 'failed', attempts: 2 });
    expect(hungRow!.reason).toMatch(/timed out after 300 ms/);
    expect(b.attempts).toBe(2);
  });

  it('a permanent failure is not retried', async () => {
    const { v, b } = await setup(backend, [{ name: 'rec' }], 'permanent');
    await v.notifier.notify(alert());
    const row = await finalRow(v);
    expect(row).toMatchObject({ outcome: 'failed', attempts: 1, reason: 'recording channel refused (400)' });
    expect(b.attempts).toBe(1);
  });

  it('a retryable failure is retried exactly once', async () => {
    const { v, b } = await setup(backend, [{ name: 'rec' }], 'fail');
    await v.notifier.notify(alert());
    const row = await finalRow(v);
    expect(row).toMatchObject({ outcome: 'failed', attempts: 2 });
    await v.queue.idle();
    expect(b.attempts).toBe(2);
  });

  // A channel at its default settings (quiet window 5m, 10 incidents per 10m); the clock stands still.
  const defaults = (clock = new FakeClock()) => setup(backend, [{ name: 'rec' }], 'ok', clock);
  const told = (b: ReturnType<typeof behaviour>, key?: string) =>
    b.sent.filter((a) => key === undefined || a.dedup_key === key).map((a) => `${a.state}/${a.severity}`);

  it('each stage of an incident gets through at once: a higher stage, then critical, inside the quiet window', async () => {
    const { v, b } = await defaults();
    const stage = (n: number, severity: 'warning' | 'critical') =>
      v.notifier.notify(alert({ dedup_key: 'r:recovery', severity, stage: n, title: `stage ${n}` }));
    expect((await stage(1, 'warning')).fired).toBe('trigger');
    expect((await stage(1, 'warning')).fired).toBeUndefined(); // the same stage again: no transition
    expect((await stage(2, 'warning')).fired).toBe('escalate');
    const hard = await stage(3, 'critical');
    expect(hard).toMatchObject({ fired: 'escalate', channels: [{ name: 'rec', outcome: 'queued' }] });
    await v.queue.idle();
    await eventually(() => b.sent.length === 3);
    expect(b.sent.map((a) => `${a.state}/${a.severity}/${a.title}`)).toEqual([
      'trigger/warning/stage 1',
      'escalate/warning/stage 2',
      'escalate/critical/stage 3',
    ]);
    expect((await v.deliveryLog.recent()).filter((r) => r.outcome === 'suppressed')).toEqual([]);
  });

  it('a critical right after a warning escalation is not held by the quiet window the warning opened', async () => {
    const { v, b } = await setup(backend, [{ name: 'rec', min_severity: 'info' }]);
    await v.notifier.notify(alert({ severity: 'info' }));
    await v.notifier.notify(alert({ severity: 'warning' }));
    const r = await v.notifier.notify(alert({ severity: 'critical' }));
    expect(r.channels[0]).toMatchObject({ outcome: 'queued' });
    await v.queue.idle();
    await eventually(() => b.sent.length === 3);
    expect(told(b)).toEqual(['trigger/info', 'escalate/warning', 'escalate/critical']);
  });

  it('the rate limit counts incidents, not every state of one, and never holds a rise', async () => {
    const { v, b } = await setup(backend, [{ name: 'rec', rate_limit: { max: 2, window: '1h' } }]);
    // One incident's trigger and resolve take one place; tree-2 the other.
    await v.notifier.notify(alert());
    await v.notifier.notify(alert({ state: 'resolve' }));
    await v.notifier.notify(alert({ dedup_key: 'tree-2' }));
    // The room is spent: a third incident is held (and its resolve is not sent)...
    const held = await v.notifier.notify(alert({ dedup_key: 'tree-3' }));
    expect(held.channels[0]).toMatchObject({ outcome: 'suppressed', reason: expect.stringMatching(/^rate limit/) });
    // ...but tree-2's escalation goes out, and tree-3's critical (no critical incident yet) too, as its trigger.
    await v.notifier.notify(alert({ dedup_key: 'tree-2', severity: 'critical' }));
    await v.notifier.notify(alert({ dedup_key: 'tree-3', severity: 'critical' }));
    await v.notifier.notify(alert({ dedup_key: 'tree-3', state: 'resolve' }));
    await v.queue.idle();
    await eventually(() => b.sent.length === 6);
    expect(b.sent.map((a) => `${a.dedup_key}/${a.state}/${a.severity}`)).toEqual([
      'tree-1/trigger/warning',
      'tree-1/resolve/warning',
      'tree-2/trigger/warning',
      'tree-2/escalate/critical',
      'tree-3/trigger/critical',
      'tree-3/resolve/critical',
    ]);
  });

  it('the quiet window holds a flapping incident (and then its resolve), not a worse one', async () => {
    const clock = new FakeClock();
    const { v, b } = await defaults(clock);
    await v.notifier.notify(alert());
    await v.notifier.notify(alert({ state: 'resolve' }));
    clock.advance(60_000);
    const again = await v.notifier.notify(alert()); // flapping inside the quiet window
    expect(again.channels[0]).toMatchObject({ outcome: 'suppressed', reason: 'quiet window (opened here 60 s ago)' });
    // Nobody here heard of this opening: its resolve is not sent either.
    const closed = await v.notifier.notify(alert({ state: 'resolve' }));
    expect(closed.channels[0]).toMatchObject({ outcome: 'filtered', reason: 'not told of this incident' });
    clock.advance(60_000);
    await v.notifier.notify(alert());
    // Worse than what the channel was told: it gets through the quiet window, as the channel's trigger.
    await v.notifier.notify(alert({ severity: 'critical' }));
    await v.queue.idle();
    await eventually(() => b.sent.length === 3);
    expect(told(b)).toEqual(['trigger/warning', 'resolve/warning', 'trigger/critical']);
    expect(
      (await v.deliveryLog.recent()).filter((r) => r.outcome === 'suppressed').map((r) => r.reason?.split(' (')[0]),
    ).toEqual(['quiet window', 'quiet window']);
  });

  it('Send test alert skips dedup, quiet window and rate limit, and is marked TEST', async () => {
    const { v, b } = await setup(backend, [
      { name: 'rec', min_severity: 'critical', rate_limit: { max: 1, window: '1h' } },
    ]);
    const ids = [];
    for (let i = 0; i < 3; i++) ids.push((await v.notifier.sendTest('rec')).job_id);
    for (const id of ids)
      expect(await v.notifier.waitForOutcome(id, 10_000)).toMatchObject({ outcome: 'delivered', test: true });
    expect(b.sent).toHaveLength(3);
    expect(b.sent[0].title).toMatch(/^TEST/);
    await expect(v.notifier.sendTest('nope')).rejects.toMatchObject({ code: 'CHANNEL_NOT_FOUND' });
  });

  it('lists open alerts and forgets resolved ones', async () => {
    const { v } = await setup(backend, [{ name: 'rec' }]);
    await v.notifier.notify(alert({ dedup_key: 'a' }));
    await v.notifier.notify(alert({ dedup_key: 'b' }));
    await v.notifier.notify(alert({ dedup_key: 'a', state: 'resolve' }));
    expect((await v.notifier.openAlerts()).map((i) => i.dedup_key)).toEqual(['b']);
  });

  it('the queue reports when its oldest waiting delivery was raised', async () => {
    const clock = new FakeClock();
    const b = behaviour('fail');
    const prefix = backend === 'redis' ? testPrefix() : undefined;
    const v = await testVigil({
      backend,
      prefix,
      clock,
      registry: createRegistry().register(recordingPlugin(b)),
      // Both fail once and wait a minute for their retry (delayed).
      notifications: { retry_delay: 60_000 },
      channels: [{ name: 'r', type: 'recording', min_severity: 'info' }],
    });
    running.push({ v, prefix });
    expect(await v.queue.oldestAt()).toBeUndefined();
    const first = clock.now();
    await v.notifier.notify(alert({ dedup_key: 'a' }));
    clock.advance(5_000);
    await v.notifier.notify(alert({ dedup_key: 'b' }));
    await eventually(() => b.attempts === 2);
    expect(await v.queue.oldestAt()).toBe(first);
  });

  it('rejects a malformed alert with the field named', async () => {
    const { v } = await setup(backend, [{ name: 'rec' }]);
    await expect(v.notifier.notify({ ...alert(), severity: 'loud' as never })).rejects.toThrow(/severity/);
  });
});

describe.each(backends())('notifier guarantees (%s)', (backend) => {
  it('a fan-out cut short (the queue failed after the commit) waits in the outbox and the reconciler sends it once', async () => {
    const { v, b } = await setup(backend, [{ name: 'rec' }]);
    // On Redis the one-script delivery cannot be cut short like this; the stages it falls back to can.
    const enqueue = v.queue.enqueue.bind(v.queue);
    let fail = true;
    v.queue.enqueue = async (job) => {
      if (fail) throw new Error('queue unreachable');
      return enqueue(job);
    };
    const r = await v.notifier.notify(alert());
    expect(r.fired).toBe('trigger');
    // The transition is committed with its outbox entry: nothing is lost.
    expect((await v.notifier.openAlerts())[0]).toMatchObject({ dedup_key: 'tree-1', seq: 1 });
    expect(await v.store.base.outboxRead(10)).toHaveLength(1);
    fail = false;
    expect(await v.units.reconcile(true)).toBe(1);
    expect(await v.units.reconcile(true)).toBe(0);
    await v.queue.idle();
    await eventually(() => b.sent.length === 1);
    expect(await v.store.base.outboxRead(10)).toEqual([]);
    expect(b.sent.map((a) => `${a.state}#${a.seq}`)).toEqual(['trigger#1']);
  });

  it('a receiver that fails for a while gets every alert raised meanwhile, retried with backoff', async () => {
    const { v, b } = await setup(backend, [{ name: 'rec', rate_limit: { max: 100, window: '1m' } }], 'fail');
    // Unlimited attempts within max_age, short delays.
    (v.deliverer as unknown as { policy: { maxAttempts: number; baseMs: number } }).policy.maxAttempts = 0;
    for (let i = 0; i < 5; i++) await v.notifier.notify(alert({ dedup_key: `down-${i}` }));
    await eventually(() => b.attempts >= 12);
    b.mode = 'ok';
    await eventually(() => b.sent.length === 5, 20_000);
    const rows = await v.deliveryLog.recent(500);
    expect(rows.filter((r) => r.outcome === 'delivered')).toHaveLength(5);
    expect(rows.filter((r) => r.outcome === 'failed')).toHaveLength(0);
    expect(rows.some((r) => r.outcome === 'retried' && (r.retry_in_ms ?? 0) > 0)).toBe(true);
  });

  it('a trigger still retrying when its incident resolves is dropped, not sent after the resolve', async () => {
    const { v, b } = await setup(backend, [{ name: 'rec' }], 'fail');
    (v.deliverer as unknown as { policy: { maxAttempts: number } }).policy.maxAttempts = 0;
    await v.notifier.notify(alert());
    await eventually(() => b.attempts >= 2);
    // Still failing: the resolve is raised while the trigger waits for its next attempt.
    await v.notifier.notify(alert({ state: 'resolve' }));
    const dropped = await eventually(async () =>
      (await v.deliveryLog.recent()).find((r) => r.state === 'trigger' && r.outcome !== 'retried'),
    );
    expect(dropped).toMatchObject({ outcome: 'suppressed', reason: 'dropped: the incident was resolved first' });
    b.mode = 'ok';
    await eventually(() => b.sent.length === 1);
    expect(b.sent.map((a) => a.state)).toEqual(['resolve']);
  });
});

/** Names of the commands the store's and the queue's connections send while `fn` runs. */
async function commandsDuring(v: Vigil, fn: () => Promise<unknown>): Promise<string[]> {
  const names: string[] = [];
  const clients = [
    (v.store.base as RedisStore).client,
    (v.queue as unknown as { producer: RedisStore['client'] }).producer,
  ];
  const originals = clients.map((c) => c.sendCommand);
  for (const c of clients) {
    const send = c.sendCommand.bind(c);
    c.sendCommand = ((cmd: { name: string }, ...rest: unknown[]) => {
      names.push(cmd.name);
      return (send as (...a: unknown[]) => unknown)(cmd, ...rest);
    }) as typeof c.sendCommand;
  }
  try {
    await fn();
  } finally {
    clients.forEach((c, i) => {
      c.sendCommand = originals[i];
    });
  }
  return names;
}

describe.runIf(withRedis)('notifier and BullMQ (redis)', () => {
  it('a queue that refuses the job: the transition waits in the outbox, the reconciler sends it once', async () => {
    const { v, b } = await setup('redis', [{ name: 'rec' }]);
    // BullMQ's job counter holding the wrong type: its add fails.
    const counter = (v.queue as unknown as { queue(c: string): { toKey(t: string): string } }).queue('rec').toKey('id');
    const redis = (v.store.base as RedisStore).client;
    await redis.hset(counter, 'x', '1');
    const r = await v.notifier.notify(alert());
    expect(r).toMatchObject({ fired: 'trigger', channels: [] });
    expect((await v.notifier.openAlerts())[0]).toMatchObject({ dedup_key: 'tree-1', seq: 1 });
    expect(await v.store.base.outboxRead(10)).toHaveLength(1);
    await redis.del(counter);
    expect(await v.units.reconcile(true)).toBe(1);
    // The same trigger again is no transition: nothing more is queued.
    expect((await v.notifier.notify(alert())).channels).toEqual([]);
    await v.queue.idle();
    await eventually(() => b.sent.length === 1);
    expect(b.sent.map((a) => `${a.state}#${a.seq}`)).toEqual(['trigger#1']);
    expect(await v.store.base.outboxRead(10)).toEqual([]);
  });

  it('an add that fails after BullMQ stored the job (its wait list the wrong type) is not taken for a duplicate: the reconciler sends it once', async () => {
    const { v, b } = await setup('redis', [{ name: 'rec' }]);
    const q = (v.queue as unknown as { queue(c: string): { toKey(t: string): string } }).queue('rec');
    const redis = (v.store.base as RedisStore).client;
    await redis.set(q.toKey('wait'), 'not-a-list');
    const r = await v.notifier.notify(alert());
    expect(r).toMatchObject({ fired: 'trigger', channels: [] });
    expect(await v.store.base.outboxRead(10)).toHaveLength(1);
    await redis.del(q.toKey('wait'));
    expect(await v.units.reconcile(true)).toBe(1);
    await v.queue.idle();
    await eventually(() => b.sent.length === 1);
    expect(b.sent.map((a) => `${a.state}#${a.seq}`)).toEqual(['trigger#1']);
    expect(await v.store.base.outboxRead(10)).toEqual([]);
  });
});

describe.runIf(withRedis)('notifier outbox on redis', () => {
  it("a crash after the jobs were added, before the entry's removal: the reconciler hands it out again, the job id refuses the copy", async () => {
    const { v, b } = await setup('redis', [{ name: 'rec' }]);
    // The process "dies" after the jobs were added: the entry's removal never runs.
    const base = v.store.base;
    const done = base.outboxDone.bind(base);
    base.outboxDone = async () => {};
    const r = await v.notifier.notify(alert());
    expect(r.channels).toMatchObject([{ name: 'rec', outcome: 'queued' }]);
    expect(await base.outboxRead(10)).toHaveLength(1);
    base.outboxDone = done;
    expect(await v.units.reconcile(true)).toBe(1);
    expect(await base.outboxRead(10)).toEqual([]);
    await v.queue.idle();
    await eventually(() => b.sent.length === 1);
    expect(b.sent.map((a) => `${a.state}#${a.seq}`)).toEqual(['trigger#1']);
  });

  it('an entry left behind for a transition already handed out is removed, not sent again', async () => {
    const { v, b } = await setup('redis', [{ name: 'rec' }]);
    const base = v.store.base as RedisStore;
    await v.notifier.notify(alert());
    await v.queue.idle();
    await eventually(() => b.sent.length === 1);
    // The same entry again, as a second instance's copy or an old crash would leave it.
    const copy = { kind: 'alert', alert: b.sent[0], episode: (await v.notifier.openAlerts())[0].opened_at };
    await base.client.xadd(base.redisKey('outbox'), '*', 'v', JSON.stringify(copy));
    expect(await base.outboxRead(10)).toHaveLength(1);
    expect(await v.units.reconcile(true)).toBe(1);
    expect(await base.outboxRead(10)).toEqual([]);
    await v.queue.idle();
    expect(b.sent).toHaveLength(1);
  });

  it("deliveries' sent marks and log rows are one script; a mark never goes down, a test alert sets none", async () => {
    const prefix = testPrefix();
    const v = await testVigil({
      backend: 'redis',
      prefix,
      worker: false,
      registry: createRegistry().register(recordingPlugin(behaviour('ok'))),
      channels: [{ name: 'rec', type: 'recording', min_severity: 'info' }],
    });
    running.push({ v, prefix });
    const a = (seq: number, test?: boolean) => ({
      id: `job-${seq}-${test ? 't' : 'n'}`,
      channel: 'rec',
      alert: {
        dedup_key: 'tree-1',
        severity: 'warning' as const,
        state: 'trigger' as const,
        title: 'No progress',
        summary: '',
        details: '',
        source: 'no-progress',
        at: Date.now(),
        seq,
        ...(test ? { test: true } : {}),
      },
    });
    const deliver = async (job: ReturnType<typeof a>) => {
      expect(await v.deliverer.attempt(job, 1)).toEqual({ ok: true });
      await v.deliverer.settled();
    };
    await deliver(a(1)); // (the script loaded)
    const base = v.store.base as RedisStore;
    const mark = () => v.store.get<number>(keys.sent('rec', 'tree-1'));
    // Two deliveries close together share one write.
    expect(
      await commandsDuring(v, async () => {
        expect(await v.deliverer.attempt(a(3), 1)).toEqual({ ok: true });
        expect(await v.deliverer.attempt(a(2), 1)).toEqual({ ok: true });
        await v.deliverer.settled();
      }),
    ).toEqual(['evalsha']);
    expect(await mark()).toBe(3);
    expect(await base.client.pttl(base.redisKey(keys.sent('rec', 'tree-1')))).toBeGreaterThan(0);
    await deliver(a(2));
    expect(await mark()).toBe(3);
    await deliver(a(4));
    expect(await mark()).toBe(4);
    await deliver(a(9, true));
    expect(await mark()).toBe(4);
    const rows = (await v.deliveryLog.recent()).map((r) => `${r.job_id}:${r.outcome}${r.test ? ':test' : ''}`);
    expect(rows).toEqual([
      'job-9-t:delivered:test',
      'job-4-n:delivered',
      'job-2-n:delivered',
      'job-2-n:delivered',
      'job-3-n:delivered',
      'job-1-n:delivered',
    ]);
  });
});

describe.runIf(withMemory)('memory queue on a clean stop', () => {
  it('drains what is queued before it closes, and logs what it could not send', async () => {
    const slow = behaviour('ok');
    const registry = createRegistry().register(recordingPlugin(slow));
    const v = await testVigil({
      backend: 'memory',
      registry,
      notifications: { drain_timeout: 5_000 },
      channels: [{ name: 'rec', type: 'recording', min_severity: 'info', rate_limit: { max: 100, window: '1m' } }],
    });
    for (let i = 0; i < 20; i++) await v.notifier.notify(alert({ dedup_key: `q-${i}` }));
    await v.close();
    expect(slow.sent).toHaveLength(20);
  });
});

describe.runIf(withRedis)('notifier ordering (redis)', () => {
  it('a retried trigger that lost the race with its resolve is not sent after it', async () => {
    const b = behaviour('ok');
    let calls = 0;
    const flaky = {
      ...recordingPlugin(b, 'flaky'),
      create(_c: unknown, _o: unknown, name: string) {
        return {
          type: 'flaky',
          name,
          async send(a: import('../alert.ts').Alert) {
            calls++;
            // The trigger's first attempt fails (retryable); everything else goes through.
            if (calls === 1) {
              const { DeliveryError } = await import('../errors.ts');
              throw new DeliveryError('flaky channel answered 503', { retryable: true });
            }
            b.sent.push(a);
          },
        };
      },
    };
    const prefix = testPrefix();
    const v = await testVigil({
      backend: 'redis',
      prefix,
      registry: createRegistry().register(flaky as never),
      notifications: { retry_delay: 400 },
      channels: [{ name: 'flaky', type: 'flaky', min_severity: 'info' }],
    });
    running.push({ v, prefix });
    await v.notifier.notify(alert());
    await v.notifier.notify(alert({ state: 'resolve' }));
    const rows = await eventually(async () => {
      const r = (await v.deliveryLog.recent()).filter((x) => x.outcome !== 'retried');
      return r.length === 2 ? r : undefined;
    });
    // BullMQ delays the failed trigger; the resolve goes out first; the retry is dropped.
    expect(b.sent.map((a) => a.state)).toEqual(['resolve']);
    expect(rows!.find((r) => r.state === 'trigger')).toMatchObject({
      outcome: 'suppressed',
      reason: 'superseded: a later transition was already delivered',
    });
  });
});
