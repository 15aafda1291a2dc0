import { afterEach, describe, expect, it } from 'vitest';
import { createRegistry } from '../builtins.ts';
import { FakeClock } from '../core/clock.ts';
import type { Vigil } from '../core/vigil.ts';
import {
  backends,
  behaviour,
  eventually,
  flushPrefix,
  recordingPlugin,
  testPrefix,
  testVigil,
  withRedis,
} from '../test/helpers/index.ts';

// Scenario tests of the response modes through the real engine (store, gate, notifier),
// with a fake clock. Verdicts are injected as external verdicts so each step is exact;
// the last scenario drives the real judge with progress events.

const running: { v: Vigil; prefix?: string }[] = [];
afterEach(async () => {
  for (const r of running.splice(0)) {
    await r.v.close();
    if (r.prefix) await flushPrefix(r.prefix);
  }
});

const ROOT = 'ses_root';
const CHILD = 'ses_child';
const SIBLING = 'ses_sibling';

async function setup(backend: 'memory' | 'redis', mode: string, extra: Record<string, unknown> = {}, prefix?: string) {
  const clock = new FakeClock();
  const b = behaviour();
  const p = prefix ?? (backend === 'redis' ? testPrefix() : undefined);
  const v = await testVigil({
    backend,
    prefix: p,
    clock,
    registry: createRegistry().register(recordingPlugin(b)),
    channels: [
      {
        name: 'rec',
        type: 'recording',
        min_severity: 'info',
        quiet_window: 0,
        rate_limit: { max: 1000, window: '1h' },
      },
    ],
    overlay: { ...extra, modes: { mode, ...((extra.modes as object) ?? {}) } },
  });
  running.push({ v, prefix: prefix ? undefined : p });
  // The tree: root with two children; the gate learns the links from the router's headers.
  await v.engine.check({ conversation: CHILD, parent: ROOT });
  await v.engine.check({ conversation: SIBLING, parent: ROOT });
  return { v, clock, b, prefix: p };
}

const verdict = (v: Vigil, level: 'ok' | 'stalling' | 'looping', session = CHILD) =>
  v.engine.verdicts([
    { session_id: session, level, reason: `${level}: read navbar.js x61`, source: 'test', agent: 'sisyphus' },
  ]);

const gate = async (v: Vigil, conversation: string) => (await v.engine.check({ conversation })).action;
const types = async (v: Vigil) => (await v.engine.directives.pending(ROOT)).map((d) => `${d.type}:${d.session_id}`);
const ackAll = async (v: Vigil) => {
  const p = await v.engine.directives.pending(ROOT);
  await v.engine.ack(p.map((d) => ({ id: d.id, root_id: d.root_id, session_id: d.session_id })));
};
const compactionDone = (v: Vigil, clock: FakeClock) =>
  v.engine.progress([{ kind: 'compaction_done', session_id: ROOT, ts: clock.now(), landed: false }]);

