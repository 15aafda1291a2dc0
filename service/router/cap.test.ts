import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { capBody, estimateTokens } from './cap.ts';

// The cap's cut, on random conversations of both wire shapes: whatever it returns, the
// prompt fits, the system prompt and the task stay, the newest turns stay in order, and
// no tool result is left without the call it answers.

type M = Record<string, unknown> & { role: string };

interface Turn {
  kind: 'tools' | 'text' | 'user';
  calls: number;
  size: number;
  text: string;
}
const turn = fc.record({
  kind: fc.constantFrom<Turn['kind']>('tools', 'tools', 'text', 'user'),
  calls: fc.integer({ min: 1, max: 3 }),
  size: fc.integer({ min: 0, max: 400 }),
  text: fc.string({ maxLength: 150 }),
});

/** OpenAI: tool calls answered by `tool` messages. */
function openaiTurn(t: Turn, id: () => string): M[] {
  if (t.kind === 'text') return [{ role: 'assistant', content: t.text }];
  if (t.kind === 'user') return [{ role: 'user', content: t.text }];
  const ids = Array.from({ length: t.calls }, id);
  return [
    {
      role: 'assistant',
      content: null,
      tool_calls: ids.map((i) => ({ id: i, type: 'function', function: { name: 'read', arguments: '{}' } })),
    },
    ...ids.map((i) => ({ role: 'tool', tool_call_id: i, content: 'r'.repeat(t.size) })),
  ];
}

/** Anthropic: tool_use blocks answered by tool_result blocks in the next user message (sometimes with text). */
function anthropicTurn(t: Turn, id: () => string): M[] {
  if (t.kind !== 'tools')
    return [
      { role: 'assistant', content: [{ type: 'text', text: t.text }] },
      { role: 'user', content: t.text },
    ];
  const ids = Array.from({ length: t.calls }, id);
  return [
    { role: 'assistant', content: ids.map((i) => ({ type: 'tool_use', id: i, name: 'read', input: {} })) },
    {
      role: 'user',
      content: [
        ...ids.map((i) => ({ type: 'tool_result', tool_use_id: i, content: 'r'.repeat(t.size) })),
        ...(t.size % 2 ? [{ type: 'text', text: 'and go on' }] : []),
      ],
    },
  ];
}

/** A conversation: the system prompt (in the messages for OpenAI, apart for Anthropic), the task, the turns. */
const conversation = (shape: 'openai' | 'anthropic') =>
  fc.array(turn, { maxLength: 30 }).map((turns) => {
    let n = 0;
    const id = () => `call_${n++}`;
    const build = shape === 'openai' ? openaiTurn : anthropicTurn;
    return {
      model: 'm',
      ...(shape === 'anthropic' ? { system: 'You are an agent.' } : {}),
      tools: [{ name: 'read' }],
      messages: [
        ...(shape === 'openai' ? [{ role: 'system', content: 'You are an agent.' }] : []),
        { role: 'user', content: 'the task' },
        ...turns.flatMap((t) => build(t, id)),
      ],
    };
  });

/** Every tool result's call id, and every call id, of a message list (both shapes). */
function ids(msgs: M[]) {
  const calls = new Set<string>();
  const results: string[] = [];
  for (const m of msgs) {
    for (const c of (m.tool_calls as { id: string }[] | undefined) ?? []) calls.add(c.id);
    if (m.role === 'tool') results.push(String(m.tool_call_id));
    if (Array.isArray(m.content)) {
      for (const b of m.content as { type: string; id?: string; tool_use_id?: string }[]) {
        if (b.type === 'tool_use' && b.id) calls.add(b.id);
        if (b.type === 'tool_result' && b.tool_use_id) results.push(b.tool_use_id);
      }
    }
  }
  return { calls, results };
}

function check(body: { messages: M[] }, max: number) {
  const r = capBody(body, max);
  const head = body.messages[0].role === 'system' ? 2 : 1;
  if (r.kind === 'fits') {
    expect(estimateTokens(body)).toBeLessThanOrEqual(max);
    return;
  }
  if (r.kind === 'over') {
    // Nothing to cut, or even the newest turn alone is over.
    expect(estimateTokens(body)).toBeGreaterThan(max);
    return;
  }
  const out = r.body.messages as M[];
  expect(estimateTokens(r.body)).toBeLessThanOrEqual(max);
  expect(r.after).toBe(estimateTokens(r.body));
  expect(r.turns).toBeGreaterThan(0);
  expect(out.slice(0, head)).toEqual(body.messages.slice(0, head));
  expect(out.slice(head)).toEqual(body.messages.slice(body.messages.length - (out.length - head)));
  const { calls, results } = ids(out);
  expect(results.every((id) => calls.has(id))).toBe(true);
  expect(body.messages).not.toBe(out); // the input is not changed
}

describe('capBody', () => {
  it('OpenAI conversations: fits, cuts whole turns, or says over', () => {
    fc.assert(
      fc.property(conversation('openai'), fc.integer({ min: 50, max: 3000 }), (body, max) => check(body as never, max)),
      { numRuns: 300 },
    );
  });

  it('Anthropic conversations: tool results stay with their tool_use', () => {
    fc.assert(
      fc.property(conversation('anthropic'), fc.integer({ min: 50, max: 3000 }), (body, max) =>
        check(body as never, max),
      ),
      { numRuns: 300 },
    );
  });

  it('a body that is not a conversation is over, never cut', () => {
    expect(capBody({ prompt: 'x'.repeat(100) }, 10)).toMatchObject({ kind: 'over' });
    expect(capBody('x'.repeat(100), 10)).toMatchObject({ kind: 'over' });
    expect(capBody({ messages: [] }, 100)).toMatchObject({ kind: 'fits' });
  });
});
