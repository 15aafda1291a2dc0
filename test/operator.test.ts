import { writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { createRegistry } from '../builtins.ts';
import { pagerDutyEvent } from '../channels/pagerduty/pagerduty.event.ts';
import { smsBody } from '../channels/twilio/twilio.sms.ts';
import { ntfyPayload, slackPayload } from '../channels/webhook/webhook.formats.ts';
import type { Alert } from '../core/alert.ts';
import { systemClock } from '../core/clock.ts';
import { ConfigError, loadConfigWithPlugins } from '../core/config.ts';
import { createLogger, type Logger, prettyLine } from '../core/logger.ts';
import { MemoryQueue } from '../core/notifier/memory-queue.ts';
import { renderLine, renderTitle } from '../core/render.ts';
import { MemoryStore } from '../core/store/memory.ts';
import { Vigil } from '../core/vigil.ts';
import { normalizeCall } from '../sensors/shared/normalize.ts';
import { startupReport } from '../service/serve.ts';
import { type App, buildServer } from '../service/server.ts';
import { eventually, fakeNotifySend, tempDir, testVigil } from './helpers/index.ts';

// The operator's view of issue-level behaviour, over HTTP as a client sees it: runtime
// knobs and channel toggles (saved, shared, reset), channel readiness, channel lists
// merged by name, Prometheus metrics, request logs, bodyless actions, redaction.

const TOKEN = 'adm1n-t0ken-for-operator-tests';
const admin = { authorization: `Bearer ${TOKEN}` };
const cleanup: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
});

function lines(): { logger: Logger; out: string[] } {
  const out: string[] = [];
  const destination = new Writable({
    write(chunk, _e, cb) {
      out.push(...String(chunk).split('\n').filter(Boolean));
      cb();
    },
  });
  return { logger: createLogger({ destination, level: 'debug', format: 'json' }), out };
}

/** An instance on a given store, as `vigil serve` builds one, with its HTTP API (a shared store = one Redis). */
async function instance(store: MemoryStore, file: string, o: { env?: NodeJS.ProcessEnv; logger?: Logger } = {}) {
  const registry = createRegistry();
  const env = { VIGIL_ADMIN_TOKEN: TOKEN, PATH: '/nonexistent', ...o.env };
  const config = await loadConfigWithPlugins({ registry, file, env });
  const logger = o.logger ?? lines().logger;
  const queue = new MemoryQueue({ concurrency: 1, lockDurationMs: 0, stalledIntervalMs: 0, drainTimeoutMs: 0 });
  const v = new Vigil(registry, config, store, queue, logger, systemClock, env, true);
  await v.start();
  const app = await buildServer(v, { version: '0.0.0-test', logger: true });
  cleanup.push(async () => {
    await app.close();
    await v.close();
  });
  return { v, app };
}

function file(text: string): string {
  const f = join(tempDir(), 'vigil.yaml');
  writeFileSync(f, text);
  return f;
}

const WARN_FILE = 'modes:\n  mode: warn\ndetection:\n  tick_interval: 0\n';

