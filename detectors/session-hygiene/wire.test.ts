import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  AssistantEventSchema,
  ImageEventSchema,
  ProgressEventSchema,
  PromptEventSchema,
  RequestRecordSchema,
  RetryEventSchema,
  SessionStatsEventSchema,
} from '../../core/wire.ts';

// The session-hygiene wire shapes: strict, bounded, no content. A body that carries
// text under any key is refused, and the refusal names the key.

const TS = 1_796_034_981_636;
const VALID: Record<string, Record<string, unknown>> = {
  assistant: {
    kind: 'assistant',
    session_id: 'ses_1',
    call_id: 'msg_1',
    model: 'fake/loop-model',
    input_tokens: 1_200,
    output_tokens: 30,
    reasoning_tokens: 0,
    cache_read_tokens: 240_000,
    cache_write_tokens: 0,
    finish: 'tool-calls',
    visible_output: true,
    ts: TS,
  },
  retry: { kind: 'retry', session_id: 'ses_1', attempt: 2, next: TS + 4_000, ts: TS },
  image: { kind: 'image', session_id: 'ses_1', call_id: 'prt_1', bytes: 198_000, ts: TS },
  session_stats: {
    kind: 'session_stats',
    session_id: 'ses_1',
    messages: 3_662,
    stored_bytes: 19_117_759,
    history_bytes: 1_930_000,
    updated_at: TS - 4 * 3_600_000,
    live: true,
    ts: TS,
  },
  prompt: { kind: 'prompt', session_id: 'ses_1', call_id: 'msg_0', resume: true, ts: '2026-08-22T20:57:00Z' },
};
const KINDS = Object.keys(VALID);
const SHAPES: Record<string, { shape: object }> = {
  assistant: AssistantEventSchema,
  retry: RetryEventSchema,
  image: ImageEventSchema,
  session_stats: SessionStatsEventSchema,
  prompt: PromptEventSchema,
};

describe('session-hygiene progress event kinds', () => {
  it.each(KINDS)('%s: a valid body parses', (kind) => {
    const r = ProgressEventSchema.safeParse(VALID[kind]);
    expect(r.error).toBeUndefined();
    expect(r.data?.kind).toBe(kind);
  });

  it('assistant token counts default to 0; an error is a name and a code, never a message', () => {
    const e = ProgressEventSchema.parse({
      kind: 'assistant',
      session_id: 's',
      call_id: 'm',
      error_name: 'APIError',
      error_code: 'context_length_exceeded',
      visible_output: false,
      ts: 1,
    });
    expect(e).toMatchObject({ input_tokens: 0, output_tokens: 0, cache_read_tokens: 0, cache_write_tokens: 0 });
    const sentence = { ...VALID.assistant, error_code: 'prompt is too long' };
    expect(ProgressEventSchema.safeParse(sentence).error?.issues[0].path).toEqual(['error_code']);
  });

  it('the prompt timestamp is epoch ms after parsing', () => {
    expect(ProgressEventSchema.parse(VALID.prompt).ts).toBe(Date.parse('2026-08-22T20:57:00Z'));
  });

  it.each(KINDS.flatMap((kind) => ['content', 'text', 'prompt', 'message', 'body', 'data'].map((key) => [kind, key])))(
    '%s: a body with `%s` is refused, naming the key',
    (kind, key) => {
      const r = ProgressEventSchema.safeParse({ ...VALID[kind], [key]: 'what the user typed' });
      expect(r.success).toBe(false);
      const issue = r.error!.issues[0];
      expect(issue.code).toBe('unrecognized_keys');
      expect(issue.message).toContain(`"${key}"`);
    },
  );

  it.each([
    ['assistant', 'visible_output'],
    ['assistant', 'call_id'],
    ['retry', 'attempt'],
    ['image', 'bytes'],
    ['session_stats', 'live'],
    ['session_stats', 'stored_bytes'],
    ['prompt', 'resume'],
  ])('%s: `%s` is required', (kind, key) => {
    const body = { ...VALID[kind] };
    delete body[key];
    expect(ProgressEventSchema.safeParse(body).error?.issues[0].path).toEqual([key]);
  });

  it.each([
    ['assistant', 'input_tokens', -1],
    ['assistant', 'output_tokens', 1.5],
    ['assistant', 'model', 'has space'],
    ['assistant', 'finish', 'x'.repeat(65)],
    ['assistant', 'error_name', 'Caf\u00e9Error'],
    ['retry', 'attempt', 0],
    ['image', 'bytes', -5],
    ['session_stats', 'messages', 2.5],
    ['session_stats', 'updated_at', 'yesterday'],
    ['prompt', 'resume', 'yes'],
  ])('%s: %s = %j is refused', (kind, key, value) => {
    expect(ProgressEventSchema.safeParse({ ...VALID[kind], [key]: value }).error?.issues[0].path).toEqual([key]);
  });
});

