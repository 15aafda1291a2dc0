import { describe, expect, it } from 'vitest';
import type { Directive } from '../../../core/wire.ts';
import { captured, ROOT } from '../fixtures/captured.ts';
import { DirectiveRunner, type OpencodeActions } from './directives.ts';
import type { ModelRef } from './identity.ts';

const CHILD = 'ses_child';
const MODEL: ModelRef = { providerID: 'fake', modelID: 'loop-model' };

function fakeOpencode() {
  const calls: string[] = [];
  let summarizeDone: (() => void) | undefined;
  let summarizeFail: ((e: Error) => void) | undefined;
  const actions: OpencodeActions = {
    toast: async (t) => void calls.push(`toast ${t.variant} ${t.title}: ${t.message}`),
    abort: async (id) => void calls.push(`abort ${id}`),
    waitIdle: async (id) => void calls.push(`waitIdle ${id}`),
    summarize: (id, m, auto) => {
      calls.push(`summarize ${id} ${m.providerID}/${m.modelID} auto=${auto}`);
      return new Promise<void>((resolve, reject) => {
        summarizeDone = resolve;
        summarizeFail = reject;
      });
    },
    lastModel: async (id) => {
      calls.push(`lastModel ${id}`);
      return MODEL;
    },
    fresh: async (title, brief) => {
      calls.push(`fresh ${title}: ${brief.split('\n')[0]}`);
      return 'ses_fresh';
    },
  };
  return { actions, calls, finish: () => summarizeDone?.(), fail: (e: Error) => summarizeFail?.(e) };
}

let n = 0;
const dir = (type: Directive['type'], session: string, extra: Partial<Directive> = {}): Directive => ({
  id: `d${++n}`,
  root_id: ROOT,
  type,
  session_id: session,
  created_at: 1,
  ...extra,
});

/** The stage-1 directives auto_recover queues for a looping child (modes/auto-recover). */
const recovery = () => [
  dir('abort', CHILD, { reason: 'looping' }),
  dir('abort', ROOT, { reason: 'looping' }),
  dir('compact', ROOT, { report: '[vigil] A sub-agent stalled.\nAvoid: re-reading.', auto_continue: true }),
  dir('toast', CHILD, {
    toast: { title: 'Vigil: recovered (stage 1)', message: 'recovered general: looping', variant: 'warning' },
  }),
];

function runner(o: { modelSeen?: boolean; now?: () => number; ackOk?: () => boolean } = {}) {
  const oc = fakeOpencode();
  const acks: string[] = [];
  const r = new DirectiveRunner({
    actions: oc.actions,
    ack: async (list) => {
      if (o.ackOk && !o.ackOk()) return false;
      for (const a of list) acks.push(a.id);
      return true;
    },
    modelOf: () => undefined,
    modelSeen: () => o.modelSeen ?? true,
    now: o.now,
  });
  return { r, oc, acks };
}

