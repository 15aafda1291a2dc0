import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import Fastify, { type FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { SessionRow } from '../../core/engine.ts';
import type { Vigil } from '../../core/vigil.ts';
import { codexSensor } from '../../sensors/codex/descriptor.ts';
import { eventually, loopSession, testVigil } from '../../test/helpers/index.ts';
import { vigilGate } from '../router.ts';
import { capBody } from './cap.ts';
import { jsonFacts, sseFacts } from './usage.ts';

// The gate in front of Codex: OpenAI Responses API requests (POST /v1/responses, what
// Codex sends to a model provider's base_url), the conversation named by Codex's own
// headers (thread-id, x-codex-parent-thread-id: the Codex sensor's gate table), the
// answer streamed as Responses events whose last one, response.completed, holds the
// usage and the whole response (often longer than the reader's tail), all over real
// HTTP against a local fake upstream.

const INSTRUCTIONS = 'You are Codex. '.repeat(2_000); // ~30 KB, echoed in response.completed

const response = (o: { id: string; status: string; output: unknown[]; usage?: unknown }) => ({
  id: o.id,
  object: 'response',
  created_at: 1,
  status: o.status,
  model: 'gpt-5.5-codex',
  instructions: INSTRUCTIONS,
  output: o.output,
  error: null,
  incomplete_details: null,
  usage: o.usage ?? null,
});

const CALL = { type: 'function_call', id: 'fc_1', call_id: 'call_1', name: 'exec_command', arguments: '{"cmd":"ls"}' };
const USAGE = {
  input_tokens: 5000,
  input_tokens_details: { cached_tokens: 4000 },
  output_tokens: 42,
  output_tokens_details: { reasoning_tokens: 10 },
  total_tokens: 5042,
};

/** The events of one streamed answer, as Responses SSE (`event:` and `data:` lines). */
function stream(id: string, withCall: boolean): string {
  const events: { type: string; [k: string]: unknown }[] = [
    { type: 'response.created', response: response({ id, status: 'in_progress', output: [] }) },
    ...(withCall
      ? [
          { type: 'response.output_item.added', output_index: 0, item: { ...CALL, arguments: '' } },
          { type: 'response.function_call_arguments.delta', output_index: 0, delta: '{"cmd":"ls"}' },
          { type: 'response.output_item.done', output_index: 0, item: CALL },
        ]
      : [
          {
            type: 'response.output_item.added',
            output_index: 0,
            item: { type: 'message', role: 'assistant', content: [] },
          },
          { type: 'response.output_text.delta', output_index: 0, delta: 'Done.' },
        ]),
    {
      type: 'response.completed',
      response: response({
        id,
        status: 'completed',
        output: withCall
          ? [CALL]
          : [{ type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'Done.' }] }],
        usage: USAGE,
      }),
    },
  ];
  return events.map((e, i) => `event: ${e.type}\ndata: ${JSON.stringify({ ...e, sequence_number: i })}\n\n`).join('');
}

let vigil: Vigil;
let router: FastifyInstance;
let routerUrl = '';
let upstreamUrl = '';
const upstreamBodies: { input?: unknown[] }[] = [];
const upstream = createServer((req, res) => {
  let raw = '';
  req.on('data', (c) => (raw += c));
  req.on('end', async () => {
    const body = JSON.parse(raw || '{}');
    upstreamBodies.push(body);
    const id = `resp_${upstreamBodies.length}`;
    const withCall = body.input?.at(-1)?.content?.[0]?.text !== 'finish';
    if (body.stream === false) {
      res.writeHead(200, { 'content-type': 'application/json' });
      return res.end(JSON.stringify(response({ id, status: 'completed', output: [CALL], usage: USAGE })));
    }
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
    // in pieces of 1000 bytes: the final event spans many of them
    const buf = Buffer.from(stream(id, withCall), 'utf8');
    for (let i = 0; i < buf.length; i += 1000) {
      res.write(buf.subarray(i, i + 1000));
      await new Promise((r) => setImmediate(r));
    }
    res.end();
  });
});

