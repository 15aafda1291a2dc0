import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import type { Directive } from '../../../../core/wire.ts';
import { ProgressEventSchema } from '../../../../core/wire.ts';
import { CHILD, CWD, captured, type HookLine, ROOT } from '../fixtures/captured.ts';
import { PluginCore } from './core.ts';
import type { OpencodeActions } from './directives.ts';
import { SessionBook } from './identity.ts';

// The hook methods end to end inside the plugin, against a stand-in Vigil service (a
// fetch that validates what the real routes validate) and stand-in opencode actions.

const lines = captured();
const Batch = z.array(ProgressEventSchema).min(1).max(500);

function setup(
  o: {
    directives?: Directive[];
    pollMs?: number;
    summarize?: OpencodeActions['summarize'];
    hygiene?: ConstructorParameters<typeof PluginCore>[0]['hygiene'];
    activeMs?: number;
  } = {},
) {
  const posted: { path: string; body: any; headers: Record<string, string> }[] = [];
  let pending = o.directives ?? [];
  const fetch = (async (url: string, init: RequestInit) => {
    const path = url.replace('http://vigil.test', '');
    const body = init.body ? JSON.parse(String(init.body)) : undefined;
    posted.push({ path, body, headers: init.headers as Record<string, string> });
    if (path === '/progress') {
      Batch.parse(body); // the route's own schema: strict, no extra keys
      return new Response(JSON.stringify({ accepted: body.length, verdicts: [], directives: pending }), {
        status: 202,
      });
    }
    if (path === '/directives/ack') {
      const ids = new Set(body.acks.map((a: { id: string }) => a.id));
      pending = pending.filter((d) => !ids.has(d.id));
      return new Response(JSON.stringify({ acknowledged: ids.size }), { status: 200 });
    }
    if (path.startsWith('/directives?')) return new Response(JSON.stringify({ directives: pending }), { status: 200 });
    return new Response('{}', { status: 404 });
  }) as typeof globalThis.fetch;
  const calls: string[] = [];
  const actions: OpencodeActions = {
    toast: async (t) => void calls.push(`toast ${t.message}`),
    abort: async (id) => void calls.push(`abort ${id}`),
    waitIdle: async () => {},
    summarize: async (id, m, auto) => {
      calls.push(`summarize ${id} ${m.providerID}/${m.modelID} auto=${auto}`);
      await o.summarize?.(id, m, auto);
    },
    lastModel: async () => undefined,
    fresh: async () => 'ses_fresh',
    status: async () => 'idle',
    prompt: async (id, text) => void calls.push(`prompt ${id}: ${text}`),
  };
  const core = new PluginCore({
    book: new SessionBook(),
    actions,
    vigil: { url: 'http://vigil.test', pluginId: 'vigil-opencode/9.9.9+test', fetch },
    cwd: CWD,
    pollMs: o.pollMs ?? 0,
    hygiene: o.hygiene,
    activeMs: o.activeMs,
  });
  return { core, posted, calls, setPending: (d: Directive[]) => (pending = d) };
}

/** Routes a captured line to the core as plugin.ts does. */
async function feed(core: PluginCore, l: HookLine): Promise<void> {
  switch (l.hook) {
    case 'event':
      return core.onEvent(l.input.event);
    case 'chat.message':
      return core.onChatMessage(l.input, l.output);
    case 'chat.params':
      return core.onChatParams(l.input);
    case 'chat.headers':
      return core.onChatHeaders(l.input, structuredClone(l.output));
    case 'tool.execute.after':
      return core.onToolAfter(l.input, l.output);
    case 'experimental.session.compacting':
      return core.onCompacting(l.input, structuredClone(l.output));
  }
}

const events = (posted: { path: string; body: any }[]) =>
  posted.filter((p) => p.path === '/progress').flatMap((p) => p.body);