describe('runtime knobs: visible with their source, shared by instances, reset', () => {
  it('a saved knob overrides the file after a restart, and says so in GET /knobs, /health and the startup log', async () => {
    const store = new MemoryStore(systemClock);
    const f = file(WARN_FILE);
    const a = await instance(store, f);
    const patched = await a.app.inject({
      method: 'PATCH',
      url: '/knobs',
      headers: admin,
      payload: { modes: { mode: 'auto_recover' } },
    });
    expect(patched.statusCode).toBe(200);

    // "Restart": a new instance on the same store, with mode: warn in its file.
    const log = lines();
    const b = await instance(store, f, { logger: log.logger });
    expect(b.v.mode().type).toBe('auto_recover');
    const knobs = (await b.app.inject({ method: 'GET', url: '/knobs' })).json();
    expect(knobs.modes.mode).toBe('auto_recover');
    expect(knobs._sources).toContainEqual({
      path: 'modes.mode',
      value: 'auto_recover',
      source: 'runtime',
      overrides: { default: 'warn', file: 'warn' },
    });
    const health = (await b.app.inject({ method: 'GET', url: '/health' })).json();
    expect(health.mode).toBe('auto_recover');
    expect(health.knobs).toContainEqual(expect.objectContaining({ path: 'modes.mode', source: 'runtime' }));
    await startupReport(b.v, b.v.logger, 'http://127.0.0.1:0');
    const warned = log.out.map((l) => JSON.parse(l)).find((l) => l.knob === 'modes.mode');
    expect(warned).toMatchObject({ level: 40, source: 'runtime', value: 'auto_recover' });
    expect(warned.msg).toContain('DELETE /knobs/modes.mode');

    // Reset one knob on b: the file's value applies; a sees it on its tick.
    const reset = await b.app.inject({ method: 'DELETE', url: '/knobs/modes.mode', headers: admin });
    expect(reset.json()).toMatchObject({ reset: ['modes.mode'], modes: { mode: 'warn' } });
    expect(a.v.mode().type).toBe('auto_recover');
    await a.v.tick();
    expect(a.v.mode().type).toBe('warn');
    expect((await a.app.inject({ method: 'GET', url: '/knobs' })).json()._sources).toContainEqual(
      expect.objectContaining({ path: 'modes.mode', source: 'file' }),
    );
  });

  it('a PATCH on one instance reaches another; DELETE /knobs resets every knob; a bad path is named', async () => {
    const store = new MemoryStore(systemClock);
    const f = file(WARN_FILE);
    const a = await instance(store, f);
    const b = await instance(store, f);
    await a.app.inject({
      method: 'PATCH',
      url: '/knobs',
      headers: admin,
      payload: { progress: { stall_turns: 25 }, modes: { mode: 'auto_compact' } },
    });
    // GET /knobs reads the saved overlay first, so b answers with a's change at once.
    expect((await b.app.inject({ method: 'GET', url: '/knobs' })).json().progress.stall_turns).toBe(25);
    expect(b.v.mode().type).toBe('auto_compact');
    const bad = await b.app.inject({ method: 'DELETE', url: '/knobs/progress.nope', headers: admin });
    expect(bad.statusCode).toBe(400);
    expect(bad.json().message).toContain('progress.nope: not a knob');
    expect((await b.app.inject({ method: 'DELETE', url: '/knobs' })).statusCode).toBe(401);
    const all = (await b.app.inject({ method: 'DELETE', url: '/knobs', headers: admin })).json();
    expect(all.reset.sort()).toEqual(['modes.mode', 'progress.stall_turns']);
    expect(all._sources.filter((s: { source: string }) => s.source === 'runtime')).toEqual([]);
    await a.v.tick();
    expect(a.v.knobs.get<{ stall_turns: number }>('progress').stall_turns).toBe(20);
  });

  it('channel toggles are saved, seen by other instances and by a restart, and reset', async () => {
    const store = new MemoryStore(systemClock);
    const f = file(WARN_FILE);
    const a = await instance(store, f);
    const b = await instance(store, f);
    const r = await a.app.inject({
      method: 'PATCH',
      url: '/channels/desktop',
      headers: admin,
      payload: { enabled: false },
    });
    expect(r.json()).toMatchObject({ name: 'desktop', enabled: false });
    await b.v.tick();
    const seen = (await b.app.inject({ method: 'GET', url: '/channels' })).json();
    expect(seen[0]).toMatchObject({ name: 'desktop', enabled: false, runtime: { enabled: false } });
    const c = await instance(store, f);
    expect(c.v.notifier.channels()[0].enabled).toBe(false);
    // A reset is a bodyless action even when the client says JSON.
    const back = await c.app.inject({
      method: 'POST',
      url: '/channels/desktop/reset',
      headers: { ...admin, 'content-type': 'application/json' },
    });
    expect(back.json()).toMatchObject({ name: 'desktop', enabled: true });
    await a.v.tick();
    expect(a.v.notifier.channels()[0].enabled).toBe(true);
    expect(
      (await a.app.inject({ method: 'PATCH', url: '/channels/nope', headers: admin, payload: {} })).statusCode,
    ).toBe(404);
  });
});

