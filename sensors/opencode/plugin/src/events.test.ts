import { describe, expect, it } from 'vitest';
import { type ProgressEvent, ProgressEventSchema } from '../../../../core/wire.ts';
import { CHILD, CWD, captured, ROOT } from '../fixtures/captured.ts';
import { ProgressSensor } from './events.ts';
import { SessionBook, sessionInfoOf } from './identity.ts';

const lines = captured();

/** Replays the captured hook calls through a sensor, as plugin.ts routes them. */
function replay(list = lines) {
  const book = new SessionBook();
  const sensor = new ProgressSensor({ book, cwd: CWD, now: () => 1_796_040_000_000 });
  const out: ProgressEvent[] = [];
  for (const l of list) {
    let ev: ProgressEvent | undefined;
    if (l.hook === 'event') {
      book.learnSession(sessionInfoOf(l.input.event));
      ev = sensor.busEvent(l.input.event);
    } else if (l.hook === 'tool.execute.after') ev = sensor.afterTool(l.input, l.output);
    else if (l.hook === 'chat.message') ev = sensor.chatMessage(l.input, l.output);
    if (ev) out.push(ev);
  }
  return { out, sensor };
}

const label = (e: any) =>
  e.kind === 'tool'
    ? `${e.session_id === CHILD ? 'child ' : ''}${e.tool} ${e.target} exit=${e.exit} landed=${e.landed}`
    : e.kind;

