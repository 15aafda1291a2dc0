import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import Fastify from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Vigil } from '../core/vigil.ts';
import { defaultKnobs } from '../detectors/no-progress/knobs.ts';
import { normalizeCall } from '../sensors/shared/normalize.ts';
import { vigilGate } from '../service/router.ts';
import { testVigil } from './helpers/index.ts';

// A small fastify "router" embeds the Vigil plugin and proxies model requests to a fake
// OpenAI-compatible upstream. One conversation loops (the real judge, fed by progress
// events and by the usage the plugin records); with auto_recover it is refused with a
// scoped 429 while its sibling in the same working directory goes on.

let upstream: Server;
let upstreamUrl: string;
let upstreamCalls = 0;
let vigil: Vigil;
const router = Fastify();

beforeAll(async () => {
  upstream = createServer((req, res) => {
    let body = '';
    req.on('data', (d) => (body += d));
    req.on('end', () => {
      upstreamCalls++;
      const model = JSON.parse(body).model;
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({
          id: `chatcmpl-${upstreamCalls}`,
          object: 'chat.completion',
          model,
          choices: [{ index: 0, message: { role: 'assistant', content: 'reading again' }, finish_reason: 'stop' }],
          usage: { prompt_tokens: 120_000, completion_tokens: 20, total_tokens: 120_020, cost: 0.03 },
        }),
      );
    });
  });
  await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', r));
  upstreamUrl = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`;

  vigil = await testVigil({ backend: 'memory', overlay: { modes: { mode: 'auto_recover' } } });
  await router.register(vigilGate, { vigil });
  router.post('/v1/chat/completions', async (req, reply) => {
    const r = await fetch(`${upstreamUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(req.body),
    });
    return reply
      .code(r.status)
      .type('application/json')
      .send(await r.text());
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
    headers: { 'x-session-id': conversation, 'x-router-parent': 'ses_atlas', 'x-router-agent': 'sisyphus-junior' },
    payload: { model: 'z-ai/glm-5.3-flash', messages: [{ role: 'user', content: 'continue' }] },
  });

describe('a router embedding the fastify plugin', () => {
  it('refuses only the looping conversation with a 429; its sibling goes on', async () => {
    const read = normalizeCall('read', { filePath: '/work/cwd/admin/frontend/navbar.js' }, { cwd: '/work/cwd' });
    let refusedAt = -1;
    for (let i = 0; i < 200 && refusedAt < 0; i++) {
      const r = await ask('ses_loop');
      if (r.statusCode === 429) {
        refusedAt = i;
        expect(r.headers['retry-after']).toBe('30');
        expect(r.json().error.code).toBe('vigil_refused');
        break;
      }
      expect(r.statusCode).toBe(200);
      // The plugin in opencode reports the tool call the model asked for: the same read.
      await vigil.engine.progress([
        {
          kind: 'tool',
          session_id: 'ses_loop',
          parent_session_id: 'ses_atlas',
          agent: 'sisyphus-junior',
          tool: 'read',
          call_id: `call_${i}`,
          fingerprint: read.fingerprint,
          target: read.target,
          exit: 0,
          landed: false,
          ts: Date.now(),
        },
      ]);
    }
    // An unbroken run of identical reads is a loop early (the identical-run rule).
    expect(refusedAt).toBeGreaterThanOrEqual(defaultKnobs().lookup_run_loop);
    const before = upstreamCalls;
    expect((await ask('ses_loop')).statusCode).toBe(429);
    expect(upstreamCalls).toBe(before); // nothing more spent on the stuck conversation

    const sibling = await ask('ses_sibling');
    expect(sibling.statusCode).toBe(200);
    expect(upstreamCalls).toBe(before + 1);
    const rows = await vigil.engine.sessionRows();
    const loop = rows.find((r) => r.session === 'ses_loop');
    expect(loop).toMatchObject({ verdict: 'looping', root: 'ses_atlas', stage: 1, refused: true });
    expect(loop?.models).toEqual(['z-ai/glm-5.3-flash']);
    expect(rows.find((r) => r.session === 'ses_sibling')).toMatchObject({ verdict: 'ok', refused: false });
  });
});
