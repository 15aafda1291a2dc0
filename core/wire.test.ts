import { describe, expect, it } from 'vitest';
import { ProgressEventSchema, RequestRecordSchema, VerdictSchema } from './wire.ts';

const FP = 'a'.repeat(64);
const tool = {
  session_id: 'ses_1',
  tool: 'read',
  call_id: 'call_1',
  fingerprint: FP,
  target: 'src/app.js',
  exit: 0,
  landed: false,
  ts: 1_796_034_981_636,
};

describe('progress event schema', () => {
  it('defaults kind to tool and keeps epoch ms', () => {
    const e = ProgressEventSchema.parse(tool);
    expect(e.kind).toBe('tool');
    expect(e.ts).toBe(1_796_034_981_636);
  });

  it('normalises an ISO 8601 timestamp to epoch ms', () => {
    expect(ProgressEventSchema.parse({ ...tool, ts: '2026-09-26T02:00:00Z' }).ts).toBe(
      Date.parse('2026-09-26T02:00:00Z'),
    );
    expect(ProgressEventSchema.parse({ ...tool, ts: '2026-09-26T04:00:00.500+02:00' }).ts).toBe(
      Date.parse('2026-09-26T02:00:00.500Z'),
    );
    expect(ProgressEventSchema.safeParse({ ...tool, ts: 'yesterday' }).success).toBe(false);
  });

  it.each(['args', 'output', 'prompt', 'text', 'messages', 'command', 'content'])('rejects a %s key', (key) => {
    const r = ProgressEventSchema.safeParse({ ...tool, [key]: 'cat secret.txt' });
    expect(r.success).toBe(false);
    expect(r.error?.issues[0].code).toBe('unrecognized_keys');
  });

  it('rejects a target with a newline, over 256 chars or non-ASCII', () => {
    expect(ProgressEventSchema.safeParse({ ...tool, target: 'a\nb' }).success).toBe(false);
    expect(ProgressEventSchema.safeParse({ ...tool, target: 'x'.repeat(257) }).success).toBe(false);
    expect(ProgressEventSchema.safeParse({ ...tool, target: 'caf\u00e9.md' }).success).toBe(false);
    expect(ProgressEventSchema.safeParse({ ...tool, target: '' }).success).toBe(true);
  });

  it('rejects a fingerprint that is not 64 lowercase hex', () => {
    expect(ProgressEventSchema.safeParse({ ...tool, fingerprint: FP.toUpperCase() }).success).toBe(false);
    expect(ProgressEventSchema.safeParse({ ...tool, fingerprint: 'abc' }).success).toBe(false);
  });

  it('accepts exit null (aborted) and integers, not fractions', () => {
    expect(ProgressEventSchema.safeParse({ ...tool, exit: null }).success).toBe(true);
    expect(ProgressEventSchema.safeParse({ ...tool, exit: 2 }).success).toBe(true);
    expect(ProgressEventSchema.safeParse({ ...tool, exit: 1.5 }).success).toBe(false);
  });

  it('requires tool, call_id, fingerprint and target for tool events', () => {
    const { fingerprint: _f, ...rest } = tool;
    expect(ProgressEventSchema.safeParse(rest).success).toBe(false);
  });

  it('accepts markers without tool fields and rejects tool fields on them', () => {
    const c = ProgressEventSchema.parse({ kind: 'continuation', session_id: 'ses_1', ts: 5 });
    expect(c).toEqual({ kind: 'continuation', session_id: 'ses_1', ts: 5, landed: false });
    expect(
      ProgressEventSchema.safeParse({ kind: 'compaction_done', session_id: 's', ts: 5, call_id: 'msg_1' }).success,
    ).toBe(true);
    expect(
      ProgressEventSchema.safeParse({ kind: 'continuation', session_id: 's', ts: 5, fingerprint: FP }).success,
    ).toBe(false);
    expect(ProgressEventSchema.safeParse({ kind: 'continuation', session_id: 's', ts: 5, landed: true }).success).toBe(
      false,
    );
  });

  it('accepts a null parent_session_id', () => {
    expect(ProgressEventSchema.parse({ ...tool, parent_session_id: null }).parent_session_id).toBeNull();
  });
});

describe('request record schema', () => {
  const rec = { session_id: 'ses_1', request_id: 'msg_1', model: 'fake/loop-model', prompt_tokens: 2456, ts: 1 };

  it('parses the minimal record and optional cost and cache', () => {
    expect(RequestRecordSchema.parse(rec)).toEqual(rec);
    expect(RequestRecordSchema.parse({ ...rec, cached_tokens: 10, cost_usd: 0.01 }).cost_usd).toBe(0.01);
  });

  it('rejects negative or fractional tokens and unknown keys', () => {
    expect(RequestRecordSchema.safeParse({ ...rec, prompt_tokens: -1 }).success).toBe(false);
    expect(RequestRecordSchema.safeParse({ ...rec, prompt_tokens: 1.5 }).success).toBe(false);
    expect(RequestRecordSchema.safeParse({ ...rec, prompt: 'hello' }).success).toBe(false);
  });
});

describe('verdict schema', () => {
  it('keeps the reason to one ASCII line', () => {
    const signals = {
      turns_since_landed: 1,
      usd_since_landed: 0,
      prompt_tokens_since_landed: 0,
      dup_share: 0,
      fail_streak: 0,
      context_tokens: 0,
      top_target: null,
      top_count: 0,
      session_repeat: 0,
      continuation_turns: 0,
      novelty: null,
      read_only: false,
      calls: 1,
      landed: 0,
    };
    expect(VerdictSchema.safeParse({ level: 'ok', rule: null, reason: 'ok', signals }).success).toBe(true);
    expect(VerdictSchema.safeParse({ level: 'ok', rule: null, reason: 'a\nb', signals }).success).toBe(false);
  });
});