describe('progress events from captured opencode 1.18.33 hooks', () => {
  it('gives one event per tool call, failed tools included, in order', () => {
    const { out, sensor } = replay();
    expect(out.map(label)).toEqual([
      'read src/app.js exit=0 landed=false',
      'read src/app.js exit=0 landed=false',
      'read src/app.js exit=0 landed=false',
      'read deleted.txt exit=1 landed=false', // threw: only visible as a part in error
      'read deleted.txt exit=1 landed=false',
      'bash sh check.sh exit=1 landed=false', // output.metadata.exit
      'edit src/app.js exit=0 landed=true', // metadata.diff
      'edit src/app.js exit=1 landed=false', // oldString not found: threw
      'write check.sh exit=0 landed=true',
      'bash sh check.sh exit=0 landed=true', // passes after failing: a fix landed
      'child read src/app.js exit=0 landed=false',
      'child read src/app.js exit=0 landed=false',
      'task general exit=0 landed=false',
      'read src/app.js exit=0 landed=false',
      'continuation', // opencode's synthetic "Continue..." (published before session.compacted)
      'compaction_done', // the token-threshold auto compaction
      'bash git status exit=0 landed=false',
      'read src/app.js exit=0 landed=false', // the doom_loop triple: after fired, parts completed
      'read src/app.js exit=0 landed=false',
      'read src/app.js exit=0 landed=false',
      'compaction_done', // the manual summarize
    ]);
    expect(sensor.shapeErrors).toBe(0);
  });

  it('fingerprints each call result (the output, never sent): the same for an unchanged file read again', () => {
    const { out } = replay();
    const tools = out.filter((e) => e.kind === 'tool');
    for (const e of tools)
      expect(e.kind === 'tool' && e.result_fingerprint, JSON.stringify(e)).toMatch(/^[0-9a-f]{64}$/);
    const res = tools.map((e) => (e.kind === 'tool' ? e.result_fingerprint : ''));
    // the first three reads of src/app.js: one result; the failing check another
    expect(new Set(res.slice(0, 3)).size).toBe(1);
    expect(res[5]).not.toBe(res[0]);
    // after the edit landed, src/app.js reads differently
    expect(res[13]).not.toBe(res[0]);
    expect(JSON.stringify(out)).not.toContain('return a - b');
  });

  it('counts each call id once', () => {
    const { out } = replay();
    const ids = out.filter((e) => e.kind === 'tool').map((e) => `${e.session_id}/${e.call_id}`);
    expect(new Set(ids).size).toBe(ids.length);
    // The same hooks delivered twice (a replayed bus, a re-fired hook) add no call and no
    // continuation turn (a repeated compaction_done is harmless: the lift is idempotent).
    const counted = (list: typeof out) => list.filter((e) => e.kind !== 'compaction_done').length;
    expect(counted(replay([...lines, ...lines]).out)).toBe(counted(out));
  });

  it('tags the child with its parent and agent, the root with its agent', () => {
    const { out } = replay();
    const child = out.filter((e) => e.session_id === CHILD);
    expect(child.every((e) => e.parent_session_id === ROOT && e.agent === 'general')).toBe(true);
    const root = out.filter((e) => e.session_id === ROOT);
    expect(root.every((e) => e.parent_session_id === undefined && e.agent === 'build')).toBe(true);
  });

  it('emits only valid wire events, with no content: no arguments, outputs, prompts or file text', () => {
    const { out } = replay();
    for (const e of out) expect(() => ProgressEventSchema.parse(e)).not.toThrow();
    const wire = JSON.stringify(out);
    for (const secret of [
      'FAIL: add',
      'export function',
      'return a',
      'no such text',
      'echo ok',
      'Continue if',
      CWD,
      'SUBAGENT',
    ]) {
      expect(wire).not.toContain(secret);
    }
  });

  it('counts a call that fired tool.execute.after and then ended as an interrupted error once (doom_loop rejected)', () => {
    // Shape verified on opencode 1.18.33 (docs/opencode.md): after fired with normal output, then the part
    // ended as {status:"error", error:"Tool execution aborted", metadata:{interrupted:true}}.
    const sensor = new ProgressSensor({ book: new SessionBook(), cwd: CWD });
    const input = { tool: 'read', sessionID: ROOT, callID: 'call_9_0_x', args: { filePath: `${CWD}/src/app.js` } };
    const first = sensor.afterTool(input, { title: 'src/app.js', output: '...', metadata: { truncated: false } });
    const part = {
      type: 'message.part.updated',
      properties: {
        sessionID: ROOT,
        part: {
          type: 'tool',
          sessionID: ROOT,
          messageID: 'msg_1',
          callID: 'call_9_0_x',
          tool: 'read',
          state: {
            status: 'error',
            input: input.args,
            error: 'Tool execution aborted',
            metadata: { interrupted: true },
            time: { start: 1, end: 2 },
          },
        },
      },
    };
    expect(first?.kind).toBe('tool');
    expect(sensor.busEvent(part)).toBeUndefined();
    // Even an error that is not marked interrupted does not count twice.
    part.properties.part.state.metadata = {} as never;
    expect(sensor.busEvent(part)).toBeUndefined();
  });

  it('takes the bash exit from output.metadata.exit, never output.exitCode', () => {
    const sensor = new ProgressSensor({ book: new SessionBook(), cwd: CWD });
    const input = { tool: 'bash', sessionID: ROOT, callID: 'call_x', args: { command: 'sh check.sh' } };
    const e = sensor.afterTool(input, { title: 't', output: '', exitCode: 0, metadata: { exit: 2 } });
    expect(e).toMatchObject({ kind: 'tool', exit: 2 });
  });

  it('turns an injected or bare "continue" user turn into a continuation marker, never the first message', () => {
    const sensor = new ProgressSensor({ book: new SessionBook(), cwd: CWD });
    const first = lines.find((l) => l.hook === 'chat.message' && l.input.sessionID === ROOT)!;
    expect(sensor.chatMessage(first.input, first.output)).toBeUndefined();
    const msg = (id: string, parts: unknown[]) => ({
      message: { id, role: 'user', sessionID: ROOT, time: { created: 1 }, agent: 'build' },
      parts,
    });
    const cont = sensor.chatMessage({ sessionID: ROOT }, msg('msg_a', [{ type: 'text', text: 'continue' }]));
    expect(cont).toMatchObject({ kind: 'continuation', session_id: ROOT, call_id: 'msg_a', landed: false });
    const injected = sensor.chatMessage(
      { sessionID: ROOT },
      msg('msg_b', [{ type: 'text', text: '[SYSTEM REMINDER - TODO CONTINUATION] 3 todos left', synthetic: true }]),
    );
    expect(injected?.kind).toBe('continuation');
    expect(
      sensor.chatMessage({ sessionID: ROOT }, msg('msg_c', [{ type: 'text', text: 'Now add a mul() function.' }])),
    ).toBeUndefined();
    // The same message again (hook and bus both saw it) counts once.
    expect(sensor.chatMessage({ sessionID: ROOT }, msg('msg_a', [{ type: 'text', text: 'continue' }]))).toBeUndefined();
  });

  it('skips everything else on the bus cheaply and never throws on odd shapes', () => {
    const sensor = new ProgressSensor({ book: new SessionBook() });
    for (const odd of [
      null,
      undefined,
      42,
      {},
      { type: 'message.part.updated' },
      {
        type: 'message.part.updated',
        properties: { part: { type: 'tool', sessionID: 's', callID: 'c', tool: 7, state: { status: 'error' } } },
      },
      { type: 'session.compacted', properties: {} },
      { type: 'server.heartbeat', properties: {} },
    ]) {
      expect(sensor.busEvent(odd)).toBeUndefined();
    }
    expect(sensor.afterTool(null, null)).toBeUndefined();
    expect(sensor.chatMessage({ sessionID: 's' }, { message: null, parts: 'x' })).toBeUndefined();
    expect(sensor.shapeErrors).toBe(1); // the part whose tool was not a string
  });
});