describe('channels: lists merge by name in a config file; readiness is shown', () => {
  it('a file adding a webhook keeps the default desktop channel; remove: true drops it; an unknown remove is named', async () => {
    const registry = createRegistry();
    const env = { HOOK_SECRET: `whsec_${Buffer.alloc(32, 7).toString('base64')}` };
    const hook =
      '    - name: hook\n      type: webhook\n      url: http://127.0.0.1:9/h\n      secret_env: HOOK_SECRET\n';
    const kept = await loadConfigWithPlugins({ registry, env, file: file(`notifications:\n  channels:\n${hook}`) });
    expect(kept.notifications.channels.map((c) => c.name)).toEqual(['desktop', 'hook']);
    const tuned = await loadConfigWithPlugins({
      registry,
      env,
      file: file('notifications:\n  channels:\n    - name: desktop\n      min_severity: critical\n'),
    });
    expect(tuned.notifications.channels).toEqual([
      expect.objectContaining({ name: 'desktop', min_severity: 'critical' }),
    ]);
    const dropped = await loadConfigWithPlugins({
      registry,
      env,
      file: file(`notifications:\n  channels:\n    - name: desktop\n      remove: true\n${hook}`),
    });
    expect(dropped.notifications.channels.map((c) => c.name)).toEqual(['hook']);
    const err = await loadConfigWithPlugins({
      registry,
      env,
      file: file('notifications:\n  channels:\n    - name: deskop\n      remove: true\n'),
    }).catch((e) => e);
    expect(err).toBeInstanceOf(ConfigError);
    expect(err.problems).toEqual([
      'notifications.channels[0].remove: no channel named "deskop" below this file to remove',
    ]);
  });

  it('/health names the enabled channels that cannot deliver here; a desktop with notify-send and a bus is ready', async () => {
    const store = new MemoryStore(systemClock);
    const headless = await instance(store, file(WARN_FILE));
    const h = (await headless.app.inject({ method: 'GET', url: '/health' })).json();
    expect(h.channels_not_ready).toEqual(['desktop']);
    expect(h.channels[0]).toMatchObject({
      name: 'desktop',
      ready: false,
      reason: 'notify-send not found on PATH',
      source: 'default',
    });
    const dir = tempDir();
    fakeNotifySend(dir);
    const desk = await instance(new MemoryStore(systemClock), file(WARN_FILE), {
      env: { PATH: dir, DBUS_SESSION_BUS_ADDRESS: 'unix:path=/nonexistent/bus' },
    });
    const ok = (await desk.app.inject({ method: 'GET', url: '/health' })).json();
    expect(ok.channels_not_ready).toEqual([]);
    expect(ok.channels[0]).toMatchObject({ name: 'desktop', ready: true });
  });
});

const read = normalizeCall('read', { filePath: '/p/src/app.js' }, { cwd: '/p' });
const readEvent = (i: number) => ({
  session_id: 'ses_loop',
  agent: 'build',
  tool: 'read',
  call_id: `c${i}`,
  fingerprint: read.fingerprint,
  target: read.target,
  exit: 0,
  landed: false,
  ts: Date.now() - 10_000 + i,
});

