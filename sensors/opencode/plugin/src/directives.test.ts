import { describe, expect, it } from 'vitest';
import type { Directive } from '../../../../core/wire.ts';
import { captured, ROOT } from '../fixtures/captured.ts';
import { DirectiveRunner, type OpencodeActions } from './directives.ts';
import type { ModelRef } from './identity.ts';

const CHILD = 'ses_child';
const MODEL: ModelRef = { providerID: 'fake', modelID: 'loop-model' };

function fakeOpencode() {
  const calls: string[] = [];
  /** What /session/status says per session (absent: idle). */
  const statuses: Record<string, 'idle' | 'busy' | 'retry'> = {};
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
    status: async (id) => statuses[id] ?? 'idle',
    prompt: async (id, text) => void calls.push(`prompt ${id}: ${text}`),
  };
  return { actions, calls, statuses, finish: () => summarizeDone?.(), fail: (e: Error) => summarizeFail?.(e) };
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

const PARENTS: Record<string, string> = { [CHILD]: ROOT };

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
    rootOf: (id) => PARENTS[id] ?? id,
    now: o.now,
  });
  return { r, oc, acks };
}

/** The hard stop as auto_recover queues it: the tree's block first, then the aborts. */
const hardStop = () => [
  dir('block', ROOT, { scope: 'tree', reason: 'hard stop: looping again after 2 recoveries', report: '[vigil] R' }),
  dir('abort', CHILD, { reason: 'hard stop' }),
  dir('abort', ROOT, { reason: 'hard stop' }),
];
const tick = () => new Promise((res) => setTimeout(res, 5));

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

  it("a stage's summarize returning late (its loop ended at the next stage's abort) does not complete the next compaction", async () => {
    const oc = fakeOpencode();
    const finishers: (() => void)[] = [];
    oc.actions.summarize = (id) => {
      oc.calls.push(`summarize ${id}`);
      return new Promise<void>((res) => finishers.push(res));
    };
    const acks: string[] = [];
    const r = new DirectiveRunner({
      actions: oc.actions,
      ack: async (l) => {
        acks.push(...l.map((a) => a.id));
        return true;
      },
      modelOf: () => MODEL,
    });
    const one = dir('compact', ROOT, { report: 'REPORT 1', auto_continue: true });
    await r.offer([one]);
    r.compacted(ROOT); // session.compacted of the first: acknowledged; its summarize call still runs the loop
    await tick();
    const two = dir('compact', ROOT, { report: 'REPORT 2', auto_continue: true });
    await r.offer([dir('abort', ROOT), two]);
    finishers[0](); // the first call returns now (the abort ended its loop)
    await tick();
    expect(acks).not.toContain(two.id);
    const out = { context: [] as string[] };
    r.compactionContext(ROOT, out);
    expect(out.context).toEqual(['REPORT 2']);
    r.compacted(ROOT);
    await tick();
    expect(acks).toContain(two.id);
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

  it("a hard stop blocks every tool call of the tree, with the reason and the report, until the tree's lift", async () => {
    const { r, oc, acks } = runner();
    const ds = hardStop();
    await r.offer(ds);
    for (const s of [ROOT, CHILD]) {
      expect(r.blockedCall(s)).toMatch(
        /^Vigil refused this tool call: hard stop: looping again after 2 recoveries\. This session tree is stopped until a person resumes it/,
      );
      expect(r.blockedCall(s)).toContain('[vigil] R');
    }
    expect(r.blockedCall('ses_other_tree')).toBeUndefined();
    expect(r.blockedRoots()).toEqual([ROOT]);
    // Held, not acknowledged: it stays pending in the service (a restarted plugin blocks again).
    expect(acks).toEqual([ds[1].id, ds[2].id]);
    await r.offer(ds); // delivered again: nothing runs twice
    expect(oc.calls).toEqual([`abort ${CHILD}`, `abort ${ROOT}`]);
    // A lift of one session is not the tree's.
    await r.offer([dir('lift', CHILD, { reason: 'compaction done' })]);
    expect(r.blockedCall(CHILD)).toBeDefined();
    const resume = dir('lift', ROOT, { scope: 'tree', reason: 'resumed by admin-page' });
    await r.offer([resume]);
    expect(r.blockedCall(ROOT)).toBeUndefined();
    expect(r.blockedCall(CHILD)).toBeUndefined();
    expect(r.blockedRoots()).toEqual([]);
    expect(acks).toEqual(expect.arrayContaining([ds[0].id, resume.id]));
  });

  it('a Resume nudges the root it stopped, once it is idle; not one in retry, busy, or never stopped', async () => {
    for (const [status, nudged] of [
      ['idle', true],
      ['retry', false],
      ['busy', false],
    ] as const) {
      const { r, oc } = runner();
      await r.offer(hardStop());
      oc.statuses[ROOT] = status;
      await r.offer([dir('lift', ROOT, { scope: 'tree', reason: 'resumed by admin-page' })]);
      const prompts = oc.calls.filter((c) => c.startsWith('prompt'));
      expect(prompts, status).toEqual(
        nudged
          ? [
              `prompt ${ROOT}: [Vigil CONTINUATION] The session tree was resumed (resumed by admin-page). Continue the task where you left off.`,
            ]
          : [],
      );
    }
    // Blocked, but this plugin never stopped anything of the tree (the abort was another's): no nudge.
    const { r, oc } = runner();
    await r.offer([hardStop()[0]]);
    await r.offer([dir('lift', ROOT, { scope: 'tree', reason: 'resumed by x' })]);
    expect(oc.calls).toEqual([]);
  });

  it('a refused request seen while blocked (opencode retrying) counts as stopped: its Resume nudges an idle root', async () => {
    const { r, oc } = runner();
    await r.offer([hardStop()[0]]);
    r.retrying('ses_elsewhere'); // not this tree
    await r.offer([dir('lift', ROOT, { scope: 'tree', reason: 'r1' })]);
    expect(oc.calls).toEqual([]);
    await r.offer([hardStop()[0]]);
    r.retrying(CHILD);
    await r.offer([dir('lift', ROOT, { scope: 'tree', reason: 'r2' })]);
    expect(oc.calls.filter((c) => c.startsWith('prompt'))).toHaveLength(1);
  });

  it('a refused tool call stops its session once (parallel calls, a retried step), not at every call', async () => {
    let now = 1_000;
    const { r, oc } = runner({ now: () => now });
    await r.offer([hardStop()[0]]);
    for (let i = 0; i < 3; i++) r.stopAfterRefusal(CHILD);
    await tick();
    expect(oc.calls).toEqual([`abort ${CHILD}`]);
    now += 5_001;
    r.stopAfterRefusal(CHILD);
    await tick();
    expect(oc.calls).toEqual([`abort ${CHILD}`, `abort ${CHILD}`]);
  });

  it("a recovering child's block (stage 1) ends with its own lift, without a nudge", async () => {
    const { r, oc, acks } = runner();
    const block = dir('block', CHILD, { reason: 'recovering: looping' });
    await r.offer([block, ...recovery()]);
    expect(r.blockedCall(CHILD)).toMatch(
      /^Vigil refused this tool call: recovering: looping\. This session is being recovered/,
    );
    expect(r.blockedCall(ROOT)).toBeUndefined(); // the root goes on after its compaction
    await r.offer([dir('lift', CHILD, { reason: 'compaction of root done' })]);
    expect(r.blockedCall(CHILD)).toBeUndefined();
    expect(acks).toContain(block.id);
    expect(oc.calls.filter((c) => c.startsWith('prompt'))).toEqual([]);
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
