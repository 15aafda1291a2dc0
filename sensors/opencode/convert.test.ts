import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ProgressEventSchema, RequestRecordSchema } from '../../core/wire.ts';
import { normalizeCall, resultFingerprint, textFingerprint } from '../shared/normalize.ts';
import {
  afterHookToEvent,
  assistantToRequest,
  fromBusEvent,
  isContinuationMessage,
  judgeLanded,
  type LandedTracker,
  newLandedTracker,
  type OcMessage,
  ShapeError,
  sessionToInputs,
  toolPartToEvent,
} from './convert.ts';

// Real shapes captured from opencode 1.18.33 with the lab's fake model
// (test/fixtures/opencode-export/README.md says how).
const DIR = join(import.meta.dirname, '../../test/fixtures/opencode-export');
const ROOT = 'ses_dd3c1f1ffffe6w37wujp0POfVN';
const CHILD = 'ses_dd3c1c646ffe2fWC04kzlgXb9c';
const CWD = '/tmp/vigil-cap/oc-lab.KkN4jp/project';
const hooks = readFileSync(join(DIR, 'hooks.jsonl'), 'utf8')
  .trim()
  .split('\n')
  .map((l) => JSON.parse(l));
const rootMessages: OcMessage[] = JSON.parse(readFileSync(join(DIR, 'messages', `${ROOT}.json`), 'utf8'));
const after = hooks.filter((h) => h.hook === 'tool.execute.after');
const errorEvents = hooks.filter((h) => h.hook === 'event' && h.input.event.type === 'message.part.updated');
const toolParts = rootMessages.flatMap((m) => m.parts).filter((p) => p.type === 'tool');

/** Run the after-hook pairs of one session through the converter, threading the tracker. */
function afterEvents() {
  let tr: LandedTracker = newLandedTracker();
  return after
    .filter((h) => h.input.sessionID === ROOT)
    .map((h) => {
      const r = afterHookToEvent(h.input, h.output, { cwd: CWD, agent: 'build', ts: h.t }, tr);
      tr = r.tracker;
      return r.event;
    });
}

describe('tool.execute.after (plugin)', () => {
  it('reads the bash exit from output.metadata.exit', () => {
    const bash = afterEvents().filter((e) => e.tool === 'bash');
    expect(bash.map((e) => [e.target, e.exit])).toEqual([
      ['sh check.sh', 1],
      ['sh check.sh', 1],
      ['sh check.sh', 0],
      ['git commit', 0],
      ['/nonexistent-dir', 2],
    ]);
  });

  it('ignores output.exitCode (it does not exist in 1.18): no metadata.exit means unknown', () => {
    const h = after.find((x) => x.input.tool === 'bash');
    const r = afterHookToEvent(
      h.input,
      { title: 'x', output: '', exitCode: 0, metadata: {} },
      { ts: 1 },
      newLandedTracker(),
    );
    expect(r.event.exit).toBeNull();
  });

  it('marks landed: edit with a diff, write, the check passing after failing, git commit', () => {
    const landed = afterEvents().map((e) => `${e.tool} ${e.target} ${e.landed}`);
    expect(landed).toEqual([
      'read src/app.js false',
      'read src/app.js false',
      'read src/app.js false',
      'read src/app.js false',
      'bash sh check.sh false',
      'bash sh check.sh false',
      'todowrite  false',
      'edit src/app.js true',
      'write check.sh true',
      'bash sh check.sh true',
      'bash git commit true',
      'bash /nonexistent-dir false',
      'task explore false',
      'read src/app.js false',
      'read check.sh false',
    ]);
  });

  it('produces events the wire schema accepts, with no content', () => {
    for (const e of afterEvents()) {
      expect(ProgressEventSchema.parse(e)).toEqual(e);
      const text = JSON.stringify(e);
      expect(text).not.toContain('FAIL: add');
      expect(text).not.toContain('return a');
      expect(text).not.toContain('SUBAGENT');
    }
  });
});

