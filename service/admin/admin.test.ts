import type { AddressInfo } from 'node:net';
import { gunzipSync } from 'node:zlib';
import { afterEach, describe, expect, it } from 'vitest';
import { FakeClock } from '../../core/clock.ts';
import type { Vigil } from '../../core/vigil.ts';
import { eventually, testVigil } from '../../test/helpers/index.ts';
import { type App, buildServer } from '../server.ts';
import type { AdminRow } from './sessions.ts';
import { LOOP_KNOBS, loopEvents } from './testkit.ts';
import { Tickets } from './tickets.ts';
import { trees } from './ui/views/sessions.ts';

const TOKEN = 'adm1n-t0ken-for-admin-tests';
const admin = { authorization: `Bearer ${TOKEN}` };
const running: { v: Vigil; app: App }[] = [];
afterEach(async () => {
  for (const r of running.splice(0)) {
    // undici may hold a spare socket that never carries a request; server.close() would wait for it.
    const closing = r.app.close();
    r.app.server.closeAllConnections();
    await closing;
    await r.v.close();
  }
});

async function service(o: { host?: string; mode?: string } = {}) {
  const v = await testVigil({
    backend: 'memory',
    // Off loopback the sensors' token is required too; on loopback ingestion stays open.
    env: { VIGIL_ADMIN_TOKEN: TOKEN, ...(o.host ? { VIGIL_INGEST_TOKEN: 'ingest-t0ken-for-admin-tests' } : {}) },
    overlay: { progress: LOOP_KNOBS, modes: { mode: o.mode ?? 'warn' } },
    channels: [{ name: 'desk', type: 'desktop', command: '/nonexistent/notify-send' }],
  });
  const app = await buildServer(v, { version: '9.9.9', host: o.host });
  running.push({ v, app });
  return { v, app };
}

