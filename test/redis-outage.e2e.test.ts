import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import Fastify from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Vigil } from '../core/vigil.ts';
import { vigilGate } from '../service/router.ts';
import { type App, buildServer } from '../service/server.ts';
import { needsRedisServer } from './helpers/external.ts';
import { testVigil } from './helpers/index.ts';
import { TestRedis } from './helpers/redis-server.ts';

// Redis goes away under a running service: /health says so at once, ingestion answers
// 503 with Retry-After (the plugin keeps its buffer and resends), and the router gate
// fails open (gate.on_error: allow), counted, so the model path never stops. When
// Redis is back, everything works again.

describe.runIf(needsRedisServer(import.meta.filename))('a Redis outage', () => {
  let redis: TestRedis;
  let vigil: Vigil;
  let app: App;
  let upstream: Server;
  let router: ReturnType<typeof Fastify>;

  beforeAll(async () => {
    redis = await TestRedis.start();
    vigil = await testVigil({
      backend: 'redis',
      overlay: { store: { backend: 'redis', redis_url: redis.url, key_prefix: 'outage' } },
    });
    app = await buildServer(vigil);
    upstream = createServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ id: 'x', model: 'm', choices: [], usage: { prompt_tokens: 10 } }));
    });
    await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', r));
    const up = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`;
    router = Fastify();
    await router.register(vigilGate, { vigil });
    router.post('/v1/chat/completions', async () => (await fetch(`${up}/`)).json());
  });

  afterAll(async () => {
    await router.close();
    await app.close();
    await vigil.close();
    upstream.closeAllConnections();
    upstream.close();
    await redis.down('kill');
  });

  const chat = () =>
    router.inject({
      method: 'POST',
      url: '/v1/chat/completions',
      headers: { 'x-router-conversation': 'ses_a' },
      payload: { model: 'm', messages: [] },
    });
  const event = (i: number) => ({
    session_id: 'ses_a',
    tool: 'read',
    call_id: `c${i}`,
    fingerprint: 'b'.repeat(64),
    target: 'x.ts',
    landed: false,
    ts: Date.now(),
  });

  const storeUp = async () =>
    /^vigil_store_up (\S+)$/m.exec((await app.inject({ method: 'GET', url: '/metrics' })).body)?.[1];

  it('up: health ok, ingestion 202, the gate allows', async () => {
    expect((await app.inject({ method: 'GET', url: '/health' })).json()).toMatchObject({ ok: true, redis: 'up' });
    expect((await app.inject({ method: 'POST', url: '/progress', payload: event(1) })).statusCode).toBe(202);
    expect((await chat()).statusCode).toBe(200);
    expect(await storeUp()).toBe('1');
  });

  it('down: health says so within a second; ingestion 503 with Retry-After; the router keeps serving', async () => {
    await redis.down('kill');
    let t0 = Date.now();
    const health = await app.inject({ method: 'GET', url: '/health' });
    const healthMs = Date.now() - t0;
    expect(health.json()).toMatchObject({ ok: false, redis: 'down' });
    expect(healthMs).toBeLessThan(1_000);

    t0 = Date.now();
    const progress = await app.inject({ method: 'POST', url: '/progress', payload: event(2) });
    const progressMs = Date.now() - t0;
    expect(progress.statusCode).toBe(503);
    expect(progress.headers['retry-after']).toBe('5');
    expect(progress.json()).toMatchObject({ code: 'STORE_UNAVAILABLE' });
    // what the VigilRedisDown rule of deploy/prometheus/ reads
    expect(await storeUp()).toBe('0');

    const before = (await vigil.metrics.gateErrors.get()).values.reduce((n, v) => n + v.value, 0);
    t0 = Date.now();
    const r = await chat();
    const chatMs = Date.now() - t0;
    expect(r.statusCode).toBe(200);
    const after = (await vigil.metrics.gateErrors.get()).values.reduce((n, v) => n + v.value, 0);
    expect(after).toBe(before + 1);
    console.log(
      `redis down: /health ${healthMs} ms, /progress 503 in ${progressMs} ms, chat through the gate ${chatMs} ms`,
    );
  });

  it('back: health up again, ingestion 202', async () => {
    await redis.up();
    const ok = async () => (await app.inject({ method: 'GET', url: '/health' })).json().redis === 'up';
    for (let i = 0; i < 100 && !(await ok()); i++) await new Promise((r) => setTimeout(r, 100));
    expect(await ok()).toBe(true);
    expect((await app.inject({ method: 'POST', url: '/progress', payload: event(3) })).statusCode).toBe(202);
    expect(await storeUp()).toBe('1');
  });
});
