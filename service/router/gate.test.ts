import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Readable } from 'node:stream';
import Fastify, { type FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { SessionRow } from '../../core/engine.ts';
import type { Vigil } from '../../core/vigil.ts';
import { ANTHROPIC_STREAM, OPENAI_STREAM } from '../../test/fixtures/answers.ts';
import { eventually, loopSession, testVigil } from '../../test/helpers/index.ts';
import { vigilGate } from '../router.ts';

// The gate between a client and a streaming upstream, all over real HTTP: the upstream
// writes SSE in pieces, the router forwards it the ways routers do (a web stream, a
// Node stream, a fetch Response, the whole text), and the client reads it as it comes.
// The client must get the first piece while the upstream still holds the rest (the tap
// holds nothing back), and the usage, model and cost of the finished stream must reach
// the judge.

let vigil: Vigil;
let router: FastifyInstance;
let routerUrl = '';
let upstreamUrl = '';
const upstreamBodies: { messages?: unknown[] }[] = [];
/** Per conversation: the upstream holds the rest of its answer until this resolves. */
const holds = new Map<string, Promise<void>>();
const upstream = createServer((req, res) => {
  let raw = '';
  req.on('data', (c) => (raw += c));
  req.on('end', async () => {
    upstreamBodies.push(JSON.parse(raw || '{}'));
    const conv = String(req.headers['x-session-id']);
    const kind = new URL(req.url ?? '/', 'http://x').searchParams.get('answer') ?? 'openai';
    if (kind === 'json') {
      res.writeHead(200, { 'content-type': 'application/json' });
      return res.end(
        JSON.stringify({
          id: 'msg_json',
          type: 'message',
          model: 'claude-json',
          content: [{ type: 'text', text: 'ok' }],
          stop_reason: 'end_turn',
          usage: { input_tokens: 321, output_tokens: 4 },
        }),
      );
    }
    const text = kind === 'anthropic' ? ANTHROPIC_STREAM : OPENAI_STREAM;
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
    if (kind === 'broken') {
      // the first event, then the connection drops
      res.write(text.slice(0, text.indexOf('\n\n') + 2));
      setTimeout(() => res.destroy(), 20);
      return;
    }
    await streamInTwo(res, text, holds.get(conv));
  });
});

/** Writes the first event, waits for `hold`, then the rest split inside a line and a UTF-8 character. */
async function streamInTwo(res: ServerResponse, text: string, hold: Promise<void> | undefined) {
  const buf = Buffer.from(text, 'utf8');
  const first = buf.indexOf('\n\n') + 2;
  res.write(buf.subarray(0, first));
  await hold;
  const mid = first + Math.floor((buf.length - first) / 2);
  res.write(buf.subarray(first, mid));
  res.end(buf.subarray(mid));
}

const fetchUpstream = (req: { headers: Record<string, unknown>; body: unknown }, answer: string) =>
  fetch(`${upstreamUrl}/v1/chat/completions?answer=${answer}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-session-id': String(req.headers['x-session-id']) },
    body: JSON.stringify(req.body),
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
  router = Fastify();
  await router.register(vigilGate, {
    vigil,
    costOf: (_model, u) => (u.prompt_tokens * 3 + u.completion_tokens * 15) / 1e6,
  });
  // Four ways a router forwards the upstream's answer.
  router.post('/web/v1/chat/completions', async (req, reply) => {
    const r = await fetchUpstream(req, String((req.query as { answer?: string }).answer ?? 'openai'));
    return reply
      .code(r.status)
      .type(r.headers.get('content-type') ?? 'application/json')
      .send(r.body);
  });
  router.post('/node/v1/chat/completions', async (req, reply) => {
    const r = await fetchUpstream(req, String((req.query as { answer?: string }).answer ?? 'openai'));
    return reply
      .code(r.status)
      .type(r.headers.get('content-type') ?? '')
      .send(Readable.fromWeb(r.body as never));
  });
  router.post('/response/v1/messages', async (req) => fetchUpstream(req, 'anthropic'));
  router.post('/text/v1/chat/completions', async (req, reply) => {
    const r = await fetchUpstream(req, 'openai');
    return reply.type('text/event-stream').send(await r.text());
  });
  routerUrl = await router.listen({ host: '127.0.0.1', port: 0 });
});

afterAll(async () => {
  await router?.close();
  await vigil?.close();
  upstream.close();
});

/** POST through the router; resolves with the status, headers and a reader of the body. */
async function ask(path: string, conversation: string, body: Record<string, unknown> = {}) {
  const r = await fetch(`${routerUrl}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-session-id': conversation },
    body: JSON.stringify({ model: 'asked/model', stream: true, messages: [{ role: 'user', content: 'go' }], ...body }),
  });
  return r;
}

/** Reads the stream until `needle` has arrived; returns what came so far and the reader. */
async function readUntil(r: Response, needle: string) {
  const reader = (r.body as ReadableStream<Uint8Array>).getReader();
  const dec = new TextDecoder();
  let got = '';
  while (!got.includes(needle)) {
    const { value, done } = await reader.read();
    if (done) break;
    got += dec.decode(value, { stream: true });
  }
  const rest = async () => {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return got;
      got += dec.decode(value, { stream: true });
    }
  };
  return { got, rest };
}

const row = (id: string) => vigil.engine.sessionRow(id) as Promise<SessionRow & Record<string, unknown>>;