async function listen(app: App): Promise<string> {
  await app.listen({ host: '127.0.0.1', port: 0 });
  return `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
}

/** Reads an event stream; `next` waits for the first event of a name matching a test. */
async function stream(url: string) {
  const ctl = new AbortController();
  const res = await fetch(url, { signal: ctl.signal });
  const events: { event: string; data: any }[] = [];
  let buf = '';
  const reading = (async () => {
    const dec = new TextDecoder();
    try {
      for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
        buf += dec.decode(chunk, { stream: true });
        let i = buf.indexOf('\n\n');
        while (i >= 0) {
          const block = buf.slice(0, i);
          buf = buf.slice(i + 2);
          const ev = /^event: (.*)$/m.exec(block)?.[1];
          const data = /^data: (.*)$/m.exec(block)?.[1];
          if (ev && data !== undefined) events.push({ event: ev, data: JSON.parse(data) });
          i = buf.indexOf('\n\n');
        }
      }
    } catch {
      // aborted
    }
  })();
  return {
    res,
    events,
    next: (event: string, test: (d: any) => boolean = () => true) =>
      eventually(() => events.find((e) => e.event === event && test(e.data))?.data),
    close: async () => {
      ctl.abort();
      await reading;
    },
  };
}

describe('admin page: routes', () => {
  it('serves the page and its assets (gzipped when asked), with a strict CSP', async () => {
    const { app } = await service();
    const page = await app.inject({ method: 'GET', url: '/' });
    expect(page.statusCode).toBe(200);
    expect(page.headers['content-type']).toContain('text/html');
    expect(page.headers['content-security-policy']).toContain("script-src 'self'");
    const src = /src="([^"]+)"/.exec(page.body)?.[1] ?? '';
    expect(src).toMatch(/^\/admin\/assets\/app\.js\?v=/);
    const js = await app.inject({ method: 'GET', url: src, headers: { 'accept-encoding': 'gzip' } });
    expect(js.headers['content-encoding']).toBe('gzip');
    const text = gunzipSync(js.rawPayload).toString('utf8');
    expect(text.length).toBeGreaterThan(1000);
    expect([...text].every((c) => c.charCodeAt(0) < 128)).toBe(true);
    expect((await app.inject({ method: 'GET', url: '/admin/assets/nope.js' })).statusCode).toBe(400);
  });

  it('describes every knob section from its zod schema, with defaults and hints', async () => {
    const { app, v } = await service();
    const sections = (await app.inject({ method: 'GET', url: '/knobs/schema' })).json();
    expect(sections.map((s: { section: string }) => s.section).sort()).toEqual([...v.knobs.sections()].sort());
    const progress = sections.find((s: { section: string }) => s.section === 'progress');
    expect(progress.schema.properties.dup_warn).toMatchObject({ type: 'number', minimum: 0, maximum: 1 });
    expect(progress.defaults.window).toBe(60);
    expect(progress.hints.window).toMatch(/rolling window/);
    const modes = sections.find((s: { section: string }) => s.section === 'modes');
    expect(modes.schema.properties.mode.enum).toContain('auto_recover');
    expect(modes.defaults.auto_recover.recover_window).toBe(3_600_000);
    expect(modes.schema.properties.auto_recover.properties.recover_window.type).toEqual(['number', 'string']);
  });

  it('a rejected knob names each bad path in problems', async () => {
    const { app } = await service();
    const r = await app.inject({
      method: 'PATCH',
      url: '/knobs',
      headers: admin,
      payload: { progress: { dup_warn: 2, windw: 3 } },
    });
    expect(r.statusCode).toBe(400);
    expect(r.json().problems).toEqual(
      expect.arrayContaining([
        { path: 'progress.dup_warn', message: expect.stringMatching(/1/) },
        { path: 'progress.windw', message: 'unknown key' },
      ]),
    );
  });

  it('panels: the breaker contributes its models', async () => {
    const { app } = await service();
    await app.inject({
      method: 'POST',
      url: '/requests',
      payload: { session_id: 'ses_p', request_id: 'r1', model: 'fake/m1', prompt_tokens: 10, ts: Date.now() },
    });
    const panels = (await app.inject({ method: 'GET', url: '/panels' })).json();
    expect(panels[0]).toMatchObject({
      detector: 'behavior-breaker',
      rows: [expect.objectContaining({ model: 'fake/m1' })],
    });
    expect(panels[0].columns.map((c: { key: string }) => c.key)).toContain('tripped');
  });

  it('/sessions rows carry detectors and sparkline series', async () => {
    const { app } = await service();
    await app.inject({ method: 'POST', url: '/progress', payload: loopEvents('ses_s', 3) });
    for (const [i, tokens] of [1000, 2000].entries()) {
      await app.inject({
        method: 'POST',
        url: '/requests',
        payload: { session_id: 'ses_s', request_id: `r${i}`, model: 'fake/m1', prompt_tokens: tokens, ts: Date.now() },
      });
    }
    const row = await eventually(async () => {
      const r = (await app.inject({ method: 'GET', url: '/sessions' })).json()[0];
      return r.series.turns_since_landed?.length ? r : undefined;
    });
    expect(row.series.prompt_tokens).toEqual([1000, 2000]);
    // turns since landed after each of the 3 calls (no router yet), then after each request
    expect(row.series.turns_since_landed).toEqual([1, 2, 3, 1, 2]);
    expect(row.detectors['no-progress']).toMatchObject({ level: 'ok', source: 'no-progress' });
  });
});

describe('a tree whose opencode is long gone', () => {
  it('reads as stale after detection.stale_after with no sensor: not live, out of the refused list; a live one is neither', async () => {
    const clock = new FakeClock(Date.now());
    const v = await testVigil({
      backend: 'memory',
      clock,
      env: { VIGIL_ADMIN_TOKEN: TOKEN },
      overlay: { progress: LOOP_KNOBS, modes: { mode: 'auto_recover' }, detection: { stale_after: '10m' } },
      channels: [{ name: 'desk', type: 'desktop', command: '/nonexistent/notify-send' }],
    });
    const app = await buildServer(v, { version: '9.9.9' });
    running.push({ v, app });
    const post = (events: Record<string, unknown>[]) =>
      app.inject({
        method: 'POST',
        url: '/progress',
        headers: { 'x-vigil-plugin': 'vigil-opencode/9.9.9+test' },
        payload: events,
      });
    const at = (evs: Record<string, unknown>[]) => evs.map((e) => ({ ...e, ts: clock.now() }));
    // Two trees: one stuck (refused), one that goes on reporting.
    await post(at(loopEvents('ses_gone', 12, { parent: 'ses_gone_root' })));
    await post(at(loopEvents('ses_alive', 2)));
    const rows = async () => (await app.inject({ method: 'GET', url: '/sessions' })).json() as AdminRow[];
    const gone = (await rows()).find((r) => r.session === 'ses_gone')!;
    expect(gone).toMatchObject({ refused: true, stale: false, plugin_live: true });
    expect(trees(await rows()).find((t) => t.root === 'ses_gone_root')).toMatchObject({ refused: true, stale: false });
    // Eleven minutes: the first tree's opencode sent nothing since; the other still reports.
    clock.advance(6 * 60_000);
    await post(at(loopEvents('ses_alive', 1)));
    clock.advance(5 * 60_000);
    await post(at(loopEvents('ses_alive', 1)));
    const later = await rows();
    expect(later.find((r) => r.session === 'ses_gone')).toMatchObject({
      refused: true,
      stale: true,
      plugin_live: false,
    });
    expect(later.find((r) => r.session === 'ses_alive')).toMatchObject({ stale: false, plugin_live: true });
    const t = trees(later).find((x) => x.root === 'ses_gone_root')!;
    expect(t).toMatchObject({ stale: true, refused: false });
    // The page turns a tree stale between reads too, from its last event and the knob it is told.
    const meta = (await app.inject({ method: 'GET', url: '/admin/meta' })).json();
    expect(meta.stale_after_ms).toBe(600_000);
    const fresh = (await rows()).filter((r) => r.root === 'ses_alive');
    expect(trees(fresh, clock.now() + 11 * 60_000, meta.stale_after_ms)[0]).toMatchObject({ stale: true });
    expect(trees(fresh, clock.now(), meta.stale_after_ms)[0]).toMatchObject({ stale: false });
  });
});

describe('admin page: live events', () => {
  it('pushes sessions, transitions, trees, knobs, channels, deliveries and heartbeats', async () => {
    const { app } = await service({ mode: 'auto_recover' });
    const base = await listen(app);
    const s = await stream(`${base}/events`);
    expect(s.res.headers.get('content-type')).toContain('text/event-stream');
    await s.next('hello');
    await fetch(`${base}/progress`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(loopEvents('ses_l', 12, { parent: 'ses_root' })),
    });
    expect(await s.next('transition', (d) => d.session === 'ses_l' && d.to === 'looping')).toMatchObject({
      root: 'ses_root',
    });
    expect(await s.next('tree', (d) => d.root === 'ses_root' && d.refused)).toMatchObject({ stage: 1 });
    const rows = await s.next('sessions', (d) => d.rows.some((r: any) => r.verdict === 'looping'));
    expect(rows.rows.find((r: any) => r.session === 'ses_l')).toMatchObject({ refused: true, stage: 1 });
    await app.inject({ method: 'PATCH', url: '/knobs', headers: admin, payload: { progress: { stall_turns: 4 } } });
    expect((await s.next('knobs')).progress.stall_turns).toBe(4);
    await app.inject({ method: 'PATCH', url: '/channels/desk', headers: admin, payload: { enabled: false } });
    expect(await s.next('channel')).toMatchObject({ name: 'desk', enabled: false });
    await app.inject({ method: 'POST', url: '/channels/desk/test', headers: admin });
    expect(await s.next('delivery', (d) => d.test)).toMatchObject({ channel: 'desk', outcome: 'failed' });
    await app.inject({
      method: 'POST',
      url: '/watchdog/heartbeat',
      payload: { last_tick_at: Date.now(), result: { status: 'ok' } },
    });
    await s.next('heartbeat');
    await s.close();
  });

  it('app.close() ends open streams', async () => {
    const { app } = await service();
    const base = await listen(app);
    const s = await stream(`${base}/events`);
    await s.next('hello');
    await app.close();
    await s.close();
  });
});

describe('admin page: access off loopback', () => {
  it('serves the shell without the token; data and /events need it (a single-use ticket for /events)', async () => {
    const { app } = await service({ host: '0.0.0.0' });
    expect((await app.inject({ method: 'GET', url: '/' })).statusCode).toBe(200);
    expect((await app.inject({ method: 'GET', url: '/admin/meta' })).statusCode).toBe(401);
    expect((await app.inject({ method: 'GET', url: '/events' })).statusCode).toBe(401);
    expect((await app.inject({ method: 'GET', url: '/events?ticket=1.2.3' })).statusCode).toBe(401);
    expect((await app.inject({ method: 'POST', url: '/events/ticket' })).statusCode).toBe(401);
    const meta = (await app.inject({ method: 'GET', url: '/admin/meta', headers: admin })).json();
    expect(meta).toMatchObject({ guarded: true, token_configured: true });
    expect(JSON.stringify(meta)).not.toContain(TOKEN);
    const { ticket } = (await app.inject({ method: 'POST', url: '/events/ticket', headers: admin })).json();
    expect(ticket).not.toContain(TOKEN);
    const base = await listen(app);
    const s = await stream(`${base}/events?ticket=${encodeURIComponent(ticket)}`);
    expect(s.res.status).toBe(200);
    await s.next('hello');
    await s.close();
    const again = await fetch(`${base}/events?ticket=${encodeURIComponent(ticket)}`);
    expect(again.status).toBe(401);
    await again.text();
  });

  it('tickets: valid once, not after expiry, not when altered', () => {
    let now = 1_000_000;
    const t = new Tickets(30_000, () => now);
    const a = t.issue().ticket;
    expect(t.redeem(a)).toBe(true);
    expect(t.redeem(a)).toBe(false);
    const b = t.issue().ticket;
    expect(t.redeem(`${b.slice(0, -2)}xx`)).toBe(false);
    expect(t.redeem(b.replace(/^\d+/, String(now + 999_999)))).toBe(false);
    now += 30_001;
    expect(t.redeem(b)).toBe(false);
    expect(new Tickets().redeem(t.issue().ticket)).toBe(false);
  });
});