describe('message.part.updated with state.status error (tools that threw)', () => {
  it('becomes an event with exit 1', () => {
    const out = errorEvents.map((h) => fromBusEvent(h.input.event, { cwd: CWD, ts: h.t }, newLandedTracker())?.event);
    expect(out.map((e) => e && 'tool' in e && `${e.tool} ${e.target} ${e.exit} ${e.landed}`)).toEqual([
      'read src/missing.js 1 false',
      'read src/missing.js 1 false',
      'grep src 1 false',
      'glob **/*.js 1 false',
      'edit src/app.js 1 false',
    ]);
  });

  it('skips completed parts (the after hook reports them) and interrupted ones', () => {
    const part = toolParts.find((p) => (p as { state: { status: string } }).state.status === 'completed');
    const ev = { type: 'message.part.updated', properties: { sessionID: ROOT, part, time: 1 } };
    expect(fromBusEvent(ev, { ts: 1 }, newLandedTracker())).toBeNull();
    const cut = {
      ...part,
      state: { status: 'error', input: {}, error: 'Tool execution aborted', metadata: { interrupted: true } },
    };
    expect(
      fromBusEvent({ ...ev, properties: { ...ev.properties, part: cut } }, { ts: 1 }, newLandedTracker()),
    ).toBeNull();
  });

  it('turns the synthetic compaction "Continue" part into a continuation marker', () => {
    const part = rootMessages
      .flatMap((m) => m.parts)
      .find((p) => p.type === 'text' && (p as { synthetic?: boolean }).synthetic);
    const r = fromBusEvent(
      { type: 'message.part.updated', properties: { sessionID: ROOT, part, time: 7 } },
      { ts: 7 },
      newLandedTracker(),
    );
    expect(r?.event).toMatchObject({ kind: 'continuation', session_id: ROOT, ts: 7, landed: false });
  });

  it('turns session.compacted into compaction_done', () => {
    const h = hooks.find((x) => x.hook === 'event' && x.input.event.type === 'session.compacted');
    expect(fromBusEvent(h.input.event, { ts: 3 }, newLandedTracker())?.event).toMatchObject({
      kind: 'compaction_done',
      session_id: ROOT,
    });
  });
});

describe('tool parts from GET /session/{id}/message', () => {
  it('converts completed and error parts and skips running ones', () => {
    const bashPart = toolParts.find((p) => (p as { tool: string }).tool === 'bash');
    const r = toolPartToEvent(bashPart, { session_id: ROOT, cwd: CWD }, newLandedTracker());
    expect(r?.event).toMatchObject({ tool: 'bash', target: 'sh check.sh', exit: 1, landed: false });
    expect(r?.event.ts).toBe((bashPart as { state: { time: { end: number } } }).state.time.end);
    const running = { ...bashPart, state: { status: 'running', input: {}, time: { start: 1 } } };
    expect(toolPartToEvent(running, { session_id: ROOT }, newLandedTracker())).toBeNull();
  });

  it('gives the same fingerprint as the plugin path for the same call', () => {
    const fromParts = sessionToInputs({ id: ROOT, directory: CWD }, rootMessages).inputs.flatMap((i) =>
      i.type === 'progress' && i.event.kind === 'tool' ? [i.event.fingerprint] : [],
    );
    expect(fromParts.slice(0, 4)).toEqual(
      afterEvents()
        .slice(0, 4)
        .map((e) => e.fingerprint),
    );
  });

  it('gives the same result fingerprint as the plugin path for the same call (one capture, both paths)', () => {
    const fromParts = new Map(
      sessionToInputs({ id: ROOT, directory: CWD }, rootMessages).inputs.flatMap((i) =>
        i.type === 'progress' && i.event.kind === 'tool' ? [[i.event.call_id, i.event.result_fingerprint]] : [],
      ),
    );
    const plugin = afterEvents();
    expect(plugin.length).toBeGreaterThan(8);
    for (const e of plugin) {
      expect(e.result_fingerprint, e.call_id).toMatch(/^[0-9a-f]{64}$/);
      if (fromParts.has(e.call_id)) expect(e.result_fingerprint, e.call_id).toBe(fromParts.get(e.call_id));
    }
    // the first three reads of an unchanged src/app.js returned the same thing; the failing check another
    expect(new Set(plugin.slice(0, 3).map((e) => e.result_fingerprint)).size).toBe(1);
    const check = plugin.find((e) => e.tool === 'bash');
    expect(check?.result_fingerprint).not.toBe(plugin[0].result_fingerprint);
  });

  it('fingerprints a thrown tool by its error text, a call without output by nothing', () => {
    const bad = {
      type: 'tool',
      tool: 'read',
      callID: 'c1',
      state: { status: 'error', input: { filePath: 'gone.txt' }, error: 'File not found: gone.txt' },
    };
    const r = toolPartToEvent(bad, { session_id: 's' }, newLandedTracker());
    expect(r?.event).toMatchObject({ exit: 1, result_fingerprint: resultFingerprint(1, 'File not found: gone.txt') });
    const bare = { type: 'tool', tool: 'read', callID: 'c2', state: { status: 'completed', input: { filePath: 'a' } } };
    expect(toolPartToEvent(bare, { session_id: 's' }, newLandedTracker())?.event.result_fingerprint).toBeUndefined();
  });

  it('names the field of an unknown shape', () => {
    const bad = { type: 'tool', tool: 'read', callID: 'c', state: { status: 'exploded' } };
    expect(() => toolPartToEvent(bad, { session_id: ROOT }, newLandedTracker())).toThrow(ShapeError);
    expect(() => toolPartToEvent(bad, { session_id: ROOT }, newLandedTracker())).toThrow(/state\.status/);
    expect(() =>
      toolPartToEvent({ type: 'tool', callID: 'c', state: {} }, { session_id: ROOT }, newLandedTracker()),
    ).toThrow(/^tool: /);
  });
});

