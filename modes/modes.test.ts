import { afterEach, describe, expect, it } from 'vitest';
import { createRegistry } from '../builtins.ts';
import { FakeClock } from '../core/clock.ts';
import { AppError } from '../core/errors.ts';
import type { Vigil } from '../core/vigil.ts';
import type { ProgressEvent } from '../core/wire.ts';
import { defaultKnobs } from '../detectors/no-progress/knobs.ts';
import type { NoProgressDetector } from '../detectors/no-progress/no-progress.detector.ts';
import { sha256Hex } from '../sensors/shared/normalize.ts';
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
// the recovery stages at the end drive the real judge with progress events.

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
/** Acknowledges what a plugin would: everything but the blocks it holds until their lift. */
const ackAll = async (v: Vigil, o: { blocks?: boolean } = {}) => {
  const p = (await v.engine.directives.pending(ROOT)).filter((d) => o.blocks !== false || d.type !== 'block');
  if (p.length) await v.engine.ack(p.map((d) => ({ id: d.id, root_id: d.root_id, session_id: d.session_id })));
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
    // The stuck child's tools are blocked in the plugin too (a router is not needed for it).
    expect(await types(v)).toEqual([
      `toast:${CHILD}`,
      `block:${CHILD}`,
      `abort:${CHILD}`,
      `abort:${ROOT}`,
      `compact:${ROOT}`,
      `toast:${CHILD}`,
    ]);
    const pending = await v.engine.directives.pending(ROOT);
    expect(pending.find((d) => d.type === 'compact')?.report).toMatch(/Avoid:|looping/);
    expect(pending.find((d) => d.type === 'block')).toMatchObject({ reason: expect.stringMatching(/^recovering: /) });
    // A lost response loses nothing: the same directives are pending until acknowledged.
    expect((await v.engine.pendingFor(CHILD)).length).toBe(6);
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
    // The whole tree's tools are blocked in the plugin (before the aborts); a client in retry is back soon after a Resume.
    expect((await v.engine.directives.pending(ROOT)).filter((d) => d.type === 'block' || d.type === 'abort')).toEqual([
      expect.objectContaining({
        type: 'block',
        session_id: ROOT,
        scope: 'tree',
        reason: expect.stringMatching(/^hard stop/),
      }),
      expect.objectContaining({ type: 'abort', session_id: CHILD }),
      expect.objectContaining({ type: 'abort', session_id: ROOT }),
    ]);
    for (const s of [CHILD, ROOT, SIBLING]) {
      expect(await v.engine.check({ conversation: s })).toMatchObject({
        action: 'refuse',
        status: 429,
        retry_after_s: 10,
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
    await ackAll(v, { blocks: false });
    expect((await types(v)).filter((x) => x.startsWith('block'))).toEqual([`block:${ROOT}`]);
    const resumed = await v.engine.resume(ROOT, 'tester');
    expect(resumed.stage).toBe(0);
    for (const s of [CHILD, ROOT, SIBLING]) expect(await gate(v, s)).toBe('allow');
    // The plugin is told: the whole tree lifted (it unblocks and nudges what it stopped);
    // the block leaves the queue with it (a plugin that restarts now does not block again).
    const after = await v.engine.directives.pending(ROOT);
    expect(after.find((d) => d.type === 'lift')).toMatchObject({
      session_id: ROOT,
      scope: 'tree',
      reason: 'resumed by tester',
    });
    expect(after.filter((d) => d.type === 'block')).toEqual([]);
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

  it('Resume releases a tree stopped under auto_recover after a switch to warn', async () => {
    const { v } = await setup(backend, 'auto_recover', { modes: { auto_recover: { max_recoveries: 1 } } });
    await verdict(v, 'looping');
    await compactionDone(v, new FakeClock());
    await verdict(v, 'ok');
    await verdict(v, 'looping');
    expect((await v.engine.treeState(ROOT))?.stage).toBe(3);
    await v.knobs.patch({ modes: { mode: 'warn' } });
    expect(await gate(v, CHILD)).toBe('refuse');
    await v.engine.resume(ROOT, 'tester');
    for (const s of [CHILD, ROOT, SIBLING]) expect(await gate(v, s)).toBe('allow');
  });

  it('auto_recover: the timer lifts it too, with no router asking the gate', async () => {
    const { v, clock, b } = await setup(backend, 'auto_recover');
    await verdict(v, 'looping');
    expect((await v.engine.treeState(ROOT))?.refused[CHILD]).toBeDefined();
    clock.advance(16 * 60_000);
    await v.engine.tick();
    expect((await v.engine.treeState(ROOT))?.refused).toEqual({});
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

// ---------------------------------------------------------------------------
// auto_recover with the real judge: a loop that survives a recovery escalates

// Small thresholds, so a loop is looping after about 20 calls.
const PROGRESS = {
  window: 30,
  dup_min_events: 10,
  stall_turns: 10,
  loop_turns: 20,
  top_warn: 8,
  top_loop: 16,
  session_repeat_warn: 10,
  session_repeat_loop: 20,
};
const RECOVERY = `${ROOT}:recovery`;
/** The events come from the opencode plugin. */
const PLUGIN = { plugin_version: 'vigil-opencode/0.1.0+test' };
let calls = 0;

/** One call of the loop from the incident: a failing `sh check.sh`, then a read of one file, over and over. */
function loopCall(session: string, clock: FakeClock): ProgressEvent {
  const n = ++calls;
  const check = n % 2 === 0;
  return {
    kind: 'tool',
    session_id: session,
    ...(session === ROOT ? {} : { parent_session_id: ROOT }),
    agent: 'sisyphus',
    tool: check ? 'bash' : 'read',
    call_id: `call_${n}`,
    fingerprint: sha256Hex(check ? 'bash sh check.sh' : 'read docs/spec.md'),
    target: check ? 'sh check.sh' : 'docs/spec.md',
    exit: check ? 1 : 0,
    landed: false,
    ts: clock.advance(2_000),
  };
}

/** Feeds the loop until the tree's stage is `stage`; returns how many calls it took. */
async function loopUntilStage(v: Vigil, clock: FakeClock, session: string, stage: number): Promise<number> {
  for (let n = 1; n <= 200; n++) {
    await v.engine.progress([loopCall(session, clock)], PLUGIN);
    if ((await v.engine.treeState(ROOT))?.stage === stage) return n;
  }
  throw new Error(`stage ${stage} never reached`);
}

const npOf = (v: Vigil) => v.detector<NoProgressDetector>('no-progress');
const incident = (b: ReturnType<typeof behaviour>, key: string) =>
  b.sent.filter((a) => a.dedup_key === key).map((a) => `${a.state}/${a.severity}`);

describe.each(backends())('auto_recover stages with the real judge (%s)', (backend) => {
  it.each([
    ['a child', CHILD],
    ['the root', ROOT],
  ])(
    '%s that goes back to its loop after each recovery: stage 1, stage 2 with the cap, a hard stop until Resume',
    async (_n, stuck) => {
      const { v, clock, b } = await setup(backend, 'auto_recover', { progress: PROGRESS });

      // Stage 1: flagged, refused, aborted; the root is compacted with the report.
      // (a failing check and a read, round and round: the judge's cycle rule loops at
      // cycle_loop rounds, before the turn precondition)
      const first = await loopUntilStage(v, clock, stuck, 1);
      expect(first).toBeGreaterThanOrEqual(2 * defaultKnobs().cycle_loop);
      let t = await v.engine.treeState(ROOT);
      expect(t).toMatchObject({ stage: 1, awaiting_compaction: { session: ROOT } });
      expect(t?.refused[stuck]).toBeDefined();
      expect(await types(v)).toEqual(expect.arrayContaining([`abort:${stuck}`, `abort:${ROOT}`, `compact:${ROOT}`]));
      await ackAll(v);
      await compactionDone(v, clock);
      // Judged afresh from the recovery: ok, nothing refused, even before it sends anything.
      expect((await npOf(v).effective(stuck)).level).toBe('ok');
      t = await v.engine.treeState(ROOT);
      expect(t).toMatchObject({ stage: 1, refused: {} });
      expect(t?.awaiting_compaction).toBeUndefined();
      expect(await gate(v, stuck)).toBe('allow');
      await ackAll(v);
      // The watchdog judges the whole history, the loop before the recovery included: its
      // verdict does not undo the recovery while the plugin reports the session.
      await verdict(v, 'looping', stuck);
      expect((await npOf(v).effective(stuck)).level).toBe('ok');
      expect((await v.engine.treeState(ROOT))?.stage).toBe(1);

      // The same loop again: a new detection, judged from the recovery on (not at once).
      const second = await loopUntilStage(v, clock, stuck, 2);
      expect(second).toBeGreaterThanOrEqual(2 * defaultKnobs().cycle_loop);
      t = await v.engine.treeState(ROOT);
      expect(t?.refused[stuck]).toBeDefined();
      expect(t?.limits['*']).toMatchObject({ max_context_tokens: 100_000 });
      expect(t?.recoveries).toHaveLength(2);
      await ackAll(v);
      await compactionDone(v, clock);
      expect(await v.engine.check({ conversation: SIBLING })).toMatchObject({ action: 'limit' });
      await ackAll(v);

      // And again: the hard stop. Every conversation of the tree is refused.
      const third = await loopUntilStage(v, clock, stuck, 3);
      expect(third).toBeGreaterThanOrEqual(2 * defaultKnobs().cycle_loop);
      t = await v.engine.treeState(ROOT);
      expect(t?.refuse_all).toMatchObject({ dedup_key: RECOVERY });
      for (const s of [CHILD, ROOT, SIBLING]) expect(await gate(v, s)).toBe('refuse');

      // It holds: a compaction, more calls, hours, timer ticks change nothing until Resume.
      await compactionDone(v, clock);
      for (let i = 0; i < 30; i++) await v.engine.progress([loopCall(stuck, clock)], PLUGIN);
      clock.advance(3 * 3_600_000);
      await v.engine.tick();
      for (const s of [CHILD, ROOT, SIBLING]) expect(await gate(v, s)).toBe('refuse');
      expect((await v.engine.treeState(ROOT))?.stage).toBe(3);

      await v.engine.resume(ROOT, 'tester');
      expect((await v.engine.treeState(ROOT))?.stage).toBe(0);
      for (const s of [CHILD, ROOT, SIBLING]) expect(await gate(v, s)).toBe('allow');

      // The recovery incident escalates with each stage (a warning from stage 1, so a
      // channel at its defaults hears of it; stage 2 by stage) and resolves on Resume.
      // The loop's own incident stays open through the episode (a session judged afresh
      // after a recovery has not shown progress): one trigger, one resolve, on Resume.
      await v.queue.idle();
      await eventually(() => incident(b, RECOVERY).length === 4);
      expect(incident(b, RECOVERY)).toEqual([
        'trigger/warning',
        'escalate/warning',
        'escalate/critical',
        'resolve/critical',
      ]);
      const titles = b.sent.filter((a) => a.dedup_key === RECOVERY).map((a) => a.title);
      expect(titles.slice(0, 3)).toEqual([
        `recovering (stage 1): sisyphus (${stuck})`,
        `recovering with a context cap (stage 2): sisyphus (${stuck})`,
        `hard stop: sisyphus (${stuck})`,
      ]);
      const loop = b.sent.filter((a) => a.dedup_key === ROOT);
      expect(loop.map((a) => a.state)).toEqual(['trigger', 'resolve']);
      expect(loop[1].summary).toMatch(/resumed/);
      expect(b.sent.map((a) => a.summary).join('\n')).not.toMatch(/making progress/);
    },
  );

  it('a compaction reported after compaction_timeout still completes the recovery', async () => {
    const { v, clock } = await setup(backend, 'auto_recover', { progress: PROGRESS });
    await loopUntilStage(v, clock, CHILD, 1);
    await ackAll(v);
    // No report in time: the refusal is lifted anyway (the gate check notices).
    clock.advance(16 * 60_000);
    expect(await gate(v, CHILD)).toBe('allow');
    expect((await v.engine.treeState(ROOT))?.awaiting_compaction).toBeUndefined();
    expect((await npOf(v).effective(CHILD)).level).toBe('looping');
    await compactionDone(v, clock);
    expect((await npOf(v).effective(CHILD)).level).toBe('ok');
    await loopUntilStage(v, clock, CHILD, 2);
  });

  it('a later compaction, with the recovery done, is no recovery: the renewed loop stays on its way', async () => {
    const { v, clock } = await setup(backend, 'auto_recover', { progress: PROGRESS });
    await loopUntilStage(v, clock, CHILD, 1);
    await ackAll(v);
    await compactionDone(v, clock);
    while ((await npOf(v).effective(CHILD)).level === 'ok') {
      await v.engine.progress([loopCall(CHILD, clock)], PLUGIN);
    }
    expect((await npOf(v).effective(CHILD)).level).toBe('stalling');
    // opencode compacts the root on its own: the child is still stalling, then looping: stage 2
    await compactionDone(v, clock);
    expect((await npOf(v).effective(CHILD)).level).toBe('stalling');
    const n = await loopUntilStage(v, clock, CHILD, 2);
    expect(n).toBeLessThan(PROGRESS.loop_turns);
  });

  it('warn mode recovers nothing: a compaction of the root leaves the loop flagged', async () => {
    const { v, clock } = await setup(backend, 'warn', { progress: PROGRESS });
    for (let i = 0; i < 30; i++) await v.engine.progress([loopCall(CHILD, clock)], PLUGIN);
    expect((await npOf(v).effective(CHILD)).level).toBe('looping');
    await compactionDone(v, clock);
    expect((await npOf(v).effective(CHILD)).level).toBe('looping');
  });

  it('a recovery episode ends after recover_window without a new loop: stage 0, its incident resolved', async () => {
    const { v, clock, b } = await setup(backend, 'auto_recover', { progress: PROGRESS });
    await loopUntilStage(v, clock, CHILD, 1);
    await ackAll(v);
    await compactionDone(v, clock);
    clock.advance(61 * 60_000);
    expect(await gate(v, CHILD)).toBe('allow'); // the gate check notices the window passed
    expect((await v.engine.treeState(ROOT))?.stage).toBe(0);
    await v.queue.idle();
    await eventually(() => incident(b, RECOVERY).length === 2);
    expect(incident(b, RECOVERY)).toEqual(['trigger/warning', 'resolve/warning']);
    // The loop's incident was held through the episode and ends with it, saying why.
    await eventually(() => b.sent.filter((a) => a.dedup_key === ROOT).length === 2);
    expect(b.sent.filter((a) => a.dedup_key === ROOT).map((a) => `${a.state}: ${a.summary}`)).toEqual([
      expect.stringMatching(/^trigger: /),
      'resolve: no loop within 1h of the last recovery',
    ]);
    // A loop now is a new episode: stage 1 again.
    await loopUntilStage(v, clock, CHILD, 1);
  });
});

/**
 * Faults at the one place an input is written: the commit of its unit of work. `down`:
 * commits fail without being carried out (Redis away). `loseNext`: the next commit that
 * writes an outbox entry or a tree is carried out, then fails as if its reply was lost.
 */
function commitFaults(v: Vigil) {
  const base = v.store.base;
  const real = base.commitUnit.bind(base);
  const fault = { down: false, loseNext: false, lost: 0 };
  base.commitUnit = async (plan) => {
    if (fault.down)
      throw new AppError('STORE_UNAVAILABLE', 'store unavailable (connect ECONNREFUSED)', { retryable: true });
    const r = await real(plan);
    const decides = plan.writes.some((w) => w.op === 'outbox' || ('key' in w && w.key.startsWith('tree:')));
    if (fault.loseNext && r.ok && decides) {
      fault.loseNext = false;
      fault.lost++;
      throw new AppError('STORE_UNAVAILABLE', 'store unavailable (connection reset: reply lost)', { retryable: true });
    }
    return r;
  };
  return fault;
}

/** Posts one progress event the way a sensor does: the same event again until it is accepted. */
async function sendRetrying(v: Vigil, ev: ProgressEvent, onFail: () => void = () => {}): Promise<number> {
  for (let tries = 1; tries <= 50; tries++) {
    try {
      await v.engine.progress([ev], PLUGIN);
      return tries;
    } catch (err) {
      expect((err as AppError).code).toBe('STORE_UNAVAILABLE');
      onFail();
    }
  }
  throw new Error('never accepted');
}

describe.each(backends())('a store that goes away under transitions (%s)', (backend) => {
  it('an input the store could not take is refused whole (a 503) and judged once when retried', async () => {
    const { v, clock, b } = await setup(backend, 'warn');
    const fault = commitFaults(v);
    const seen: string[] = [];
    v.events.on('transition', (t: { session: string; to: string }) => seen.push(`${t.session}:${t.to}`));
    // Every third call finds the store away: refused, nothing of it written, then retried.
    for (let n = 0; n < 60; n++) {
      fault.down = n % 3 === 0;
      await sendRetrying(v, loopCall(CHILD, clock), () => {
        fault.down = false;
      });
    }
    // As if nothing had failed: each level reached once, one incident with its escalation.
    expect(seen).toEqual([`${CHILD}:stalling`, `${CHILD}:looping`]);
    expect((await npOf(v).session(CHILD))?.level).toBe('looping');
    await eventually(() => expect(incident(b, ROOT)).toEqual(['trigger/warning', 'escalate/critical']));
    // Nothing waits in memory: there is no backlog, and the outbox is empty.
    expect(await v.store.base.outboxRead(10)).toEqual([]);
  });
});

describe.runIf(withRedis)('with Redis, a commit whose reply was lost', () => {
  it('the retry is a repeat (judged once) and what the lost commit decided is delivered once, by the reconciler', async () => {
    const { v, clock, b } = await setup('redis', 'warn');
    const fault = commitFaults(v);
    const seen: string[] = [];
    v.events.on('transition', (t: { session: string; to: string }) => seen.push(`${t.session}:${t.to}`));
    fault.loseNext = true;
    let retried = 0;
    for (let n = 0; n < 60; n++) retried += (await sendRetrying(v, loopCall(CHILD, clock))) - 1;
    expect(fault.lost).toBe(1);
    expect(retried).toBe(1);
    // The committed decision stands, once: the judge's level and the tree agree.
    expect((await npOf(v).session(CHILD))?.level).toBe('looping');
    expect((await v.engine.treeState(ROOT))?.flagged).toEqual({ [ROOT]: { [CHILD]: 'looping' } });
    // The transition whose reply was lost was not announced here; the others were, once each.
    expect(seen.length).toBeLessThanOrEqual(2);
    expect(new Set(seen).size).toBe(seen.length);
    // Its outbox entry was committed with it but never handed to this process: it waits
    // in the outbox (and a later transition of the incident behind it, in order) until
    // the reconciler sends them, each once, in order.
    expect((await v.store.base.outboxRead(10)).length).toBeGreaterThan(0);
    expect(await v.units.reconcile(true)).toBeGreaterThan(0);
    expect(await v.store.base.outboxRead(10)).toEqual([]);
    await eventually(() => expect(incident(b, ROOT)).toEqual(['trigger/warning', 'escalate/critical']));
    await v.queue.idle();
    expect(incident(b, ROOT)).toEqual(['trigger/warning', 'escalate/critical']);
  });

  it('two instances given the same input id at once judge it once', async () => {
    const one = await setup('redis', 'warn');
    const two = await setup('redis', 'warn', {}, one.prefix);
    // Each call posted to both at the same moment, as a client retrying against another instance does.
    for (let n = 0; n < 40; n++) {
      const ev = loopCall(CHILD, one.clock);
      await Promise.all([one.v.engine.progress([ev], PLUGIN), two.v.engine.progress([ev], PLUGIN)]);
    }
    for (const v of [one.v, two.v]) {
      const r = await npOf(v).session(CHILD);
      expect(r?.fields?.calls).toBe(40);
    }
    // The same verdict as the calls posted once, to one instance.
    const alone = await setup('redis', 'warn');
    calls -= 40;
    for (let n = 0; n < 40; n++) await alone.v.engine.progress([loopCall(CHILD, alone.clock)], PLUGIN);
    expect((await npOf(one.v).session(CHILD))?.level).toBe((await npOf(alone.v).session(CHILD))?.level);
  });
});
