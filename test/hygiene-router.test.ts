import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import Fastify from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRegistry } from '../builtins.ts';
import type { Vigil } from '../core/vigil.ts';
import { vigilGate } from '../service/router.ts';
import { behaviour, eventually, recordingPlugin, testVigil } from './helpers/index.ts';

// A fastify router embedding the gate plugin in front of a fake OpenAI-compatible
// upstream. The upstream answers one conversation with an empty completion (no text, no
// tool call) after its first call; the router reports each call's outcome
// (visible_output, finish_reason, completion tokens) with vigil.requests(), as a
// streaming router does. The empty generation is a critical alert at once, and in an
// acting mode the conversation's retries are refused with a scoped 429 before they
// reach the upstream, while its sibling goes on.

let upstream: Server;
let upstreamUrl: string;
const calls: Record<string, number> = {};
let vigil: Vigil;
const rec = behaviour();
const router = Fastify();

beforeAll(async () => {
  upstream = createServer((req, res) => {
    let body = '';
    req.on('data', (d) => (body += d));
    req.on('end', () => {
      const conv = String(req.headers['x-session-id']);
      calls[conv] = (calls[conv] ?? 0) + 1;
      const empty = conv === 'ses_dead' && calls[conv] > 1;
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({
          id: `chatcmpl-${conv}-${calls[conv]}`,
          object: 'chat.completion',
          model: JSON.parse(body).model,
          choices: [
            {
              index: 0,
              message: { role: 'assistant', content: empty ? '' : 'here is the answer' },
              finish_reason: 'stop',
            },
          ],
          usage: { prompt_tokens: 60_000 + calls[conv], completion_tokens: empty ? 0 : 40 },
        }),
      );
    });
  });
  await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', r));
  upstreamUrl = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`;

  vigil = await testVigil({
    backend: 'memory',
    registry: createRegistry().register(recordingPlugin(rec)),
    channels: [{ name: 'rec', type: 'recording', min_severity: 'info', quiet_window: 0 }],
    overlay: { modes: { mode: 'auto_recover' } },
  });
  await router.register(vigilGate, { vigil });
  router.post('/v1/chat/completions', async (req, reply) => {
    const r = await fetch(`${upstreamUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-session-id': String(req.headers['x-session-id']) },
      body: JSON.stringify(req.body),
    });
    const text = await r.text();
    const out = JSON.parse(text);
    const msg = out.choices?.[0]?.message ?? {};
    const g = req.vigilGate!;
    // The outcome of the call (sizes and codes only), under the upstream's id.
    await vigil.requests({
      session_id: g.query.conversation,
      request_id: out.id,
      model: out.model,
      prompt_tokens: out.usage.prompt_tokens,
      completion_tokens: out.usage.completion_tokens,
      visible_output: (typeof msg.content === 'string' && msg.content.length > 0) || Boolean(msg.tool_calls?.length),
      finish_reason: out.choices?.[0]?.finish_reason,
      status: r.status,
      ts: Date.now(),
    });
    return reply.code(r.status).type('application/json').send(text);
  });
  await router.ready();
});

afterAll(async () => {
  await router.close();
  await vigil.close();
  upstream.close();
});

const ask = (conversation: string) =>
  router.inject({
    method: 'POST',
    url: '/v1/chat/completions',
    headers: { 'x-session-id': conversation },
    payload: { model: 'route/long-context-model', messages: [{ role: 'user', content: 'go on' }] },
  });

describe('a router embedding the gate, upstream returning an empty generation', () => {
  it('one critical alert; the retry is refused with a 429 before the upstream, the sibling goes on', async () => {
    expect((await ask('ses_dead')).statusCode).toBe(200); // a real answer
    expect((await ask('ses_dead')).statusCode).toBe(200); // the empty generation reaches the client once
    expect(calls.ses_dead).toBe(2);

    const retry = await ask('ses_dead');
    expect(retry.statusCode).toBe(429);
    expect(retry.json().error.code).toBe('vigil_refused');
    expect(retry.json().error.message).toMatch(/empty generation.*re-ask in a fresh session/);
    expect(Number(retry.headers['retry-after'])).toBeGreaterThan(0);
    expect(calls.ses_dead).toBe(2); // nothing more spent re-sending the dead prefix

    for (let i = 0; i < 3; i++) expect((await ask('ses_sibling')).statusCode).toBe(200);
    expect(calls.ses_sibling).toBe(3);

    await eventually(() => rec.sent.some((a) => a.dedup_key === 'session-hygiene:ses_dead'));
    const mine = rec.sent.filter((a) => a.dedup_key.startsWith('session-hygiene:'));
    expect(mine.map((a) => [a.dedup_key, a.state, a.severity])).toEqual([
      ['session-hygiene:ses_dead', 'trigger', 'critical'],
    ]);
    expect(mine[0].summary).toMatch(/^empty generation/);
    const rows = await vigil.engine.sessionRows();
    expect(rows.find((r) => r.session === 'ses_dead')).toMatchObject({ hygiene_rule: 'empty_generation' });
    expect(rows.find((r) => r.session === 'ses_sibling')).toMatchObject({ hygiene_level: 'ok' });
  });
});