describe('vigilGate with a streaming upstream', () => {
  for (const path of ['/web/v1/chat/completions', '/node/v1/chat/completions']) {
    it(`passes each piece on at once and records usage, model and cost (${path.split('/')[1]} stream)`, async () => {
      const conv = `ses_${path.split('/')[1]}`;
      let release!: () => void;
      holds.set(
        conv,
        new Promise<void>((r) => {
          release = r;
        }),
      );
      const r = await ask(path, conv);
      expect(r.status).toBe(200);
      expect(r.headers.get('content-type')).toContain('text/event-stream');
      // The first event arrives while the upstream still holds the rest.
      const { got, rest } = await readUntil(r, '\n\n');
      expect(got).toContain('"role":"assistant"');
      expect(got).not.toContain('"usage"');
      release();
      const all = await rest();
      expect(all).toBe(OPENAI_STREAM);
      const x = await eventually(async () => {
        const s = await row(conv);
        return s?.context_tokens === 1200 ? s : undefined;
      });
      expect(x?.models).toEqual(['gpt-x']);
      expect(x?.usd_since_landed).toBeCloseTo((1200 * 3 + 30 * 15) / 1e6, 9);
    });
  }

  it('a fetch Response returned as is (Anthropic events): status and type kept, usage recorded', async () => {
    const r = await ask('/response/v1/messages', 'ses_resp');
    expect(r.status).toBe(200);
    expect(r.headers.get('content-type')).toBe('text/event-stream');
    expect(await r.text()).toBe(ANTHROPIC_STREAM);
    const x = await eventually(async () => {
      const s = await row('ses_resp');
      return s?.context_tokens === 2125 ? s : undefined;
    });
    expect(x?.models).toEqual(['claude-x']);
    expect(x?.usd_since_landed).toBeCloseTo((2125 * 3 + 42 * 15) / 1e6, 9);
  });

  for (const path of ['/web/v1/chat/completions', '/node/v1/chat/completions']) {
    it(`an upstream that drops part way ends the client's stream; nothing is recorded (${path.split('/')[1]})`, async () => {
      const conv = `ses_broken_${path.split('/')[1]}`;
      const r = await ask(`${path}?answer=broken`, conv);
      expect(r.status).toBe(200);
      await expect(r.text()).rejects.toThrow();
      // The router goes on serving.
      expect((await ask(path, `${conv}_after`)).status).toBe(200);
      expect((await row(conv))?.context_tokens ?? 0).toBe(0);
    });
  }

  it('an SSE answer sent as one string, and a JSON answer, are recorded too', async () => {
    expect(await (await ask('/text/v1/chat/completions', 'ses_text')).text()).toBe(OPENAI_STREAM);
    await eventually(async () => (await row('ses_text'))?.context_tokens === 1200);
    const j = await ask('/web/v1/chat/completions?answer=json', 'ses_json', { stream: false });
    expect((await j.json()).model).toBe('claude-json');
    const x = await eventually(async () => {
      const s = await row('ses_json');
      return s?.context_tokens === 321 ? s : undefined;
    });
    expect(x?.models).toEqual(['claude-json']);
  });
});

describe('the cap (action limit, mechanism cap) enforced by the gate', () => {
  const conv = 'ses_capped';
  const tools = [{ type: 'function', function: { name: 'read', parameters: {} } }];
  /** A conversation of `turns` tool-call turns of about 400 bytes each. */
  const history = (turns: number) => [
    { role: 'system', content: 'You are an agent.' },
    { role: 'user', content: 'Fix the navbar.' },
    ...Array.from({ length: turns }, (_, i) => [
      {
        role: 'assistant',
        content: null,
        tool_calls: [{ id: `c${i}`, type: 'function', function: { name: 'read', arguments: '{}' } }],
      },
      { role: 'tool', tool_call_id: `c${i}`, content: 'x'.repeat(300) },
    ]).flat(),
  ];

  beforeAll(async () => {
    // The session loops (identical reads): auto_limit_context caps it at 1000 tokens.
    await loopSession(vigil, conv);
    expect(await vigil.gate({ conversation: conv })).toMatchObject({
      action: 'limit',
      limit_mechanism: 'cap',
      max_context_tokens: 1000,
    });
  });

  it('cuts the oldest turns of an over-cap agent turn; the upstream gets the cut body', async () => {
    const before = upstreamBodies.length;
    const r = await ask('/web/v1/chat/completions', conv, { tools, messages: history(30) });
    expect(r.status).toBe(200);
    const cut = Number(r.headers.get('x-vigil-context-cut'));
    expect(cut).toBeGreaterThan(0);
    await r.text();
    const sent = upstreamBodies[before];
    expect(JSON.stringify(sent).length / 4).toBeLessThanOrEqual(1000);
    const msgs = sent.messages as { role: string; tool_call_id?: string; tool_calls?: { id: string }[] }[];
    expect(msgs.slice(0, 2).map((m) => m.role)).toEqual(['system', 'user']);
    expect(msgs.at(-1)).toMatchObject({ role: 'tool', tool_call_id: 'c29' });
    // No tool result without its call.
    const calls = new Set(msgs.flatMap((m) => m.tool_calls?.map((c) => c.id) ?? []));
    expect(msgs.filter((m) => m.role === 'tool').every((m) => calls.has(m.tool_call_id ?? ''))).toBe(true);
    expect(msgs.length).toBe(2 + 2 * (30 - cut));
  });

  it('answers a context-overflow error when even the newest turn is over the cap; no-tool requests pass whole', async () => {
    const huge = [{ role: 'user', content: 'y'.repeat(10_000) }];
    const r = await ask('/web/v1/chat/completions', conv, { tools, messages: huge });
    expect(r.status).toBe(400);
    expect((await r.json()).error.code).toBe('context_length_exceeded');
    const before = upstreamBodies.length;
    const c = await ask('/web/v1/chat/completions', conv, { messages: history(30) });
    expect(c.status).toBe(200);
    await c.text();
    expect(upstreamBodies[before].messages).toHaveLength(62);
  });
});