describe('assistant messages -> request records', () => {
  it('maps id, provider/model, input + cache.read, cost, created', () => {
    const info = rootMessages[1].info;
    const rec = assistantToRequest(info);
    expect(rec).toEqual({
      session_id: ROOT,
      agent: 'build',
      request_id: info.id,
      model: 'fake/loop-model',
      prompt_tokens: 2456,
      cached_tokens: 0,
      cost_usd: 0,
      ts: info.time?.created,
    });
    expect(RequestRecordSchema.parse(rec)).toEqual(rec);
  });

  it('adds cache reads to the prompt and skips user messages and unbilled ones', () => {
    const info = {
      ...rootMessages[1].info,
      cost: 0.0123,
      tokens: { input: 1000, output: 5, reasoning: 0, cache: { read: 190_000, write: 0 } },
    };
    expect(assistantToRequest(info)).toMatchObject({
      prompt_tokens: 191_000,
      cached_tokens: 190_000,
      cost_usd: 0.0123,
    });
    expect(assistantToRequest(rootMessages[0].info)).toBeNull();
    expect(
      assistantToRequest({
        ...info,
        cost: 0,
        tokens: { input: 0, output: 0, reasoning: 0, cache: { read: 0, write: 0 } },
      }),
    ).toBeNull();
  });
});

describe('continuation turns', () => {
  const user = (parts: unknown[]): OcMessage => ({
    info: { id: 'msg_u', sessionID: ROOT, role: 'user' },
    parts: parts as OcMessage['parts'],
  });

  it('recognises the synthetic compaction continue message (captured)', () => {
    const m = rootMessages.find((x) =>
      x.parts.some((p) => p.type === 'text' && (p as { synthetic?: boolean }).synthetic),
    );
    expect(m && isContinuationMessage(m)).toBe(true);
  });

  it('recognises an injected all-synthetic turn and a bare "continue"', () => {
    expect(isContinuationMessage(user([{ type: 'text', text: 'keep at it', synthetic: true }]))).toBe(true);
    expect(isContinuationMessage(user([{ type: 'text', text: 'Continue.' }]))).toBe(true);
    expect(
      isContinuationMessage(user([{ type: 'text', text: '[SYSTEM REMINDER - TODO CONTINUATION] tasks remain' }])),
    ).toBe(true);
  });

  it('is conservative: the task itself, real requests, files and compaction requests are not', () => {
    expect(isContinuationMessage(rootMessages[0], true)).toBe(false);
    expect(isContinuationMessage(rootMessages[0])).toBe(false);
    expect(isContinuationMessage(user([{ type: 'text', text: 'continue with the navbar refactor' }]))).toBe(false);
    expect(
      isContinuationMessage(
        user([
          { type: 'text', text: 'continue' },
          { type: 'file', url: 'file:///x', mime: 'text/plain' },
        ]),
      ),
    ).toBe(false);
    expect(isContinuationMessage(user([{ type: 'compaction', auto: true }]))).toBe(false);
  });
});