describe('DirectiveRunner', () => {
  it('carries out a recovery in order and acknowledges each step after it is done', async () => {
    const { r, oc, acks } = runner();
    const ds = recovery();
    await r.offer(ds);
    expect(oc.calls).toEqual([
      `abort ${CHILD}`,
      `abort ${ROOT}`,
      `lastModel ${ROOT}`,
      `waitIdle ${ROOT}`,
      `summarize ${ROOT} fake/loop-model auto=true`,
      'toast warning Vigil: recovered (stage 1): recovered general: looping',
    ]);
    // The compaction is not done until opencode says so.
    expect(acks).toEqual([ds[0].id, ds[1].id, ds[3].id]);
    r.compacted(ROOT);
    await new Promise((res) => setTimeout(res, 0));
    expect(acks).toEqual([ds[0].id, ds[1].id, ds[3].id, ds[2].id]);
  });

  it('acts once per directive id, however often it is delivered', async () => {
    const { r, oc } = runner();
    const ds = recovery();
    await Promise.all([r.offer(ds), r.offer(ds)]);
    await r.offer(ds);
    r.compacted(ROOT);
    await r.offer(ds);
    expect(oc.calls.filter((c) => c.startsWith('abort'))).toHaveLength(2);
    expect(oc.calls.filter((c) => c.startsWith('summarize'))).toHaveLength(1);
    expect(oc.calls.filter((c) => c.startsWith('toast'))).toHaveLength(1);
  });

  it("appends the report to that session's compaction prompt only (captured compacting hook output)", async () => {
    const { r } = runner();
    const ds = recovery();
    await r.offer(ds);
    const hook = captured().find((l) => l.hook === 'experimental.session.compacting')!;
    const output = structuredClone(hook.output) as { context: string[] };
    expect(hook.input.sessionID).toBe(ROOT);
    r.compactionContext(hook.input.sessionID, output);
    expect(output.context).toEqual([ds[2].report]);
    r.compactionContext(hook.input.sessionID, output); // a second hook call adds nothing
    expect(output.context).toHaveLength(1);
    const other = { context: [] as string[] };
    r.compactionContext(CHILD, other);
    expect(other.context).toEqual([]);
    r.compacted(ROOT);
    const after = { context: [] as string[] };
    r.compactionContext(ROOT, after); // a later compaction of the root has no report
    expect(after.context).toEqual([]);
  });

  it('uses the model the session last used when known (chat.params), else asks opencode', async () => {
    const oc = fakeOpencode();
    const r = new DirectiveRunner({
      actions: oc.actions,
      ack: async () => true,
      modelOf: () => ({ providerID: 'p', modelID: 'm' }),
    });
    await r.offer([dir('compact', ROOT, { auto_continue: false })]);
    expect(oc.calls).toEqual([`waitIdle ${ROOT}`, `summarize ${ROOT} p/m auto=false`]);
  });

  it('holds aborts until the instance made its first model request (pitfall 16), then goes ahead', async () => {
    let seen = false;
    let now = 0;
    const oc = fakeOpencode();
    const acks: string[] = [];
    const r = new DirectiveRunner({
      actions: oc.actions,
      ack: async (l) => {
        acks.push(...l.map((a) => a.id));
        return true;
      },
      modelSeen: () => seen,
      now: () => now,
      abortDeferMs: 60_000,
    });
    const a = dir('abort', ROOT);
    await r.offer([a]);
    expect(oc.calls).toEqual([]);
    expect(acks).toEqual([]);
    await r.offer([a]); // delivered again by the next poll: still held
    expect(oc.calls).toEqual([]);
    seen = true;
    await r.offer([a]);
    expect(oc.calls).toEqual([`abort ${ROOT}`]);
    expect(acks).toEqual([a.id]);
    // With no model request ever, an abort goes ahead after the deferral cap.
    seen = false;
    const b = dir('abort', CHILD);
    await r.offer([b]);
    now += 60_001;
    await r.offer([b]);
    expect(oc.calls).toEqual([`abort ${ROOT}`, `abort ${CHILD}`]);
  });

  it('retries a failed step on the next delivery, and acknowledges it as given up after 3 attempts', async () => {
    const oc = fakeOpencode();
    let fails = 0;
    oc.actions.abort = async () => {
      fails++;
      throw new Error('abort answered 500');
    };
    const acks: string[] = [];
    const r = new DirectiveRunner({
      actions: oc.actions,
      ack: async (l) => {
        acks.push(...l.map((a) => a.id));
        return true;
      },
    });
    const a = dir('abort', ROOT);
    await r.offer([a]);
    await r.offer([a]);
    expect(acks).toEqual([]);
    await r.offer([a]);
    expect(fails).toBe(3);
    expect(acks).toEqual([a.id]);
    await r.offer([a]);
    expect(fails).toBe(3);
  });

  it('runs a compaction again when summarize failed before session.compacted', async () => {
    const { r, oc, acks } = runner();
    const c = dir('compact', ROOT, { report: 'R', auto_continue: true });
    await r.offer([c]);
    oc.fail(new Error('summarize answered 500'));
    await new Promise((res) => setTimeout(res, 0));
    await r.offer([c]);
    expect(oc.calls.filter((x) => x.startsWith('summarize'))).toHaveLength(2);
    oc.finish();
    await new Promise((res) => setTimeout(res, 0));
    expect(acks).toEqual([c.id]);
  });

  it('keeps acks the service did not take and sends them with the next delivery', async () => {
    let up = false;
    const { r, acks } = runner({ ackOk: () => up });
    const t = dir('lift', ROOT);
    await r.offer([t]);
    expect(acks).toEqual([]);
    up = true;
    await r.offer([]);
    expect(acks).toEqual([t.id]);
  });

  it('ignores malformed directives and leaves unknown types alone', async () => {
    const { r, oc, acks } = runner();
    await r.offer([null, 42, { id: 'x' }, { ...dir('toast', ROOT), type: 'reboot' }]);
    expect(oc.calls).toEqual([]);
    expect(acks).toEqual([]);
  });

  it('fresh (session hygiene): shows the brief; with open_session opens a fresh session with it, once', async () => {
    const brief = 'FRESH SESSION: this session starts with none of the history of the one before it.\nWhat died: ...';
    const toast = { title: 'Vigil: retire this session', message: 'watch number 206k', variant: 'error' as const };
    const { r, oc, acks } = runner();
    const shown = dir('fresh', ROOT, { report: brief, toast, open_session: false });
    const opened = dir('fresh', CHILD, { report: brief, toast, open_session: true });
    await r.offer([shown, opened]);
    await r.offer([shown, opened]);
    expect(oc.calls).toEqual([
      `toast error Vigil: retire this session: watch number 206k\n\n${brief}`,
      `toast error Vigil: retire this session: watch number 206k\n\n${brief}`,
      `fresh Fresh session (Vigil): ${brief.split('\n')[0]}`,
    ]);
    expect(acks).toEqual([shown.id, opened.id]);
  });
});
