import { afterEach, describe, expect, it } from 'vitest';
import type { ToolEvent } from '../core/wire.ts';
import { sessionToInputs } from '../sensors/opencode/convert.ts';
import { type FakeServer, fakeOllama, ocMessages, ocSession } from '../test/helpers/opencode.ts';
import { askModel, buildDigest, buildMessages, parseYesNo } from './opinion.ts';

const servers: FakeServer[] = [];
afterEach(async () => {
  for (const s of servers.splice(0)) await s.close();
});

/** Tool events as the watchdog gets them: opencode messages through the shared converter. */
function eventsOf(calls: Parameters<typeof ocMessages>[2]): ToolEvent[] {
  const msgs = ocMessages('ses_digest', 1_000_000, calls, 'SECRET-PROMPT: the task text');
  const { inputs, issues } = sessionToInputs(ocSession('ses_digest', 2_000_000), msgs);
  expect(issues).toEqual([]);
  return inputs.flatMap((i) => (i.type === 'progress' && i.event.kind === 'tool' ? [i.event] : []));
}

describe('digest', () => {
  const calls = [
    ...Array.from({ length: 45 }, () => ({ tool: 'read', input: { filePath: '/work/project/src/navbar.js' } })),
    {
      tool: 'bash',
      input: { command: 'npm test -- --grep "SECRET-ARG password=hunter2"' },
      metadata: { exit: 1, output: 'SECRET-OUTPUT' },
    },
    {
      tool: 'edit',
      input: { filePath: '/work/project/src/a.js', oldString: 'SECRET-OLD', newString: 'SECRET-NEW' },
      metadata: { diff: '--- a\n+++ b\n-SECRET-OLD\n+SECRET-NEW\n' },
    },
    { tool: 'grep', input: { pattern: 'SECRET-PATTERN', path: '/work/project/src' } },
    { tool: 'read', input: { filePath: '/work/project/gone.js' }, status: 'error' },
  ];

  it('holds tool names, targets, exit codes and counts: the last 60 calls as lines', () => {
    const d = buildDigest(eventsOf(calls));
    const lines = d.split('\n');
    expect(lines[0]).toBe('tool calls: 49, landed changes: 1, failed calls: 2, distinct targets: 5');
    expect(lines[1]).toBe('most repeated: read src/navbar.js x45');
    expect(lines[2]).toBe('last 49 calls, oldest first:');
    expect(lines.slice(3, 48).every((l) => l === 'read src/navbar.js exit=0')).toBe(true);
    expect(lines[48]).toBe('bash npm test exit=1');
    expect(lines[49]).toBe('edit src/a.js exit=0 landed');
    expect(lines[51]).toBe('read gone.js exit=1');
    expect(buildDigest(eventsOf([...calls, ...calls])).split('\n')).toHaveLength(3 + 60);
  });

  it('never carries arguments, outputs or prompts', () => {
    const d = buildDigest(eventsOf(calls));
    const all = JSON.stringify(buildMessages(d));
    for (const secret of ['SECRET', 'hunter2', 'password', 'grep "']) expect(all).not.toContain(secret);
    expect(d).toMatch(/^[\x20-\x7e\n]*$/);
  });
});

describe('yes/no parsing', () => {
  it.each([
    ['yes - it re-reads navbar.js without editing', true, 'it re-reads navbar.js without editing'],
    ['Yes. The same read repeats 45 times.', true, 'The same read repeats 45 times.'],
    ['YES: reads repeat', true, 'reads repeat'],
    ['**Yes** - repeated reads, nothing lands', true, 'repeated reads, nothing lands'],
    ['No, it edits files and the check passes.', false, 'it edits files and the check passes.'],
    ['no', false, ''],
    ['Answer: no - edits land', false, 'edits land'],
    ['<think>it reads a lot, maybe yes? but no wait</think>\nNo - it landed an edit', false, 'it landed an edit'],
    ['\n\n  yes\nThe agent keeps reading one file.', true, 'The agent keeps reading one file.'],
    ['The agent is looping: 45 reads of one file.', true, 'The agent is looping: 45 reads of one file.'],
    ['The agent is not looping; it lands edits.', false, 'The agent is not looping; it lands edits.'],
    ['I think yes, given the reads.', true, 'I think yes, given the reads.'],
  ])('%j -> looping %s', (text, looping, reason) => {
    expect(parseYesNo(text)).toEqual({ looping, reason });
  });

  it.each(['', 'maybe', 'I cannot tell', 'yes or no? no idea, yes'])('%j -> null (neither, or both)', (text) => {
    expect(parseYesNo(text)).toBeNull();
  });

  it('keeps the reason one line of printable ASCII, bounded', () => {
    const r = parseYesNo(`yes \u2014 caf\u00e9 ${'x'.repeat(500)}`)!;
    expect(r.looping).toBe(true);
    expect(r.reason).toMatch(/^[\x20-\x7e]*$/);
    expect(r.reason.length).toBeLessThanOrEqual(200);
  });
});

describe('askModel (ollama client against a fake /api/chat)', () => {
  it('sends the digest as a chat and returns {model, looping, reason}', async () => {
    const s = await fakeOllama({ answer: 'Yes - the same file is read 45 times.' });
    servers.push(s);
    const r = await askModel('read a.js exit=0', { host: s.url, model: 'qwen-test', timeoutMs: 5_000 });
    expect(r).toEqual({
      ok: true,
      opinion: { model: 'qwen-test', looping: true, reason: 'the same file is read 45 times.' },
    });
    expect(s.requests).toHaveLength(1);
    expect(s.requests[0]).toMatchObject({
      method: 'POST',
      path: '/api/chat',
      body: { model: 'qwen-test', stream: false },
    });
  });

  it('a model error, a timeout or an unparseable answer is a value, never a throw', async () => {
    const bad = await fakeOllama({ answer: '', status: 500 });
    const slow = await fakeOllama({ answer: 'yes', hangMs: 5_000 });
    const vague = await fakeOllama({ answer: 'It is hard to say.' });
    servers.push(bad, slow, vague);
    expect(await askModel('x', { host: bad.url, model: 'm', timeoutMs: 5_000 })).toEqual({
      ok: false,
      error: 'model exploded',
    });
    expect(await askModel('x', { host: slow.url, model: 'm', timeoutMs: 200 })).toEqual({
      ok: false,
      error: 'timed out',
    });
    expect(await askModel('x', { host: vague.url, model: 'm', timeoutMs: 5_000 })).toEqual({
      ok: false,
      error: 'answer was neither yes nor no',
    });
    expect(await askModel('x', { host: 'http://127.0.0.1:9', model: 'm', timeoutMs: 2_000 })).toMatchObject({
      ok: false,
    });
  });
});
