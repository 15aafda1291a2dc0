import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import Fastify, { type FastifyInstance } from 'fastify';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createRegistry } from '../builtins.ts';
import { FakeClock } from '../core/clock.ts';
import type { Vigil } from '../core/vigil.ts';
import type { MoneyDetector } from '../detectors/money/index.ts';
import { vigilGate } from '../service/router.ts';
import { behaviour, eventually, recordingPlugin, testVigil } from './helpers/index.ts';

// Budgets through the fastify plugin a router embeds (vigilGate), driven as a router
// drives it: model requests to a fake OpenAI-compatible upstream whose answers report
// usage and cost; the plugin records each answer, the money detector counts it, and the
// gate refuses a tree past its ceiling in an acting mode. A test clock moves the day.

let upstream: Server;
let upstreamUrl = '';
const served: Record<string, number> = {};
/** What the upstream reports per call: cost (or none) and prompt tokens. */
let usage: { prompt_tokens: number; cost?: number } = { prompt_tokens: 40_000, cost: 0.03 };

beforeAll(async () => {
  upstream = createServer((req, res) => {
    let body = '';
    req.on('data', (d) => (body += d));
    req.on('end', () => {
      const conv = String(req.headers['x-conv']);
      served[conv] = (served[conv] ?? 0) + 1;
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({
          id: `chatcmpl-${conv}-${served[conv]}-${Math.random().toString(36).slice(2, 8)}`,
          object: 'chat.completion',
          model: JSON.parse(body).model,
          choices: [{ index: 0, message: { role: 'assistant', content: 'working' }, finish_reason: 'stop' }],
          usage: { completion_tokens: 30, ...usage },
        }),
      );
    });
  });
  await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', r));
  upstreamUrl = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`;
});
afterAll(() => upstream.close());

interface Rig {
  vigil: Vigil;
  router: FastifyInstance;
  clock: FakeClock;
  rec: ReturnType<typeof behaviour>;
}
const rigs: Rig[] = [];
afterEach(async () => {
  for (const r of rigs.splice(0)) {
    await r.router.close();
    await r.vigil.close();
  }
});

async function rig(mode: string, budgets: Record<string, unknown>): Promise<Rig> {
  const clock = new FakeClock(Date.parse('2026-09-26T21:00:00Z'));
  const rec = behaviour();
  const vigil = await testVigil({
    backend: 'memory',
    clock,
    registry: createRegistry().register(recordingPlugin(rec)),
    channels: [{ name: 'rec', type: 'recording', min_severity: 'info', quiet_window: 0 }],
    overlay: { modes: { mode }, money: { budgets } },
  });
  const router = Fastify();
  await router.register(vigilGate, { vigil });
  router.post('/v1/chat/completions', async (req, reply) => {
    const r = await fetch(`${upstreamUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-conv': String(req.headers['x-router-conversation']) },
      body: JSON.stringify(req.body),
    });
    return reply
      .code(r.status)
      .type('application/json')
      .send(await r.text());
  });
  await router.ready();
  const x = { vigil, router, clock, rec };
  rigs.push(x);
  return x;
}

/**
 * One model request of `conversation` (in the tree under `parent`, if any) through the
 * router; waits until the plugin's record of it has been counted (it records without
 * blocking the response), unless the gate refused it.
 */
async function ask(r: Rig, conversation: string, parent?: string) {
  const counted = once(r.vigil.events, 'request');
  const res = await r.router.inject({
    method: 'POST',
    url: '/v1/chat/completions',
    headers: {
      'x-router-conversation': conversation,
      'x-router-agent': 'sisyphus-junior',
      ...(parent ? { 'x-router-parent': parent } : {}),
    },
    payload: { model: 'z-ai/glm-5.3-flash', messages: [{ role: 'user', content: 'go on' }] },
  });
  if (res.statusCode !== 429) await counted;
  return res;
}

