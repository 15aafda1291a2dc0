import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ANTHROPIC_STREAM, OPENAI_STREAM, sse } from '../../test/fixtures/answers.ts';
import { jsonFacts, recordOfFacts, SseReader, sseFacts } from './usage.ts';

// The answers' wire shapes as the providers document them: OpenAI chat completions
// (a completion, or chunks with `stream_options.include_usage` putting the usage in a
// last chunk with no choices) and Anthropic messages (a message, or message_start /
// content_block_* / message_delta / message_stop events).

const q = { conversation: 'ses_1', agent: 'build', model: 'asked/model' };

describe('answer facts', () => {
  it('an OpenAI stream: usage from the last chunk, model, finish reason, visible text', () => {
    const f = sseFacts(OPENAI_STREAM);
    expect(f).toMatchObject({
      id: 'chatcmpl-1',
      model: 'gpt-x',
      finish_reason: 'stop',
      visible: true,
      usage: { prompt_tokens: 1200, completion_tokens: 30, cached_tokens: 1000 },
    });
  });

  it('an Anthropic stream: prompt = input + cache reads + cache writes; output from message_delta', () => {
    const f = sseFacts(ANTHROPIC_STREAM);
    expect(f).toMatchObject({
      id: 'msg_1',
      model: 'claude-x',
      finish_reason: 'tool_use',
      visible: true,
      usage: { prompt_tokens: 2125, completion_tokens: 42, cached_tokens: 2000 },
    });
  });

  it('whole JSON answers of both shapes, and an empty generation', () => {
    expect(
      jsonFacts(
        JSON.stringify({
          id: 'msg_2',
          type: 'message',
          model: 'claude-x',
          content: [{ type: 'text', text: 'done' }],
          stop_reason: 'end_turn',
          usage: { input_tokens: 10, output_tokens: 3 },
        }),
      ),
    ).toMatchObject({ model: 'claude-x', finish_reason: 'end_turn', visible: true, usage: { prompt_tokens: 10 } });
    const empty = jsonFacts(
      JSON.stringify({
        model: 'm',
        choices: [{ index: 0, message: { role: 'assistant', content: '' }, finish_reason: 'stop' }],
        usage: { prompt_tokens: 5, completion_tokens: 0, cost: 0.002 },
      }),
    );
    expect(empty).toMatchObject({ visible: false, cost: 0.002, usage: { prompt_tokens: 5, completion_tokens: 0 } });
    expect(jsonFacts('not json')).toBeUndefined();
    expect(jsonFacts('{"error":{"code":"context_length_exceeded","type":"invalid_request_error"}}')).toMatchObject({
      error_code: 'context_length_exceeded',
      error_type: 'invalid_request_error',
    });
  });

  it('the record: the answer model over the asked one, costOf when the upstream gives no cost', () => {
    const rec = recordOfFacts(
      sseFacts(OPENAI_STREAM),
      200,
      q,
      () => 0,
      (_m, u) => u.prompt_tokens * 1e-6,
    );
    expect(rec).toMatchObject({
      session_id: 'ses_1',
      agent: 'build',
      request_id: 'chatcmpl-1',
      model: 'gpt-x',
      prompt_tokens: 1200,
      cached_tokens: 1000,
      completion_tokens: 30,
      cost_usd: 0.0012,
      finish_reason: 'stop',
      visible_output: true,
      status: 200,
    });
    // No usage in a success (the client did not ask for it): nothing to record.
    expect(recordOfFacts(sseFacts(sse({ id: 'x', choices: [] })), 200, q, () => 0)).toBeUndefined();
    // An error: its status, codes and the estimated prompt.
    expect(recordOfFacts({ error_code: 'overloaded' }, 529, q, () => 77)).toMatchObject({
      model: 'asked/model',
      prompt_tokens: 77,
      status: 529,
      error_code: 'overloaded',
    });
  });

  it('keeps no text: only sizes, ids and codes', () => {
    const rec = recordOfFacts(sseFacts(OPENAI_STREAM), 200, q, () => 0);
    expect(JSON.stringify(rec)).not.toContain('h\u00e9');
  });

  it('reads a stream the same however it is cut into chunks (lines and UTF-8 split anywhere)', () => {
    const bytes = Buffer.from(OPENAI_STREAM + ANTHROPIC_STREAM, 'utf8');
    const whole = sseFacts(OPENAI_STREAM + ANTHROPIC_STREAM);
    fc.assert(
      fc.property(fc.uniqueArray(fc.integer({ min: 1, max: bytes.length - 1 }), { maxLength: 40 }), (cuts) => {
        const r = new SseReader();
        let at = 0;
        for (const c of [...cuts].sort((a, b) => a - b)) {
          r.push(bytes.subarray(at, c));
          at = c;
        }
        r.push(bytes.subarray(at));
        expect(r.end()).toEqual(whole);
      }),
    );
  });

  it('a long answer: only its tail is read once it is visible, and the usage at its end still counts', () => {
    const delta = (i: number) => ({ id: 'c', model: 'm', choices: [{ index: 0, delta: { content: `part ${i} ` } }] });
    const long = sse(
      ...Array.from({ length: 5000 }, (_, i) => delta(i)),
      { id: 'c', model: 'm', choices: [{ index: 0, delta: {}, finish_reason: 'length' }] },
      { id: 'c', model: 'm', choices: [], usage: { prompt_tokens: 7, completion_tokens: 5000 } },
    );
    expect(long.length).toBeGreaterThan(4 * 64 * 1024);
    const r = new SseReader();
    const bytes = Buffer.from(long);
    for (let i = 0; i < bytes.length; i += 777) r.push(bytes.subarray(i, i + 777));
    expect(r.end()).toMatchObject({
      visible: true,
      finish_reason: 'length',
      usage: { prompt_tokens: 7, completion_tokens: 5000 },
    });
    expect(sseFacts(long)).toMatchObject({ finish_reason: 'length', usage: { prompt_tokens: 7 } });
  });

  it('never throws on arbitrary bytes, and ignores an overlong line', () => {
    fc.assert(
      fc.property(fc.array(fc.uint8Array({ maxLength: 200 }), { maxLength: 20 }), (chunks) => {
        const r = new SseReader();
        for (const c of chunks) r.push(Buffer.from(c));
        r.end();
      }),
    );
    const r = new SseReader();
    r.push(`data: {"usage":{"prompt_tokens":1},"pad":"${'x'.repeat(2 << 20)}"}\n`);
    r.push(`data: ${JSON.stringify({ choices: [], usage: { prompt_tokens: 9, completion_tokens: 1 } })}\n`);
    expect(r.end().usage?.prompt_tokens).toBe(9);
  });
});