describe('metrics: Prometheus text at /metrics, the warnings at /warnings', () => {
  it('counts deliveries by channel and outcome, delivery and detection latency, gate answers, process metrics', async () => {
    const v = await testVigil({
      backend: 'memory',
      channels: [
        { name: 'rec', type: 'recording', min_severity: 'info', quiet_window: 0, rate_limit: { max: 1, window: '1h' } },
        { name: 'desk', type: 'desktop', command: '/nonexistent/notify-send', min_severity: 'info' },
      ],
      registry: createRegistry().register(
        (await import('./helpers/index.ts')).recordingPlugin({ mode: 'ok', sent: [], attempts: 0 }),
      ),
    });
    const app: App = await buildServer(v);
    cleanup.push(async () => {
      await app.close();
      await v.close();
    });
    // Eight identical reads: the session is flagged, an alert goes to both channels.
    const r = await app.inject({ method: 'POST', url: '/progress', payload: [0, 1, 2, 3, 4, 5, 6, 7].map(readEvent) });
    expect(r.json().verdicts.length).toBeGreaterThan(0);
    await v.notifier.notify({ dedup_key: 'other', severity: 'warning', title: 't', summary: 's', source: 'test' });
    await app.inject({ method: 'POST', url: '/gate', payload: { conversation: 'ses_x' } });
    // rec: stalling delivered, its escalation to looping (critical) too (a rise is never held
    // by the rate limit), "other" (a second incident) over its rate limit; desk: three failures.
    await eventually(async () => (await v.deliveryLog.recent()).filter((x) => x.outcome !== 'retried').length === 6);
    const res = await app.inject({ method: 'GET', url: '/metrics' });
    expect(res.headers['content-type']).toContain('text/plain');
    const text = res.body;
    expect(text).toContain('vigil_deliveries_total{channel="rec",outcome="delivered"} 2');
    expect(text).toContain('vigil_deliveries_total{channel="rec",outcome="suppressed"} 1');
    expect(text).toContain('vigil_deliveries_total{channel="desk",outcome="failed"} 3');
    expect(text).toMatch(/vigil_delivery_seconds_count\{channel="rec"\} 2/);
    expect(text).toMatch(/vigil_detection_seconds_count [1-9]/);
    expect(text).toContain('vigil_gate_answers_total{action="allow"} 1');
    expect(text).toContain('vigil_alert_queue_depth 0');
    expect(text).toContain('process_cpu_user_seconds_total');
    expect(text).toContain('nodejs_eventloop_lag_seconds');
    const warnings = (await app.inject({ method: 'GET', url: '/warnings' })).json();
    expect(warnings).toEqual([expect.objectContaining({ session: 'ses_loop', agent: 'build' })]);
  });

  it('reports the age of the oldest queued delivery', async () => {
    const { recordingPlugin, behaviour } = await import('./helpers/index.ts');
    const b = behaviour('hang');
    const v = await testVigil({
      backend: 'memory',
      registry: createRegistry().register(recordingPlugin(b)),
      channels: [{ name: 'stuck', type: 'recording', min_severity: 'info' }],
      notifications: { delivery_timeout: 5_000, drain_timeout: 0 },
    });
    const app = await buildServer(v);
    cleanup.push(async () => {
      await app.close();
      await v.close();
    });
    const age = async () =>
      Number(/\nvigil_alert_queue_oldest_seconds (\S+)/.exec((await app.inject({ url: '/metrics' })).body)?.[1]);
    expect(await age()).toBe(0);
    await v.notifier.notify({ dedup_key: 'd', severity: 'warning', title: 't', summary: 's', source: 'test' });
    await eventually(async () => (await age()) > 0);
  });
});

describe('logs and bodies', () => {
  it('routine requests are one line at debug, none at info; refused ones one line at info', async () => {
    const log = lines();
    const { app } = await instance(new MemoryStore(systemClock), file(WARN_FILE), { logger: log.logger });
    const before = log.out.length;
    for (let i = 0; i < 3; i++) await app.inject({ method: 'GET', url: '/health' });
    await app.inject({ method: 'GET', url: '/sessions/nope/report?x=secret-ticket' });
    const req = log.out.slice(before).map((l) => JSON.parse(l));
    const http = req.filter((l) => l.part === 'http');
    expect(http.filter((l) => l.level === 20 && l.msg === 'request')).toHaveLength(3);
    expect(http.filter((l) => l.level === 30)).toEqual([
      expect.objectContaining({ msg: 'request refused', url: '/sessions/nope/report', status: 404 }),
    ]);
    expect(log.out.join('\n')).not.toContain('secret-ticket');
  });

  it('the pretty format is one readable line', () => {
    const line = prettyLine(
      JSON.stringify({
        level: 40,
        time: Date.UTC(2026, 0, 1, 12, 0, 1, 250),
        msg: 'hello',
        channel: 'desktop',
        pid: 1,
      }),
    );
    expect(line).toBe('12:00:01.250 WARN  hello  channel=desktop\n');
  });

  it('action routes take an empty body even with a JSON content type', async () => {
    const { app } = await instance(new MemoryStore(systemClock), file(WARN_FILE));
    const json = { ...admin, 'content-type': 'application/json' };
    for (const url of ['/trees/ses_r/resume', '/channels/desktop/test?wait_ms=0', '/channels/desktop/reset']) {
      const r = await app.inject({ method: 'POST', url, headers: json, payload: '' });
      expect([200, 202]).toContain(r.statusCode);
    }
    const broken = await app.inject({ method: 'PATCH', url: '/knobs', headers: json, payload: '{"modes":' });
    expect(broken.statusCode).toBe(400);
    expect(broken.json().code).toBe('FST_ERR_CTP_INVALID_JSON_BODY');
  });
});