describe('request record: the router-known fields', () => {
  const rec = { session_id: 'ses_1', request_id: 'r1', model: 'a/b', prompt_tokens: 246_000, ts: TS };

  it('parses the optional fields', () => {
    const full = {
      ...rec,
      completion_tokens: 0,
      visible_output: false,
      finish_reason: 'stop',
      status: 400,
      error_code: 'context_length_exceeded',
      error_type: 'invalid_request_error',
    };
    expect(RequestRecordSchema.parse(full)).toEqual(full);
    expect(RequestRecordSchema.parse(rec)).toEqual(rec);
  });

  it.each([
    ['status', 99],
    ['status', 600],
    ['error_code', 'The prompt is too long: 246000 tokens'],
    ['error_type', 'a\nb'],
    ['finish_reason', ''],
    ['completion_tokens', -1],
    ['visible_output', 'false'],
  ])('refuses %s = %j', (key, value) => {
    expect(RequestRecordSchema.safeParse({ ...rec, [key]: value }).error?.issues[0].path).toEqual([key]);
  });

  it.each(['error_message', 'body', 'response', 'content'])('refuses `%s`, naming it', (key) => {
    const issue = RequestRecordSchema.safeParse({ ...rec, [key]: '...' }).error?.issues[0];
    expect(issue?.code).toBe('unrecognized_keys');
    expect(issue?.message).toContain(`"${key}"`);
  });
});

describe('fuzz', () => {
  const CODE = /^[A-Za-z0-9_.:/-]{1,64}$/;

  it('any key outside a kind is refused and named', () => {
    fc.assert(
      fc.property(
        fc.constantFrom(...KINDS),
        fc.string({ minLength: 1, maxLength: 20 }),
        fc.jsonValue({ maxDepth: 2 }),
        (kind, key, value) => {
          fc.pre(!Object.hasOwn(SHAPES[kind].shape, key) && key !== '__proto__');
          const r = ProgressEventSchema.safeParse({ ...VALID[kind], [key]: value });
          expect(r.success).toBe(false);
          expect(r.error!.issues[0].code).toBe('unrecognized_keys');
          expect((r.error!.issues[0] as { keys: string[] }).keys).toEqual([key]);
        },
      ),
      { numRuns: 500 },
    );
  });

  it('a code field takes a word of [A-Za-z0-9_.:/-], at most 64 long, and nothing else', () => {
    const fields: [string, string][] = [
      ['assistant', 'finish'],
      ['assistant', 'error_name'],
      ['assistant', 'error_code'],
    ];
    fc.assert(
      fc.property(
        fc.constantFrom(...fields),
        fc.oneof(fc.string({ maxLength: 80 }), fc.stringMatching(/^[A-Za-z0-9_.:/-]{1,70}$/)),
        ([kind, key], v) => {
          const ok = ProgressEventSchema.safeParse({ ...VALID[kind], [key]: v }).success;
          expect(ok).toBe(CODE.test(v));
          expect(
            RequestRecordSchema.safeParse({
              ...{ session_id: 's', request_id: 'r', model: 'a/b', prompt_tokens: 1, ts: 1 },
              error_code: v,
            }).success,
          ).toBe(CODE.test(v));
        },
      ),
      { numRuns: 500 },
    );
  });

  it('generated valid events parse, and parsing is idempotent', () => {
    const id = fc.stringMatching(/^[\x21-\x7e]{1,40}$/);
    const n = fc.nat({ max: 1_000_000_000 });
    const ts = fc.nat({ max: 4_000_000_000_000 });
    const event = fc.oneof(
      fc.record(
        {
          kind: fc.constant('assistant'),
          session_id: id,
          call_id: id,
          input_tokens: n,
          cache_read_tokens: n,
          visible_output: fc.boolean(),
          finish: fc.constantFrom('stop', 'tool-calls', 'length'),
          ts,
        },
        { requiredKeys: ['kind', 'session_id', 'call_id', 'visible_output', 'ts'] },
      ),
      fc.record({ kind: fc.constant('retry'), session_id: id, attempt: fc.integer({ min: 1, max: 1_000 }), ts }),
      fc.record({ kind: fc.constant('image'), session_id: id, bytes: n, ts }),
      fc.record({
        kind: fc.constant('session_stats'),
        session_id: id,
        messages: fc.nat({ max: 1_000_000 }),
        stored_bytes: n,
        live: fc.boolean(),
        ts,
      }),
      fc.record({ kind: fc.constant('prompt'), session_id: id, resume: fc.boolean(), ts }),
    );
    fc.assert(
      fc.property(event, (e) => {
        const once = ProgressEventSchema.parse(e);
        expect(ProgressEventSchema.parse(once)).toEqual(once);
      }),
      { numRuns: 500 },
    );
  });
});