/** The blocks pending for the sensor of a tree (what the opencode plugin refuses tool calls by). */
const blocks = async (r: Rig, root: string) =>
  (await r.vigil.engine.directives.pending(root))
    .filter((d) => d.type === 'block')
    .map((d) => ({ scope: d.scope, session_id: d.session_id, reason: d.reason }));

const titles = (r: Rig) => r.rec.sent.map((a) => `${a.state} ${a.severity} ${a.title}`);
/** Waits until the channel got an alert with this `state severity title` (`n` of them). */
const delivered = (r: Rig, line: string, n = 1) =>
  eventually(() => titles(r).filter((t) => t === line).length === n, 5_000).catch(() => {
    throw new Error(`no "${line}" (x${n}) among ${JSON.stringify(titles(r))}`);
  });

describe('budgets through the fastify plugin (vigilGate)', () => {
  it('a tree past its dollar ceiling is refused while a sibling tree passes; Resume lifts it; the next day resets it', async () => {
    usage = { prompt_tokens: 40_000, cost: 0.03 };
    const r = await rig('auto_recover', { warn_at: 0.8, tree: { usd: 0.1 } });
    // Tree A: its root and a worker under it share the tree's budget.
    expect((await ask(r, 'ses_a_root')).statusCode).toBe(200);
    expect((await ask(r, 'ses_a_worker', 'ses_a_root')).statusCode).toBe(200);
    expect((await ask(r, 'ses_a_worker', 'ses_a_root')).statusCode).toBe(200); // $0.09: past 80%
    await delivered(r, 'trigger warning budget warning: tree ses_a_root');
    expect((await ask(r, 'ses_a_worker', 'ses_a_root')).statusCode).toBe(200); // $0.12: over
    await delivered(r, 'escalate critical budget ceiling reached: tree ses_a_root');

    const before = served.ses_a_worker;
    const refused = await ask(r, 'ses_a_worker', 'ses_a_root');
    expect(refused.statusCode).toBe(429);
    expect(refused.json().error).toMatchObject({ code: 'vigil_refused', type: 'rate_limit_error' });
    expect(refused.json().error.message).toBe(
      'vigil: budget: tree ses_a_root over its ceiling on 2026-09-26: $0.12 of $0.10 (120%)',
    );
    // Until the next day starts (00:00 UTC): three hours away.
    expect(refused.headers['retry-after']).toBe(String(3 * 3600));
    expect(served.ses_a_worker).toBe(before); // nothing more spent
    // The whole tree: its root too.
    expect((await ask(r, 'ses_a_root')).statusCode).toBe(429);
    // And at the sensor, for a session that asks no router: the opencode plugin is told to block the tree's tool calls.
    expect(await blocks(r, 'ses_a_root')).toEqual([
      {
        scope: 'tree',
        session_id: 'ses_a_root',
        reason: 'budget: tree ses_a_root over its ceiling on 2026-09-26: $0.12 of $0.10 (120%)',
      },
    ]);

    // A sibling tree has its own budget.
    expect((await ask(r, 'ses_b_root')).statusCode).toBe(200);
    expect((await ask(r, 'ses_b_worker', 'ses_b_root')).statusCode).toBe(200);

    // Beside the session: the tree's spend against its ceiling.
    const row = (await r.vigil.engine.sessionRows()).find((x) => x.session === 'ses_a_worker');
    expect(row).toMatchObject({ budget: 'tree $0.12/$0.10 120%', budget_level: 'over', verdict: 'ok' });

    // Resume: the tree counts afresh from here (and its incident resolves).
    await r.vigil.engine.resume('ses_a_root', 'operator');
    await delivered(r, 'resolve critical budget ceiling reached: tree ses_a_root');
    expect(await blocks(r, 'ses_a_root')).toEqual([]); // the Resume's lift took the block with it
    expect((await ask(r, 'ses_a_worker', 'ses_a_root')).statusCode).toBe(200);
    for (let i = 0; i < 3; i++) expect((await ask(r, 'ses_a_worker', 'ses_a_root')).statusCode).toBe(200);
    // Another $0.12 since the Resume: over again, blocked again.
    expect((await ask(r, 'ses_a_worker', 'ses_a_root')).statusCode).toBe(429);
    expect(await blocks(r, 'ses_a_root')).toHaveLength(1);

    // The day boundary (the test clock): a new day's budget; yesterday's incidents resolve on the tick.
    r.clock.set(Date.parse('2026-09-27T00:00:01Z'));
    expect((await ask(r, 'ses_a_worker', 'ses_a_root')).statusCode).toBe(200);
    await r.vigil.engine.tick();
    await delivered(r, 'resolve critical budget ceiling reached: tree ses_a_root', 2);
    expect(await blocks(r, 'ses_a_root')).toEqual([]);
    expect(
      (await r.vigil.engine.directives.pending('ses_a_root')).filter((d) => d.type === 'lift').at(-1),
    ).toMatchObject({ scope: 'tree', reason: 'budget: 2026-09-26 is over' });
    const money = r.vigil.detector<MoneyDetector>('money');
    expect(await money.budgets()).toMatchObject({ day: '2026-09-27', total: { usd: 0.03 }, raised: {} });
  });

  it('in warn mode a tree past its ceiling is alerted, not refused', async () => {
    usage = { prompt_tokens: 40_000, cost: 0.05 };
    const r = await rig('warn', { tree: { usd: 0.1 } });
    for (let i = 0; i < 3; i++) expect((await ask(r, 'ses_w')).statusCode).toBe(200);
    // $0.10 at the second call: over at once, so the first alert is the critical one.
    await delivered(r, 'trigger critical budget ceiling reached: tree ses_w');
    expect((await ask(r, 'ses_w')).statusCode).toBe(200);
    expect(await blocks(r, 'ses_w')).toEqual([]);
  });

  it('from what a sensor reports alone (assistant events, no router): tokens count and the tree is blocked at the sensor', async () => {
    const r = await rig('auto_recover', { tree: { prompt_tokens: 150_000 } });
    const step = (i: number) => ({
      kind: 'assistant' as const,
      session_id: 'ses_plugin_only',
      agent: 'build',
      call_id: `msg_${i}`,
      model: 'anthropic/claude-sonnet-5',
      input_tokens: 5_000,
      cache_read_tokens: 55_000,
      visible_output: true,
      ts: r.clock.advance(5_000),
    });
    await r.vigil.progress([step(1), step(2)]);
    expect(await blocks(r, 'ses_plugin_only')).toEqual([]);
    await r.vigil.progress(step(3)); // 180k prompt tokens
    expect(await blocks(r, 'ses_plugin_only')).toEqual([
      {
        scope: 'tree',
        session_id: 'ses_plugin_only',
        reason: 'budget: tree ses_plugin_only over its ceiling on 2026-09-26: 180k of 150k prompt tokens (120%)',
      },
    ]);
    // The same answer at the gate, for a router that asks.
    expect(await r.vigil.gate({ conversation: 'ses_plugin_only' })).toMatchObject({ action: 'refuse', status: 429 });
  });

  it('with no cost reported, prompt tokens count: the per-agent and overall ceilings', async () => {
    usage = { prompt_tokens: 100_000 };
    const r = await rig('auto_recover', { agent: { prompt_tokens: 250_000 } });
    expect((await ask(r, 'ses_t1')).statusCode).toBe(200);
    expect((await ask(r, 'ses_t2')).statusCode).toBe(200);
    expect((await ask(r, 'ses_t3')).statusCode).toBe(200); // 300k for the agent
    const res = await ask(r, 'ses_t4'); // any tree of that agent
    expect(res.statusCode).toBe(429);
    expect(res.json().error.message).toBe(
      'vigil: budget: agent sisyphus-junior over its ceiling on 2026-09-26: 300k of 250k prompt tokens (120%)',
    );
    // Resume of one tree lets it past the shared ceiling for the day; the others stay refused.
    await r.vigil.engine.resume('ses_t1', 'operator');
    expect((await ask(r, 'ses_t1')).statusCode).toBe(200);
    expect((await ask(r, 'ses_t2')).statusCode).toBe(429);
  });
});