describe('test alerts say TEST once in every channel format', () => {
  const a: Alert = {
    dedup_key: 'vigil-test-x',
    severity: 'warning',
    state: 'trigger',
    title: 'TEST: Vigil test alert',
    summary: 'Alert for channel "x": if you can read this, the channel works.',
    details: 'Sent from Vigil (Send test alert). No incident is open.',
    source: 'vigil-test',
    at: 0,
    seq: 1,
    test: true,
  };
  const count = (s: string) => s.match(/TEST/g)?.length ?? 0;
  it('desktop, ntfy, slack, pagerduty, twilio', () => {
    expect(count(`${renderTitle(a)} ${renderLine(a, { mark: false })}`)).toBe(1); // desktop: title + body
    const n = ntfyPayload(a, 'topic');
    expect(count(`${n.title} ${n.message}`)).toBe(1);
    expect(count(slackPayload(a).text)).toBe(1);
    const pd = pagerDutyEvent(a, 'k'.repeat(32), { source: 's', group: 'g' });
    expect(pd.event_action === 'trigger' && count(pd.payload.summary)).toBe(1);
    expect(count(smsBody(a, 1))).toBe(1);
  });
});

describe('secrets: provider failure reasons never quote a full phone number', () => {
  async function answering(status: number, body: string): Promise<{ url: string; server: Server }> {
    const server = createServer((_req, res) => {
      res.writeHead(status, { 'content-type': 'application/json' }).end(body);
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    cleanup.push(() => new Promise((r) => server.close(r)));
    return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/`, server };
  }

  it('pagerduty and ntfy errors are masked in /deliveries', async () => {
    const pd = await answering(
      400,
      JSON.stringify({ status: 'invalid event', errors: ['contact +14155550123 is not valid'] }),
    );
    const ntfy = await answering(400, JSON.stringify({ code: 40001, error: 'cannot send to +44 7700 900456' }));
    const v = await testVigil({
      backend: 'memory',
      env: { PD_KEY: 'r'.repeat(32) },
      channels: [
        {
          name: 'oncall',
          type: 'pagerduty',
          routing_key_env: 'PD_KEY',
          url: `${pd.url}v2/enqueue`,
          min_severity: 'info',
        },
        { name: 'phone', type: 'webhook', format: 'ntfy', url: ntfy.url, topic: 'alerts', min_severity: 'info' },
      ],
    });
    cleanup.push(() => v.close());
    await v.notifier.notify({ dedup_key: 'd', severity: 'warning', title: 't', summary: 's', source: 'test' });
    await v.queue.idle();
    const rows = await eventually(async () => {
      const r = (await v.deliveryLog.recent()).filter((x) => x.outcome === 'failed');
      return r.length === 2 ? r : undefined;
    });
    const reasons = (rows ?? []).map((r) => r.reason).join('\n');
    expect(reasons).not.toMatch(/4155550123|7700 900456|7700900456/);
    expect(reasons).toContain('+*********23');
    expect(reasons).toContain('+**********56');
  });
});