describe('PluginCore with captured opencode 1.18.33 hooks', () => {
  it('sends every event the sensor makes, valid for the service, with the plugin header', async () => {
    const { core, posted } = setup();
    for (const l of lines) await feed(core, l);
    await core.client.flush();
    const sent = events(posted);
    expect(sent.filter((e) => e.kind === 'tool')).toHaveLength(18);
    expect(sent.filter((e) => e.kind === 'compaction_done')).toHaveLength(2);
    expect(sent.filter((e) => e.kind === 'continuation')).toHaveLength(1);
    expect(posted.every((p) => p.headers['x-vigil-plugin'] === 'vigil-opencode/9.9.9+test')).toBe(true);
    await core.dispose();
  });

  it('adds the identity headers to model requests (the child names its parent)', async () => {
    const { core } = setup();
    for (const l of lines.filter((x) => x.hook === 'event' && x.input.event.type.startsWith('session.')))
      await feed(core, l);
    const rootHdr = lines.find((l) => l.hook === 'chat.headers' && l.input.sessionID === ROOT)!;
    const childHdr = lines.find((l) => l.hook === 'chat.headers' && l.input.sessionID === CHILD)!;
    const a = structuredClone(rootHdr.output);
    const b = structuredClone(childHdr.output);
    await core.onChatHeaders(rootHdr.input, a);
    await core.onChatHeaders(childHdr.input, b);
    expect(a.headers).toEqual({
      'X-Router-Conversation': ROOT,
      'X-Router-Agent': 'build',
      'X-Vigil-Plugin': 'vigil-opencode/9.9.9+test',
    });
    expect(b.headers).toMatchObject({
      'X-Router-Conversation': CHILD,
      'X-Router-Agent': 'general',
      'X-Router-Parent': ROOT,
    });
    // opencode's compaction request runs as agent "compaction": the header keeps the session's agent.
    const c = structuredClone(rootHdr.output);
    await core.onChatHeaders({ ...rootHdr.input, agent: 'compaction' }, c);
    expect(c.headers['X-Router-Agent']).toBe('build');
    await core.dispose();
  });

  it('runs a recovery from a /progress answer: abort, compact with the report, compaction_done, acks', async () => {
    const report = '[vigil] A session stalled without landing a change (looping).';
    const ds: Directive[] = [
      { id: 'd1', root_id: ROOT, type: 'abort', session_id: ROOT, created_at: 1 },
      { id: 'd2', root_id: ROOT, type: 'compact', session_id: ROOT, report, auto_continue: true, created_at: 1 },
    ];
    const hook = lines.find((l) => l.hook === 'experimental.session.compacting')!;
    const contexts: string[][] = [];
    // What opencode does inside summarize: the compacting hook, then session.compacted.
    const { core, posted, calls } = setup({
      directives: ds,
      summarize: async (id) => {
        const out = structuredClone(hook.output);
        core.onCompacting({ ...hook.input, sessionID: id }, out);
        contexts.push(out.context);
        core.onEvent({ id: 'evt_x', type: 'session.compacted', properties: { sessionID: id } });
      },
    });
    const params = lines.find((l) => l.hook === 'chat.params')!;
    core.onChatParams(params.input); // the model the session uses, and pitfall 16 cleared
    const after = lines.find((l) => l.hook === 'tool.execute.after')!;
    core.onToolAfter(after.input, after.output);
    await core.client.flush();
    await core.runner.idle();
    expect(calls).toEqual([`abort ${ROOT}`, `summarize ${ROOT} fake/loop-model auto=true`]);
    // The compaction prompt got the report through the compacting hook.
    expect(contexts).toEqual([[report]]);
    // session.compacted: compaction_done goes to the service, the compact directive is acked.
    await new Promise((r) => setTimeout(r, 0));
    await core.client.flush();
    await new Promise((r) => setTimeout(r, 0));
    expect(events(posted).at(-1)).toMatchObject({ kind: 'compaction_done', session_id: ROOT });
    const acked = posted
      .filter((p) => p.path === '/directives/ack')
      .flatMap((p) => p.body.acks.map((a: { id: string }) => a.id));
    expect(acked).toEqual(['d1', 'd2']);
    await core.dispose();
  });

  it('polls the directives of active trees once per root', async () => {
    const { core, posted, calls, setPending } = setup();
    for (const l of lines.filter((x) => x.hook === 'event' && x.input.event.type.startsWith('session.')))
      await feed(core, l);
    const childAfter = lines.find((l) => l.hook === 'tool.execute.after' && l.input.sessionID === CHILD)!;
    core.onToolAfter(childAfter.input, childAfter.output);
    await core.client.flush();
    setPending([
      {
        id: 't1',
        root_id: ROOT,
        type: 'toast',
        session_id: CHILD,
        toast: { title: 'Vigil', message: 'loop', variant: 'warning' },
        created_at: 1,
      },
    ]);
    await core.poll();
    expect(posted.filter((p) => p.path.startsWith('/directives?')).map((p) => p.path)).toEqual([
      `/directives?session=${ROOT}`,
    ]);
    expect(calls).toEqual(['toast loop']);
    await core.dispose();
  });

  it('a stopped tree: its tool calls are refused with the report, the session stopped, polled while quiet; Resume nudges it', async () => {
    const block: Directive = {
      id: 'b1',
      root_id: ROOT,
      type: 'block',
      session_id: ROOT,
      scope: 'tree',
      reason: 'hard stop: looping again after 2 recoveries; waiting for Resume',
      report: '[vigil] A session stalled without landing a change (looping).',
      created_at: 1,
    };
    // activeMs < 0: no session counts as active at the poll.
    const { core, posted, calls, setPending } = setup({ directives: [block], activeMs: -1 });
    for (const l of lines.filter((x) => x.hook === 'event' && x.input.event.type.startsWith('session.')))
      await feed(core, l);
    const childAfter = lines.find((l) => l.hook === 'tool.execute.after' && l.input.sessionID === CHILD)!;
    core.onToolAfter(childAfter.input, childAfter.output);
    await core.client.flush();
    await core.runner.idle();
    // Every session of the tree (the child learnt from session.created) is refused; the message names why.
    const refused = core.onToolBefore({ tool: 'read', sessionID: CHILD, callID: 'call_9' });
    expect(refused).toMatch(/^Vigil refused this tool call: hard stop: looping again after 2 recoveries/);
    expect(refused).toContain('[vigil] A session stalled');
    expect(core.onToolBefore({ tool: 'read', sessionID: 'ses_elsewhere', callID: 'c' })).toBeUndefined();
    await new Promise((r) => setTimeout(r, 5));
    expect(calls).toEqual([`abort ${CHILD}`]);
    // The block is held (no ack), and its tree is polled though no session of it counts as active.
    expect(posted.some((p) => p.path === '/directives/ack')).toBe(false);
    setPending([block]);
    await core.poll();
    expect(posted.filter((p) => p.path.startsWith('/directives?')).map((p) => p.path)).toEqual([
      `/directives?session=${ROOT}`,
    ]);
    // Resume: the lift reaches the poll, the block ends, the stopped tree is nudged.
    setPending([
      {
        id: 'l1',
        root_id: ROOT,
        type: 'lift',
        session_id: ROOT,
        scope: 'tree',
        reason: 'resumed by e2e',
        created_at: 2,
      },
    ]);
    await core.poll();
    expect(core.onToolBefore({ tool: 'read', sessionID: CHILD, callID: 'call_10' })).toBeUndefined();
    expect(calls.at(-1)).toBe(
      `prompt ${ROOT}: [Vigil CONTINUATION] The session tree was resumed (resumed by e2e). Continue the task where you left off.`,
    );
    const acked = posted
      .filter((p) => p.path === '/directives/ack')
      .flatMap((p) => p.body.acks.map((a: { id: string }) => a.id));
    expect(acked.sort()).toEqual(['b1', 'l1']);
    await core.dispose();
  });

  it('never throws from a hook method, whatever opencode hands over', async () => {
    const { core } = setup();
    for (const bad of [undefined, null, 1, 'x', {}, { sessionID: 5 }, { event: null }]) {
      expect(() => core.onEvent(bad)).not.toThrow();
      expect(() => core.onToolAfter(bad, bad)).not.toThrow();
      expect(() => core.onChatMessage(bad, bad)).not.toThrow();
      expect(() => core.onChatParams(bad)).not.toThrow();
      expect(() => core.onCompacting(bad, bad)).not.toThrow();
      expect(core.onToolBefore(bad)).toBeUndefined();
      await expect(core.onChatHeaders(bad, bad)).resolves.toBeUndefined();
    }
    await core.dispose();
  });

  it('session hygiene: a resumed session sends its prompt and, on the poll, its stats until the first token', async () => {
    const { core, posted } = setup({
      hygiene: {
        hasHistory: async () => true,
        measure: async () => ({ messages: 40, stored_bytes: 90_000, history_bytes: 90_000, updated_at: 1_000 }),
        statsMs: 0,
      },
    });
    core.onChatMessage(
      { sessionID: ROOT },
      { message: { id: 'msg_resume', role: 'user', time: { created: 5_000 } }, parts: [{ type: 'text', text: 'go' }] },
    );
    await new Promise((r) => setTimeout(r, 0));
    await core.poll();
    await core.client.flush();
    const sent = events(posted);
    expect(sent.map((e) => e.kind)).toEqual(['prompt', 'session_stats', 'session_stats']);
    expect(sent[0]).toMatchObject({ kind: 'prompt', session_id: ROOT, call_id: 'msg_resume', resume: true, ts: 5_000 });
    expect(sent[1]).toMatchObject({ messages: 40, stored_bytes: 90_000, updated_at: 1_000, live: true });
    await core.dispose();
  });
});