describe('a whole session', () => {
  it('orders request, tool calls, markers and reports no issues on the real export', () => {
    const { inputs, issues } = sessionToInputs({ id: ROOT, agent: 'build', directory: CWD }, rootMessages);
    expect(issues).toEqual([]);
    const kinds = inputs.map((i) => (i.type === 'request' ? 'R' : i.event.kind === 'tool' ? 'T' : i.event.kind));
    expect(kinds.slice(0, 4)).toEqual(['R', 'T', 'R', 'T']);
    expect(kinds.filter((k) => k === 'T')).toHaveLength(20);
    expect(kinds.filter((k) => k === 'continuation')).toHaveLength(1);
    expect(kinds.filter((k) => k === 'compaction_done')).toHaveLength(2);
    expect(kinds.indexOf('compaction_done')).toBeLessThan(kinds.indexOf('continuation'));
  });

  it('turns a step that only talked into a model step with its text fingerprint, never the text', () => {
    const { inputs } = sessionToInputs({ id: ROOT, agent: 'build', directory: CWD }, rootMessages);
    const steps = inputs.flatMap((i) => (i.type === 'progress' && i.event.kind === 'assistant' ? [i.event] : []));
    const talked = rootMessages.filter(
      (m) =>
        m.info.role === 'assistant' &&
        m.info.time?.completed !== undefined &&
        m.info.summary !== true &&
        !m.info.error &&
        !m.parts.some((p) => p.type === 'tool') &&
        m.parts.some((p) => p.type === 'text' && typeof (p as { text?: unknown }).text === 'string'),
    );
    expect(steps.length).toBe(talked.length);
    expect(steps.length).toBeGreaterThan(0);
    for (const e of steps) {
      ProgressEventSchema.parse(e);
      const m = talked.find((x) => x.info.id === e.call_id);
      const text = m?.parts.flatMap((p) => (p.type === 'text' ? [(p as { text: string }).text] : [])).join('\n') ?? '';
      expect(e.text_fingerprint).toBe(textFingerprint(text));
      expect(JSON.stringify(e)).not.toContain(text.trim().slice(0, 20));
    }
  });

  it('carries the parent and agent of a child session', () => {
    const msgs = JSON.parse(readFileSync(join(DIR, 'messages', `${CHILD}.json`), 'utf8'));
    const { inputs } = sessionToInputs({ id: CHILD, parentID: ROOT, agent: 'explore', directory: CWD }, msgs);
    const first = inputs.find((i) => i.type === 'progress');
    expect(first?.type === 'progress' && first.event).toMatchObject({ parent_session_id: ROOT, agent: 'explore' });
  });

  it('skips a broken part, reports where and which field, and goes on', () => {
    const broken = structuredClone(rootMessages.slice(0, 3));
    (broken[1].parts[1] as { state: unknown }).state = 'nope';
    const { inputs, issues } = sessionToInputs({ id: ROOT }, broken);
    expect(issues).toEqual([{ where: 'message 1 part 1', field: 'state', message: 'expected object, got string' }]);
    expect(inputs.filter((i) => i.type === 'progress')).toHaveLength(1);
  });
});

describe('landed rules', () => {
  const call = (command: string, exit: number | null) => ({
    tool: 'bash',
    status: 'completed',
    exit,
    facts: normalizeCall('bash', { command }),
  });

  it('a test that passes after failing lands once; passing again does not', () => {
    let tr = newLandedTracker();
    const seq = [1, 1, 0, 0, 1, 0].map((exit) => {
      const r = judgeLanded(tr, call('npm test', exit));
      tr = r.tracker;
      return r.landed;
    });
    expect(seq).toEqual([false, false, true, false, false, true]);
  });

  it('a different test fingerprint does not count as the fix', () => {
    let tr = judgeLanded(newLandedTracker(), call('npm test', 1)).tracker;
    const r = judgeLanded(tr, call('npm run lint', 0));
    expect(r.landed).toBe(false);
    tr = r.tracker;
    expect(tr.failing).toHaveLength(1);
  });

  it('git commit lands only with exit 0; an aborted test (exit null) changes nothing', () => {
    expect(judgeLanded(newLandedTracker(), call('git commit -m x', 0)).landed).toBe(true);
    expect(judgeLanded(newLandedTracker(), call('git commit -m x', 1)).landed).toBe(false);
    const tr = judgeLanded(newLandedTracker(), call('npm test', 1)).tracker;
    expect(judgeLanded(tr, call('npm test', null)).tracker).toBe(tr);
  });

  it('an edit lands only with a non-empty diff or filediff changes; reads and tasks never', () => {
    const facts = normalizeCall('edit', { filePath: 'a' });
    const edit = (metadata: Record<string, unknown>) =>
      judgeLanded(newLandedTracker(), { tool: 'edit', status: 'completed', exit: 0, metadata, facts }).landed;
    expect(edit({ diff: '--- a\n+++ b\n-x\n+y\n' })).toBe(true);
    expect(edit({ diff: '' })).toBe(false);
    expect(edit({ filediff: { additions: 0, deletions: 2 } })).toBe(true);
    expect(edit({ filediff: { additions: 0, deletions: 0 } })).toBe(false);
    expect(
      judgeLanded(newLandedTracker(), { tool: 'read', status: 'completed', exit: 0, metadata: { diff: 'x' }, facts })
        .landed,
    ).toBe(false);
  });

  it('keeps the tracker bounded and serialisable', () => {
    let tr = newLandedTracker();
    for (let i = 0; i < 50; i++) tr = judgeLanded(tr, call(`npm test -- tests/t${i}.test.js`, 1)).tracker;
    expect(tr.failing.length).toBe(32);
    expect(JSON.parse(JSON.stringify(tr))).toEqual(tr);
  });
});
