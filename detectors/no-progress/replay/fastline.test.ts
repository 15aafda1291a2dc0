import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { MarkerEventSchema, ProgressEventSchema, RequestRecordSchema, ToolEventSchema } from '../../../core/wire.ts';
import { generateCalibration, toJsonl } from '../../../test/fixtures/calibration.ts';
import { fastInput, MARKER_KEYS, REQUEST_KEYS, TOOL_KEYS } from './fastline.ts';
import { parseLine } from './inputs.ts';

// The fast path must never accept what zod rejects, and must build what zod builds.

/** The zod path of parseLine, alone. */
function viaZod(o: Record<string, unknown>): unknown {
  const { type, ...rest } = o;
  if (type !== undefined && type !== 'request' && type !== 'progress') return undefined;
  const isRequest = type === 'request' || (type === undefined && 'request_id' in rest);
  const r = isRequest ? RequestRecordSchema.safeParse(rest) : ProgressEventSchema.safeParse(rest);
  if (!r.success) return undefined;
  return isRequest ? { type: 'request', record: r.data } : { type: 'progress', event: r.data };
}

const FP = 'a'.repeat(64);
const tool = {
  type: 'progress',
  kind: 'tool',
  session_id: 'ses_a',
  parent_session_id: 'ses_p',
  agent: 'build',
  ts: 1_790_000_000_000,
  tool: 'read',
  call_id: 'call_1',
  fingerprint: FP,
  target: 'src/app.ts',
  exit: 0,
  landed: false,
  result_fingerprint: 'b'.repeat(64),
};
const marker = {
  type: 'progress',
  kind: 'continuation',
  session_id: 'ses_a',
  parent_session_id: null,
  agent: 'build',
  ts: 5,
  call_id: 'msg_1',
  landed: false,
};
const request = {
  type: 'request',
  session_id: 'ses_a',
  parent_session_id: 'ses_p',
  agent: 'build',
  request_id: 'msg_1',
  model: 'fake/model',
  prompt_tokens: 1000,
  cached_tokens: 900,
  cost_usd: 0.01,
  ts: 7,
  completion_tokens: 20,
  visible_output: true,
  finish_reason: 'tool-calls',
  status: 200,
  error_code: 'rate_limit',
  error_type: 'x.y:z/w-1',
};

// values near every bound the schemas draw, of every JSON type
const EDGES: unknown[] = [
  '',
  ' ',
  'a b',
  'x'.repeat(64),
  'x'.repeat(65),
  'x'.repeat(128),
  'x'.repeat(129),
  'x'.repeat(200),
  'x'.repeat(201),
  'y'.repeat(256),
  'y'.repeat(257),
  'caf\u00e9',
  'a\nb',
  'a\tb',
  '~',
  FP,
  FP.toUpperCase(),
  `${FP}0`,
  'rate limit',
  '2026-09-26T02:00:00Z',
  '2026-09-26T02:00:00',
  0,
  -0,
  -1,
  1.5,
  99,
  100,
  599,
  600,
  2_147_483_647,
  2_147_483_648,
  -2_147_483_648,
  -2_147_483_649,
  1_000_000,
  1_000_001,
  1_000_000_000,
  1_000_000_001,
  8_640_000_000_000_000,
  8_640_000_000_000_001,
  Number.MAX_SAFE_INTEGER,
  1e300,
  true,
  false,
  null,
  [],
  {},
  'tool',
  'continuation',
  'compaction_done',
  'assistant',
  'progress',
  'request',
];
const edgy = fc.oneof(
  fc.constantFrom(...EDGES),
  fc.string(),
  fc.integer(),
  fc.double({ noNaN: true, noDefaultInfinity: true }),
);

/** A template with each field kept, replaced by an edgy value, or dropped, and maybe an extra key. */
const record = fc
  .tuple(
    fc.constantFrom(tool, marker, request),
    fc.array(fc.tuple(fc.nat(20), fc.constantFrom('keep', 'keep', 'keep', 'swap', 'drop'), edgy), {
      maxLength: 4,
    }),
    fc.option(fc.tuple(fc.constantFrom('args', 'request_id', 'kind', 'type', 'extra', '__proto__'), edgy)),
  )
  .map(([base, edits, extra]) => {
    const o: Record<string, unknown> = { ...base };
    const keys = Object.keys(base);
    for (const [i, what, v] of edits) {
      const k = keys[i % keys.length];
      if (what === 'swap') o[k] = v;
      else if (what === 'drop') delete o[k];
    }
    if (extra) o[extra[0]] = extra[1];
    // as JSON.parse gives it
    return JSON.parse(JSON.stringify(o)) as Record<string, unknown>;
  });

describe('replay fast path', () => {
  it('accepts only what zod accepts, and builds exactly what zod builds (keys in the same order)', () => {
    let accepted = 0;
    fc.assert(
      fc.property(record, (o) => {
        const fast = fastInput(o);
        if (fast === undefined) return;
        accepted++;
        const slow = viaZod(o);
        expect(fast).toEqual(slow);
        const inner = (x: unknown) => {
          const v = x as { event?: object; record?: object };
          return Object.keys(v.event ?? v.record ?? {});
        };
        expect(inner(fast)).toEqual(inner(slow));
      }),
      { numRuns: 20_000 },
    );
    // not vacuous: the untouched templates and many near them go the fast way
    expect(accepted).toBeGreaterThan(2_000);
  });

  it('agrees with zod on every template with any one field set to any edge value, or dropped', () => {
    let accepted = 0;
    for (const base of [tool, marker, request]) {
      for (const k of [...Object.keys(base), 'extra', 'request_id', 'kind']) {
        for (const v of [...EDGES, undefined]) {
          const o = JSON.parse(JSON.stringify({ ...base, [k]: v })) as Record<string, unknown>;
          const fast = fastInput(o);
          if (fast === undefined) continue;
          accepted++;
          expect([k, v, fast]).toEqual([k, v, viaZod(o)]);
        }
      }
    }
    expect(accepted).toBeGreaterThan(100);
  });

  it('knows every field of the records it takes', () => {
    expect([...TOOL_KEYS]).toEqual(Object.keys(ToolEventSchema.shape));
    expect([...MARKER_KEYS]).toEqual(Object.keys(MarkerEventSchema.shape));
    expect([...REQUEST_KEYS]).toEqual(Object.keys(RequestRecordSchema.shape));
  });

  it('takes every line of the calibration replay, to the same inputs as zod', () => {
    const lines = toJsonl(generateCalibration().inputs).trim().split('\n');
    for (const l of lines) {
      const o = JSON.parse(l);
      // model steps (the monologue cases' text fingerprints) are rare: zod takes them
      if (o.kind === 'assistant') {
        expect(fastInput(o)).toBeUndefined();
        expect(parseLine(l, 'line')).toEqual(viaZod(o));
        continue;
      }
      expect(fastInput(o)).toBeDefined();
      expect(parseLine(l, 'line')).toEqual(viaZod(o));
    }
  });
});
