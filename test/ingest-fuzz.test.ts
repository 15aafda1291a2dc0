import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Vigil } from '../core/vigil.ts';
import { ExternalVerdictSchema, GateQuerySchema, ProgressEventSchema, RequestRecordSchema } from '../core/wire.ts';
import { type App, buildServer } from '../service/server.ts';
import { HeartbeatSchema } from '../watchdog/wire.ts';
import { testVigil } from './helpers/index.ts';

// 10,000 generated malformed bodies per ingestion route: every one a 400 that names the
// field, never a 5xx, and nothing stored.

const FP = 'ab'.repeat(32);
const VALID: Record<
  string,
  { body: Record<string, unknown>; schema: { safeParse(v: unknown): { success: boolean } } }
> = {
  '/progress': {
    body: {
      session_id: 'ses_f',
      tool: 'read',
      call_id: 'c1',
      fingerprint: FP,
      target: 'src/a.js',
      landed: false,
      ts: Date.now(),
    },
    schema: ProgressEventSchema,
  },
  '/requests': {
    body: { session_id: 'ses_f', request_id: 'r1', model: 'a/b', prompt_tokens: 10, ts: '2026-11-30T10:00:00Z' },
    schema: RequestRecordSchema,
  },
  '/verdicts': {
    body: { session_id: 'ses_f', level: 'looping', reason: 'read a.js x20', source: 'watchdog' },
    schema: ExternalVerdictSchema,
  },
  '/watchdog/heartbeat': {
    body: { last_tick_at: Date.now(), result: { status: 'ok', sessions: 1 } },
    schema: HeartbeatSchema,
  },
  '/gate': { body: { conversation: 'ses_f', model: 'a/b' }, schema: GateQuerySchema },
};

const wrongValue = fc.oneof(
  fc.string({ maxLength: 300 }),
  fc.integer(),
  fc.double(),
  fc.boolean(),
  fc.constant(null),
  fc.array(fc.integer(), { maxLength: 3 }),
  fc.dictionary(fc.string({ maxLength: 5 }), fc.integer(), { maxKeys: 2 }),
  fc.string({ minLength: 1, maxLength: 20 }).map((s) => `${s}\n${s}`),
  fc.constant('x'.repeat(5000)),
);

type Mutation = { body: unknown; key?: string };

const BATCHED = new Set(['/progress', '/requests', '/verdicts']);

function mutations(base: Record<string, unknown>, batched: boolean): fc.Arbitrary<Mutation> {
  const keys = Object.keys(base);
  const batch = fc.record({ key: fc.constantFrom(...keys), v: wrongValue, at: fc.nat(4) }).map(({ key, v, at }) => ({
    body: [...Array.from({ length: at }, () => base), { ...base, [key]: v }],
    key: batched ? key : undefined,
  }));
  return fc.oneof(
    // a field with a wrong value
    fc
      .record({ key: fc.constantFrom(...keys), v: wrongValue })
      .map(({ key, v }) => ({ body: { ...base, [key]: v }, key })),
    // a required field missing
    fc.constantFrom(...keys).map((key) => {
      const b = { ...base };
      delete b[key];
      return { body: b, key };
    }),
    // content smuggled under a new key
    fc
      .record({
        key: fc.constantFrom('args', 'output', 'prompt', 'text', 'messages', 'content', 'command', 'x'),
        v: wrongValue,
      })
      .map(({ key, v }) => ({ body: { ...base, [key]: v }, key })),
    // a batch with one bad element (a route without batches must refuse the array itself)
    batch,
    // not an event at all
    fc.jsonValue({ maxDepth: 3 }).map((body) => ({ body })),
  );
}

let vigil: Vigil;
let app: App;
beforeAll(async () => {
  // Tens of thousands of requests from one client: the per-client rate limit is not what is tested here.
  vigil = await testVigil({ backend: 'memory', overlay: { server: { rate_limit: { max: 1_000_000 } } } });
  app = await buildServer(vigil);
});
afterAll(async () => {
  await app.close();
  await vigil.close();
});

describe.each(Object.keys(VALID))('malformed bodies to POST %s', (url) => {
  it('10,000 generated: each a 400 naming the field, no 5xx, nothing stored', async () => {
    const { body, schema } = VALID[url];
    let checked = 0;
    await fc.assert(
      fc.asyncProperty(mutations(body, BATCHED.has(url)), async (m) => {
        const single = schema.safeParse(m.body).success;
        const batch =
          BATCHED.has(url) &&
          Array.isArray(m.body) &&
          m.body.length > 0 &&
          m.body.every((x) => schema.safeParse(x).success);
        fc.pre(!single && !batch);
        checked++;
        const r = await app.inject({
          method: 'POST',
          url,
          headers: { 'content-type': 'application/json' },
          payload: JSON.stringify(m.body),
        });
        expect(r.statusCode).toBe(400);
        const msg: string = r.json().message;
        expect(msg).toMatch(/^body/);
        if (m.key && typeof m.body === 'object') expect(msg).toContain(m.key);
      }),
      { numRuns: 10_000, seed: 4242 },
    );
    expect(checked).toBeGreaterThan(9_000);
    expect(await vigil.engine.sessionRows()).toEqual([]);
    expect(await vigil.store.keys('ses')).toEqual([]);
    expect(await vigil.store.keys('meta:')).toEqual([]);
  }, 120_000);
});