beforeAll(async () => {
  await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', r));
  upstreamUrl = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`;
  vigil = await testVigil({
    backend: 'memory',
    overlay: {
      modes: { mode: 'auto_limit_context', auto_limit_context: { mechanism: 'cap', max_context_tokens: 1000 } },
    },
  });
  vigil.registry.sensors.set(codexSensor.name, codexSensor);
  router = Fastify({ bodyLimit: 8 << 20 });
  await router.register(vigilGate, { vigil });
  // A provider's base_url: the body goes on as it is now (a cap may have cut it).
  router.post('/v1/responses', async (req, reply) => {
    const r = await fetch(`${upstreamUrl}/v1/responses`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(req.body),
    });
    return reply
      .code(r.status)
      .type(r.headers.get('content-type') ?? '')
      .send(r.body);
  });
  routerUrl = await router.listen({ host: '127.0.0.1', port: 0 });
});

afterAll(async () => {
  await router?.close();
  await vigil?.close();
  upstream.close();
});

const tools = [{ type: 'function', name: 'exec_command', parameters: {} }];
const user = (text: string) => ({ type: 'message', role: 'user', content: [{ type: 'input_text', text }] });

/** What Codex sends: its thread in thread-id (and session-id), a subagent's parent in x-codex-parent-thread-id. */
async function ask(thread: string, body: Record<string, unknown>, parent?: string) {
  return fetch(`${routerUrl}/v1/responses`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      'session-id': thread,
      'thread-id': thread,
      ...(parent ? { 'x-codex-parent-thread-id': parent } : {}),
    },
    body: JSON.stringify({ model: 'gpt-5.5', instructions: 'short', stream: true, tools, ...body }),
  });
}

const row = (id: string) => vigil.engine.sessionRow(id) as Promise<SessionRow & Record<string, unknown>>;

describe('usage from Responses API answers', () => {
  it('a streamed answer: the id and model from response.created, usage and finish from response.completed', () => {
    const f = sseFacts(stream('resp_a', true));
    expect(f).toMatchObject({ id: 'resp_a', model: 'gpt-5.5-codex', finish_reason: 'tool_calls', visible: true });
    expect(f.usage).toMatchObject({ prompt_tokens: 5000, cached_tokens: 4000, completion_tokens: 42 });
    expect(sseFacts(stream('resp_b', false)).finish_reason).toBe('stop');
  });

  it('a JSON answer, an incomplete one and a failed one', () => {
    const j = jsonFacts(JSON.stringify(response({ id: 'resp_j', status: 'completed', output: [CALL], usage: USAGE })));
    expect(j).toMatchObject({ id: 'resp_j', finish_reason: 'tool_calls', visible: true });
    expect(j?.usage?.prompt_tokens).toBe(5000);
    const inc = jsonFacts(
      JSON.stringify({
        ...response({ id: 'resp_i', status: 'incomplete', output: [], usage: USAGE }),
        incomplete_details: { reason: 'max_output_tokens' },
      }),
    );
    expect(inc?.finish_reason).toBe('max_output_tokens');
    const failed = sseFacts(
      `event: response.failed\ndata: ${JSON.stringify({
        type: 'response.failed',
        response: { ...response({ id: 'resp_f', status: 'failed', output: [] }), error: { code: 'server_error' } },
      })}\n\n`,
    );
    expect(failed.error_code).toBe('server_error');
  });
});

describe('vigilGate in front of Codex (POST /v1/responses)', () => {
  it("records the streamed answer's usage under Codex's thread, a subagent's under its parent", async () => {
    const r = await ask('thr_codex_root', { input: [user('go')] });
    expect(r.status).toBe(200);
    const text = await r.text();
    expect(text).toContain('"response.completed"');
    const root = await eventually(async () => {
      const s = await row('thr_codex_root');
      return s?.context_tokens === 5000 ? s : undefined;
    });
    expect(root?.models).toEqual(['gpt-5.5-codex']);

    await (await ask('thr_codex_child', { input: [user('look')] }, 'thr_codex_root')).text();
    const child = await eventually(async () => {
      const s = await row('thr_codex_child');
      return s?.context_tokens === 5000 ? s : undefined;
    });
    expect(child?.parent).toBe('thr_codex_root');
  });

  describe('the cap on a looping Codex thread', () => {
    const conv = 'thr_codex_capped';
    /** Codex's input: its developer and context messages, the task, then `turns` of reasoning, a call and its output. */
    const history = (turns: number, parallel = false) => [
      { type: 'message', role: 'developer', content: [{ type: 'input_text', text: 'permissions' }] },
      user('<environment_context>/w</environment_context>'),
      user('Fix the check.'),
      ...Array.from({ length: turns }, (_, i) => [
        { type: 'reasoning', summary: [], encrypted_content: 'e'.repeat(40) },
        { type: 'function_call', call_id: `c${i}`, name: 'exec_command', arguments: '{"cmd":"cat src/app.js"}' },
        ...(parallel ? [{ type: 'function_call', call_id: `p${i}`, name: 'exec_command', arguments: '{}' }] : []),
        { type: 'function_call_output', call_id: `c${i}`, output: 'x'.repeat(300) },
        ...(parallel ? [{ type: 'function_call_output', call_id: `p${i}`, output: 'y'.repeat(50) }] : []),
      ]).flat(),
    ];

    beforeAll(async () => {
      await loopSession(vigil, conv);
      expect(await vigil.gate({ conversation: conv })).toMatchObject({ action: 'limit', max_context_tokens: 1000 });
    });

    it('cuts the oldest turns of its input; the head and every call with its output are kept', async () => {
      const before = upstreamBodies.length;
      const r = await ask(conv, { input: history(30) });
      expect(r.status).toBe(200);
      const cut = Number(r.headers.get('x-vigil-context-cut'));
      expect(cut).toBeGreaterThan(0);
      await r.text();
      const sent = upstreamBodies[before];
      expect(JSON.stringify(sent).length / 4).toBeLessThanOrEqual(1000);
      const items = sent.input as { type: string; role?: string; call_id?: string }[];
      expect(items.slice(0, 3).map((i) => i.role)).toEqual(['developer', 'user', 'user']);
      // each turn (reasoning, call, output) went whole
      expect(items[3]?.type).toBe('reasoning');
      expect(items.at(-1)).toMatchObject({ type: 'function_call_output', call_id: 'c29' });
      expect(items.length).toBe(3 + 3 * (30 - cut));
    });

    it('keeps parallel calls with their outputs', () => {
      const r = capBody({ tools, input: history(30, true) }, 1000);
      if (r.kind !== 'cut') throw new Error(`not cut: ${r.kind}`);
      const items = r.body.input as { type: string; call_id?: string }[];
      const calls = new Set(items.filter((i) => i.type === 'function_call').map((i) => i.call_id));
      const outputs = items.filter((i) => i.type === 'function_call_output').map((i) => i.call_id);
      expect(outputs.length).toBeGreaterThan(0);
      expect(outputs.every((c) => calls.has(c))).toBe(true);
      expect(items[3]?.type).toBe('reasoning');
    });

    it('answers an OpenAI context-overflow error when even the newest turn is over the cap', async () => {
      const r = await ask(conv, { input: [user('y'.repeat(10_000))] });
      expect(r.status).toBe(400);
      expect((await r.json()).error).toMatchObject({ code: 'context_length_exceeded', param: 'input' });
    });
  });
});
