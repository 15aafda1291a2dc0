import { describe, expect, it } from 'vitest';
import { systemClock } from '../../core/clock.ts';
import { silentLogger } from '../../core/logger.ts';
import { keys } from '../../core/store/keys.ts';
import { MemoryStore } from '../../core/store/memory.ts';
import type { Directive } from '../../core/wire.ts';
import { directivesFor } from './actions.ts';
import { call, MIN, P, SEC } from './fixtures.ts';
import { kernelLevel, SessionHygieneDetector } from './hygiene.detector.ts';
import type { HygieneChange } from './judge.ts';
import { defaultHygieneOptions, type HygieneOptions, HygieneOptionsSchema } from './options.ts';

// The detector shell on its own (the service-level runs are test/hygiene-*.test.ts):
// the level mapping, the directives each action asks for, which inputs give a session
// state, and the in-process bounds.

const M = 'route/m';
const info = { id: 'ses_a', parent: undefined, root: 'ses_a', ancestors: [] };

function detector(o: Partial<HygieneOptions> = {}, mode = 'warn') {
  const store = new MemoryStore(systemClock);
  const k = HygieneOptionsSchema.parse(o);
  const d = new SessionHygieneDetector({
    store,
    clock: systemClock,
    tree: { rootOf: async (id) => id },
    logger: silentLogger(),
    mode: { type: () => mode, acts: () => mode !== 'warn' },
    knobs: () => k,
  });
  return { d, store };
}

const change = (c: Partial<HygieneChange>): HygieneChange => ({
  session_id: 'ses_a',
  at: 1,
  from: 'ok',
  to: 'critical',
  from_rule: null,
  rule: 'restore_stall',
  action: 'abort_and_fresh',
  reason: 'stalled on restore',
  brief: 'FRESH SESSION: ...',
  ...c,
});

describe('the mapping onto the kernel', () => {
  it('levels: info is ok unless info_alerts; warning stalling; critical looping', () => {
    const off = { info_alerts: false };
    const on = { info_alerts: true };
    expect((['ok', 'info', 'warning', 'critical'] as const).map((l) => kernelLevel(l, off))).toEqual([
      'ok',
      'ok',
      'stalling',
      'looping',
    ]);
    expect(kernelLevel('info', on)).toBe('stalling');
  });

  it('directives: abort only in an acting mode; fresh carries the brief and auto_fresh', () => {
    const k = defaultHygieneOptions();
    const types = (c: HygieneChange, mode: string, kk = k) => directivesFor(c, mode !== 'warn', kk).map((d) => d.type);
    expect(types(change({}), 'warn')).toEqual(['fresh']);
    expect(types(change({}), 'auto_recover')).toEqual(['abort', 'fresh']);
    const empty = change({ rule: 'empty_generation', action: 'abort_dispatch', brief: undefined });
    expect(types(empty, 'warn')).toEqual([]);
    expect(types(empty, 'auto_compact')).toEqual(['abort']);
    const retire = change({ rule: 'watch_number', action: 'retire' });
    expect(types(retire, 'auto_recover')).toEqual(['fresh']);
    const warn = change({ to: 'warning', rule: 'watch_number', action: 'finish_question', brief: undefined });
    expect(types(warn, 'auto_recover')).toEqual([]);
    const fresh = directivesFor(retire, false, { ...k, auto_fresh: true })[0];
    expect(fresh).toMatchObject({ type: 'fresh', report: 'FRESH SESSION: ...', open_session: true });
  });
});

describe('the detector shell (memory backend)', () => {
  it('tool calls and compactions give no session a state; hygiene kinds and records do', async () => {
    const { d } = detector();
    const tool = {
      kind: 'tool' as const,
      session_id: 'ses_a',
      tool: 'read',
      call_id: 'c1',
      fingerprint: 'a'.repeat(64),
      target: 'x',
      landed: false,
      ts: 1,
    };
    expect(d.onProgress(tool, info)).toEqual([]);
    expect(await d.sessions()).toEqual([]);
    const rec = call('ses_a', M, 1_000, 2, 'router');
    if (rec.type !== 'request') throw new Error('a record');
    expect(d.onRequest(rec.record, info)).toEqual([]);
    expect(await d.sessions()).toEqual(['ses_a']);
  });

  it('a pending resume: tool calls count as signs of life then', async () => {
    const { d } = detector({ first_token_timeout: 10_000 });
    const t = 1_000_000;
    const feed = (i: ReturnType<typeof P>) => {
      if (i.type !== 'progress') throw new Error('an event');
      return d.onProgress(i.event, info);
    };
    feed(P({ kind: 'prompt', session_id: 'ses_a', ts: t, resume: true }));
    feed(
      P({
        kind: 'session_stats',
        session_id: 'ses_a',
        ts: t + SEC,
        messages: 5,
        stored_bytes: 9,
        updated_at: 1,
        live: true,
      }),
    );
    expect((await d.state('ses_a'))?.resume_at).toBe(t);
    const tool = {
      kind: 'tool' as const,
      session_id: 'ses_a',
      tool: 'read',
      call_id: 'c1',
      fingerprint: 'a'.repeat(64),
      target: 'x',
      landed: false,
      ts: t + 2 * SEC,
    };
    expect(d.onProgress(tool, info)).toEqual([]);
    expect((await d.state('ses_a'))?.resume_at).toBeNull();
    expect(await d.onTick(t + MIN)).toEqual([]);
  });

  it('keeps at most max_sessions in process, least recently updated first out', async () => {
    const { d } = detector({ max_sessions: 3 });
    for (const id of ['s1', 's2', 's3', 's1', 's4']) {
      const r = call(id, M, 1_000, 1, 'router');
      if (r.type === 'request') d.onRequest(r.record, { ...info, id, root: id });
    }
    expect((await d.sessions()).sort()).toEqual(['s1', 's3', 's4']);
  });

  it('attaches its directives to the transition, for the kernel to queue for the tree', async () => {
    const { d, store } = detector({}, 'auto_recover');
    const at = Date.now();
    const feed = (i: ReturnType<typeof call>) =>
      i.type === 'request' ? d.onRequest(i.record, info) : d.onProgress(i.event, info);
    await feed(call('ses_a', M, 1_000, at, 'router', { finish: 'tool' }));
    const t = await feed(call('ses_a', M, 1_100, at + SEC, 'router', { visible: false, finish: 'stop' }));
    expect(t.map((x) => [x.to, x.rule, x.severity, x.act, x.dedup_key])).toEqual([
      ['looping', 'empty_generation', 'critical', false, 'session-hygiene:ses_a'],
    ]);
    expect(t[0].directives?.map((x) => [x.type, x.session_id])).toEqual([['abort', 'ses_a']]);
    // The detector writes no queue itself.
    expect(await store.get<Directive[]>(keys.directives('ses_a'))).toBeUndefined();
  });
});
