import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import rateLimit from '@fastify/rate-limit';
import Fastify from 'fastify';
import { afterAll, describe, expect, it } from 'vitest';
import { HOOK_KEY_HEADER, hookKey, loadSensorSecret } from '../../core/session-key.ts';
import type { Vigil } from '../../core/vigil.ts';
import { normalizeCall } from '../../sensors/shared/normalize.ts';
import { testVigil } from '../../test/helpers/index.ts';
import { vigilGate, vigilIngest } from '../router.ts';

// The sensors' routes mounted in a router (vigil/router's vigilIngest): the same
// schemas, answers and errors as `vigil serve`, under the router's prefix, with the
// ingestion token when one is configured, beside the router's own routes.

const opened: Vigil[] = [];
afterAll(async () => {
  for (const v of opened) await v.close();
});

const read = normalizeCall('read', { filePath: '/w/src/nav.js' }, { cwd: '/w' });
const ev = (i: number, session = 'ses_child') => ({
  kind: 'tool',
  session_id: session,
  parent_session_id: 'ses_root',
  agent: 'build',
  tool: 'read',
  call_id: `c${i}`,
  fingerprint: read.fingerprint,
  target: read.target,
  exit: 0,
  landed: false,
  ts: Date.now(),
});

async function setup(env: Record<string, string> = {}, ownRateLimit = false) {
  const vigil = await testVigil({ backend: 'memory', env, overlay: { modes: { mode: 'auto_recover' } } });
  opened.push(vigil);
  const router = Fastify();
  if (ownRateLimit) await router.register(rateLimit, { global: false });
  await router.register(vigilIngest, { vigil, prefix: '/vigil' });
  await router.register(vigilGate, { vigil });
  router.get('/v1/models', async () => ({ data: [] }));
  await router.ready();
  return { vigil, router };
}

describe('vigilIngest', () => {
  it('takes the plugin progress under the prefix and answers the tree directives, as vigil serve does', async () => {
    const { router } = await setup();
    let directives: { type: string; session_id: string }[] = [];
    for (let i = 0; i < 12 && !directives.some((d) => d.type === 'abort'); i++) {
      const r = await router.inject({
        method: 'POST',
        url: '/vigil/progress',
        headers: { 'x-vigil-plugin': 'vigil-opencode/test' },
        payload: [ev(i)],
      });
      expect(r.statusCode).toBe(202);
      directives = r.json().directives;
    }
    expect(directives.map((d) => d.type)).toContain('abort');
    const polled = await router.inject({ method: 'GET', url: '/vigil/directives?session=ses_child' });
    expect(polled.statusCode).toBe(200);
    const pending = polled.json().directives as { id: string; root_id: string; session_id: string }[];
    expect(pending.length).toBe(directives.length);
    const ack = await router.inject({
      method: 'POST',
      url: '/vigil/directives/ack',
      payload: { acks: pending.map(({ id, root_id, session_id }) => ({ id, root_id, session_id })) },
    });
    expect(ack.json()).toEqual({ acknowledged: pending.length });
    // The router's own routes are untouched, and the gate refuses the looping child.
    expect((await router.inject({ method: 'GET', url: '/v1/models' })).statusCode).toBe(200);
    const gated = await router.inject({
      method: 'POST',
      url: '/v1/chat/completions',
      headers: { 'x-router-conversation': 'ses_child', 'x-router-parent': 'ses_root' },
      payload: { model: 'm', messages: [] },
    });
    expect(gated.statusCode).toBe(429);
    // Request records and a watchdog heartbeat, as the service takes them.
    const rec = await router.inject({
      method: 'POST',
      url: '/vigil/requests',
      payload: { session_id: 'ses_other', request_id: 'r1', model: 'm/x', prompt_tokens: 10, ts: Date.now() },
    });
    expect(rec.statusCode).toBe(202);
    const hb = await router.inject({
      method: 'POST',
      url: '/vigil/watchdog/heartbeat',
      payload: { last_tick_at: Date.now(), result: { status: 'idle', sessions: 0, flagged: 0 } },
    });
    expect(hb.statusCode, hb.body).toBe(202);
  });

  it('refuses a bad body with a 400 that names the field, and a body carrying content', async () => {
    const { router } = await setup();
    const bad = await router.inject({ method: 'POST', url: '/vigil/progress', payload: { ...ev(0), exit: 'no' } });
    expect(bad.statusCode).toBe(400);
    expect(bad.json()).toMatchObject({ code: 'BAD_INPUT' });
    expect(bad.json().message).toContain('exit');
    const leak = await router.inject({ method: 'POST', url: '/vigil/progress', payload: { ...ev(0), args: 'x' } });
    expect(leak.statusCode).toBe(400);
    expect(leak.json().message).toContain('args');
  });

  it('needs the ingestion token when one is configured', async () => {
    const token = 'a-long-enough-ingest-token';
    const { router } = await setup({ VIGIL_INGEST_TOKEN: token });
    const none = await router.inject({ method: 'POST', url: '/vigil/progress', payload: ev(0) });
    expect(none.statusCode).toBe(401);
    const ok = await router.inject({
      method: 'POST',
      url: '/vigil/progress',
      headers: { authorization: `Bearer ${token}` },
      payload: ev(0),
    });
    expect(ok.statusCode).toBe(202);
    // Only Vigil's routes: the router's own need no token.
    expect((await router.inject({ method: 'GET', url: '/v1/models' })).statusCode).toBe(200);
  });

  it('mounts in a router that registered @fastify/rate-limit itself', async () => {
    const { router } = await setup({}, true);
    expect((await router.inject({ method: 'POST', url: '/vigil/progress', payload: ev(0) })).statusCode).toBe(202);
  });

  it('with hooks: true, takes the hooks of the agents on its machine under its prefix, reduced into its own routes', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'vigil-router-hooks-'));
    const secretFile = join(dir, 'secret');
    const vigil = await testVigil({ backend: 'memory', env: { VIGIL_SENSOR_SECRET_FILE: secretFile } });
    opened.push(vigil);
    const router = Fastify();
    await router.register(vigilIngest, { vigil, prefix: '/vigil', hooks: true });
    const plain = Fastify();
    await plain.register(vigilIngest, { vigil, prefix: '/vigil' });
    await router.ready();
    await plain.ready();
    const key = hookKey(loadSensorSecret(secretFile, { create: true }));
    const hook = (app: typeof router, remoteAddress = '127.0.0.1') =>
      app.inject({
        method: 'POST',
        url: '/vigil/hooks/claude-code',
        remoteAddress,
        headers: { [HOOK_KEY_HEADER]: key },
        payload: { session_id: 'ses_hooked', hook_event_name: 'UserPromptSubmit', prompt: 'x', prompt_id: 'p1' },
      });
    expect((await hook(router)).statusCode).toBe(200);
    expect((await vigil.engine.sessionRow('ses_hooked'))?.session).toBe('ses_hooked');
    expect((await hook(router, '198.51.100.4')).statusCode).toBe(403);
    // not asked for: not mounted
    expect((await hook(plain)).statusCode).toBe(404);
    await router.close();
    await plain.close();
  });
});