describe.each(backends())('response modes (%s)', (backend) => {
  it('warn: only warnings and alerts; no refusal, no directive but the toast', async () => {
    const { v, b } = await setup(backend, 'warn');
    await verdict(v, 'stalling');
    await verdict(v, 'looping');
    expect(await types(v)).toEqual([`toast:${CHILD}`, `toast:${CHILD}`]);
    for (const s of [CHILD, ROOT, SIBLING]) expect(await gate(v, s)).toBe('allow');
    expect((await v.engine.treeState(ROOT))?.stage).toBe(0);
    await verdict(v, 'ok');
    await v.queue.idle();
    await eventually(() => b.sent.length === 3);
    expect(b.sent.map((a) => `${a.state}/${a.severity}/${a.dedup_key}`)).toEqual([
      `trigger/warning/${ROOT}`,
      `escalate/critical/${ROOT}`,
      `resolve/critical/${ROOT}`,
    ]);
    const warnings = await (await import('../service/server.ts')).buildServer(v).then(async (app) => {
      const r = await app.inject({ method: 'GET', url: '/warnings' });
      await app.close();
      return r.json();
    });
    expect(warnings).toEqual([]);
  });

  it('auto_compact: compacts the stuck session with the report and continues; no refusal', async () => {
    const { v } = await setup(backend, 'auto_compact');
    await verdict(v, 'looping');
    const pending = await v.engine.directives.pending(ROOT);
    expect(pending.map((d) => d.type)).toEqual(['toast', 'compact', 'toast']);
    const compact = pending[1];
    expect(compact).toMatchObject({ session_id: CHILD, auto_continue: true });
    expect(compact.report).toContain('looping');
    for (const s of [CHILD, ROOT]) expect(await gate(v, s)).toBe('allow');
  });

  it('auto_limit_context: caps the stuck session only, until the cap expires', async () => {
    const { v, clock } = await setup(backend, 'auto_limit_context', {
      modes: { auto_limit_context: { max_context_tokens: 50_000, duration: '30m' } },
    });
    await verdict(v, 'looping');
    expect(await v.engine.check({ conversation: CHILD })).toMatchObject({
      action: 'limit',
      max_context_tokens: 50_000,
      limit_mechanism: 'cap',
    });
    expect(await gate(v, SIBLING)).toBe('allow');
    clock.advance(31 * 60_000);
    expect(await gate(v, CHILD)).toBe('allow');
  });

  it('auto_recover: recover, loop again, recover with a cap, loop again, hard stop, Resume', async () => {
    const { v, clock, b } = await setup(backend, 'auto_recover');
    // Stage 1: the stuck child is refused, the plugin aborts it and the root, compacts the root.
    await verdict(v, 'looping');
    expect((await v.engine.treeState(ROOT))?.stage).toBe(1);
    expect(await v.engine.check({ conversation: CHILD })).toMatchObject({
      action: 'refuse',
      status: 429,
      retry_after_s: 30,
    });
    expect(await gate(v, ROOT)).toBe('allow');
    expect(await gate(v, SIBLING)).toBe('allow');
    expect(await types(v)).toEqual([
      `toast:${CHILD}`,
      `abort:${CHILD}`,
      `abort:${ROOT}`,
      `compact:${ROOT}`,
      `toast:${CHILD}`,
    ]);
    const compact = (await v.engine.directives.pending(ROOT)).find((d) => d.type === 'compact');
    expect(compact?.report).toMatch(/Avoid:|looping/);
    // A lost response loses nothing: the same directives are pending until acknowledged.
    expect((await v.engine.pendingFor(CHILD)).length).toBe(5);
    await ackAll(v);
    expect(await types(v)).toEqual([]);
    // The plugin reports the compaction: the refusal is lifted.
    await compactionDone(v, clock);
    expect(await gate(v, CHILD)).toBe('allow');
    expect(await types(v)).toEqual([`lift:${CHILD}`]);
    await ackAll(v);

    // Stage 2: loops again within the window: the same recovery plus a cap on the tree.
    clock.advance(10 * 60_000);
    await verdict(v, 'ok');
    await verdict(v, 'looping');
    expect((await v.engine.treeState(ROOT))?.stage).toBe(2);
    expect(await gate(v, CHILD)).toBe('refuse');
    expect(await v.engine.check({ conversation: SIBLING })).toMatchObject({
      action: 'limit',
      max_context_tokens: 100_000,
    });
    await ackAll(v);
    await compactionDone(v, clock);
    expect(await v.engine.check({ conversation: CHILD })).toMatchObject({ action: 'limit' });
    await ackAll(v);

    // Stage 3: a third loop within the window: the whole tree is refused until Resume.
    clock.advance(10 * 60_000);
    await verdict(v, 'ok');
    await verdict(v, 'looping');
    const t = await v.engine.treeState(ROOT);
    expect(t?.stage).toBe(3);
    for (const s of [CHILD, ROOT, SIBLING]) {
      expect(await v.engine.check({ conversation: s })).toMatchObject({
        action: 'refuse',
        status: 429,
        retry_after_s: 3600,
      });
    }
    // Compaction reports do not lift a hard stop.
    await compactionDone(v, clock);
    expect(await gate(v, ROOT)).toBe('refuse');
    await v.queue.idle();
    await eventually(() => b.sent.some((a) => a.severity === 'critical'));
    expect(b.sent.filter((a) => a.severity === 'critical').map((a) => a.title)).toEqual([
      `hard stop: sisyphus (${CHILD})`,
    ]);

    // Resume clears stage, refusals and caps.
    await verdict(v, 'ok');
    const resumed = await v.engine.resume(ROOT, 'tester');
    expect(resumed.stage).toBe(0);
    for (const s of [CHILD, ROOT, SIBLING]) expect(await gate(v, s)).toBe('allow');
    await v.queue.idle();
    await eventually(() => b.sent.at(-1)?.state === 'resolve');
  });

  it('auto_recover: a loop after the window has passed starts again at stage 1', async () => {
    const { v, clock } = await setup(backend, 'auto_recover');
    await verdict(v, 'looping');
    await compactionDone(v, clock);
    clock.advance(61 * 60_000);
    await verdict(v, 'ok');
    await verdict(v, 'looping');
    expect((await v.engine.treeState(ROOT))?.stage).toBe(1);
  });

  it('auto_recover: a stuck root is refused only until it is aborted, so its compaction can run', async () => {
    const { v } = await setup(backend, 'auto_recover');
    await verdict(v, 'looping', ROOT);
    expect(await gate(v, ROOT)).toBe('refuse');
    expect(await types(v)).toEqual([`toast:${ROOT}`, `abort:${ROOT}`, `compact:${ROOT}`, `toast:${ROOT}`]);
    await ackAll(v);
    expect(await gate(v, ROOT)).toBe('allow');
  });

  it('auto_recover: without a compaction report the refusal lifts after compaction_timeout, with a warning', async () => {
    const { v, clock, b } = await setup(backend, 'auto_recover');
    await verdict(v, 'looping');
    expect(await gate(v, CHILD)).toBe('refuse');
    clock.advance(16 * 60_000);
    expect(await gate(v, CHILD)).toBe('allow');
    await v.queue.idle();
    await eventually(() => b.sent.some((a) => a.dedup_key === `${ROOT}:plugin`));
  });
});

describe.runIf(withRedis)('with Redis, a hard stop survives a restart', () => {
  it('a tree refused in stage 3 stays refused for a new instance on the same Redis', async () => {
    const prefix = testPrefix();
    try {
      const { v } = await setup('redis', 'auto_recover', { modes: { auto_recover: { max_recoveries: 1 } } }, prefix);
      await verdict(v, 'looping');
      await v.engine.progress([{ kind: 'compaction_done', session_id: ROOT, ts: Date.now(), landed: false }]);
      await verdict(v, 'ok');
      await verdict(v, 'looping');
      expect((await v.engine.treeState(ROOT))?.stage).toBe(3);
      await v.close();
      running.splice(
        running.findIndex((r) => r.v === v),
        1,
      );

      const again = await testVigil({ backend: 'redis', prefix, overlay: { modes: { mode: 'auto_recover' } } });
      try {
        for (const s of [CHILD, ROOT, SIBLING]) expect(await gate(again, s)).toBe('refuse');
        await again.engine.resume(ROOT, 'tester');
        expect(await gate(again, CHILD)).toBe('allow');
      } finally {
        await again.close();
      }
    } finally {
      await flushPrefix(prefix);
    }
  });
});
