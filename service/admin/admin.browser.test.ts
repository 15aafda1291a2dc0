import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { type Browser, chromium, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRegistry } from '../../builtins.ts';
import { FakeClock } from '../../core/clock.ts';
import type { Vigil } from '../../core/vigil.ts';
import { eventually, testVigil } from '../../test/helpers/index.ts';
import { type App, buildServer } from '../server.ts';
import { buildAdmin } from './build.mjs';
import { controlledLeaves } from './coverage.ts';
import { LOOP_KNOBS, loopEvents } from './testkit.ts';

// The admin page in a real browser (Debian chromium driven by playwright-core) against
// a real service on loopback: live updates over SSE, Resume, channels, knobs, breaker.
// Screenshots of each view go to .tmp/artifacts/admin/; VIGIL_UPDATE_DOCS=1 also
// rewrites docs/sessions.png for the README.

const ROOT = join(import.meta.dirname, '..', '..');
const ART = join(ROOT, '.tmp', 'artifacts', 'admin');
const CHROMIUM = process.env.VIGIL_CHROMIUM ?? '/usr/bin/chromium';
const TOKEN = 'adm1n-t0ken-for-the-browser-test';
const FIRST_LOAD_BUDGET = 150 * 1024;

interface Receiver {
  server: Server;
  url: string;
  fail: boolean;
  got: { data?: { title?: string; test?: boolean } }[];
}

let receiver: Receiver;
let vigil: Vigil;
let app: App;
let base = '';
let browser: Browser;

async function startReceiver(): Promise<Receiver> {
  const r: Receiver = { server: createServer(), url: '', fail: false, got: [] };
  r.server.on('request', (req, res) => {
    let body = '';
    req.on('data', (d) => (body += d));
    req.on('end', () => {
      if (r.fail) {
        res.writeHead(500).end('receiver down');
        return;
      }
      r.got.push(JSON.parse(body));
      res.writeHead(204).end();
    });
  });
  await new Promise<void>((ok) => r.server.listen(0, '127.0.0.1', ok));
  r.url = `http://127.0.0.1:${(r.server.address() as AddressInfo).port}/hook`;
  return r;
}

async function serve(v: Vigil, host?: string): Promise<{ app: App; base: string }> {
  const a = await buildServer(v, { version: '0.0.0-test', host });
  await a.listen({ host: '127.0.0.1', port: 0 });
  return { app: a, base: `http://127.0.0.1:${(a.server.address() as AddressInfo).port}` };
}

async function post(path: string, body: unknown, headers: Record<string, string> = {}) {
  const r = await fetch(`${base}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
  return { status: r.status, json: await r.json() };
}

const get = async (path: string) => (await fetch(`${base}${path}`)).json();
const admin = { authorization: `Bearer ${TOKEN}` };

function requests(session: string, model: string, n: number, tokens = 1000) {
  return Array.from({ length: n }, (_, i) => ({
    session_id: session,
    request_id: `${session}-${model}-${i}-${randomBytes(3).toString('hex')}`,
    model,
    prompt_tokens: tokens * (i + 1),
    cost_usd: 0.01,
    ts: Date.now(),
  }));
}

async function shot(page: Page, name: string) {
  await page.screenshot({ path: join(ART, `${name}.png`), fullPage: true });
}

async function openPage(url: string): Promise<Page> {
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  await page.goto(url);
  return page;
}

const live = (page: Page) => page.waitForFunction(() => document.querySelector('#conn')?.textContent === 'live');

async function useToken(page: Page) {
  await page.fill('#token', TOKEN);
  await page.click('text=Use token');
  await page.waitForSelector('text=admin token set for this tab');
  await live(page);
}

beforeAll(async () => {
  if (!existsSync(CHROMIUM)) {
    throw new Error(`no browser at ${CHROMIUM}: apt-get install -y chromium (or set VIGIL_CHROMIUM)`);
  }
  mkdirSync(ART, { recursive: true });
  receiver = await startReceiver();
  vigil = await testVigil({
    backend: 'memory',
    env: { VIGIL_ADMIN_TOKEN: TOKEN, HOOK_SECRET: `whsec_${randomBytes(24).toString('base64')}` },
    overlay: { progress: LOOP_KNOBS },
    channels: [
      { name: 'hook', type: 'webhook', url: receiver.url, secret_env: 'HOOK_SECRET', min_severity: 'warning' },
    ],
  });
  ({ app, base } = await serve(vigil));
  browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
});

afterAll(async () => {
  await browser?.close();
  if (app) {
    const closing = app.close();
    app.server.closeAllConnections();
    await closing;
  }
  await vigil?.close();
  receiver?.server.close();
});

describe('admin page in a browser', () => {
  it('Sessions: first load within budget; a loop turns looping live; the report opens on click', async () => {
    const page = await openPage(`${base}/#sessions`);
    await live(page);
    await page.waitForSelector('#h-sessions');
    const { files } = await buildAdmin({ write: false });
    const transfer = await page.evaluate(() => {
      const nav = performance.getEntriesByType('navigation')[0] as PerformanceNavigationTiming;
      const res = performance.getEntriesByType('resource') as PerformanceResourceTiming[];
      return {
        total: nav.transferSize + res.reduce((n, r) => n + r.transferSize, 0),
        parts: [[nav.name, nav.transferSize], ...res.map((r) => [r.name.replace(location.origin, ''), r.transferSize])],
      };
    });
    console.log(
      `admin page bundle: app.js ${files['app.js'].body.length} B (gzip ${files['app.js'].gz.length} B), ` +
        `app.css ${files['app.css'].body.length} B (gzip ${files['app.css'].gz.length} B); ` +
        `first-load transfer ${transfer.total} B over ${transfer.parts.length} requests`,
    );
    expect(transfer.total).toBeGreaterThan(0);
    expect(transfer.total).toBeLessThan(FIRST_LOAD_BUDGET);

    await page.evaluate(() => {
      (window as unknown as { loadedOnce: number }).loadedOnce = 1;
    });
    // A healthy child that lands, and a looping one: requests (sparkline) and reads of one file.
    await post('/progress', [
      ...loopEvents('ses_healthy', 2, { parent: 'ses_orch', agent: 'build' }),
      {
        ...loopEvents('ses_healthy', 1, { parent: 'ses_orch', agent: 'build' })[0],
        tool: 'edit',
        landed: true,
      },
    ]);
    const calls = requests('ses_loop', 'fake/loop-model', 12);
    for (const [i, ev] of loopEvents('ses_loop', 12, { parent: 'ses_orch' }).entries()) {
      await post('/requests', calls[i]);
      await post('/progress', ev);
    }
    await page.waitForFunction(
      () => document.querySelector('[data-session="ses_loop"] .verdict')?.textContent?.trim() === 'looping',
    );
    expect(await page.evaluate(() => (window as unknown as { loadedOnce?: number }).loadedOnce)).toBe(1);
    // The detectors column names the no-progress verdict (it showed "-" for a loop before).
    await page.waitForFunction(() =>
      document.querySelector('[data-session="ses_loop"] td.detectors')?.textContent?.includes('no-progress: looping'),
    );
    expect(await page.textContent('[data-session="ses_healthy"] td.detectors')).toBe('-');
    await page.waitForSelector('tr.tree[data-root="ses_orch"]');
    await page.waitForFunction(
      () => (document.querySelector('[data-session="ses_loop"] .spark canvas') as HTMLCanvasElement | null) !== null,
    );
    await page.click('[data-session="ses_loop"] button.link');
    await page.waitForFunction(() => document.querySelector('#report pre')?.textContent?.includes('ses_loop'));
    await shot(page, 'sessions');
    await page.close();
  });

  it('Resume: auto_recover refuses the tree; Resume on the page lifts it and the gate allows', async () => {
    const page = await openPage(`${base}/#knobs`);
    await live(page);
    await useToken(page);
    await page.selectOption('[data-knob="modes.mode"]', 'auto_recover');
    await eventually(async () => (await get('/knobs')).modes.mode === 'auto_recover');
    for (const ev of loopEvents('ses_stuck', 12, { parent: 'ses_rroot' })) await post('/progress', ev);
    expect((await post('/gate', { conversation: 'ses_stuck' })).json.action).toBe('refuse');
    await page.click('#tab-sessions');
    const resume = page.locator('button[aria-label="Resume tree ses_rroot"]');
    await resume.waitFor();
    await shot(page, 'sessions-refused');
    if (process.env.VIGIL_UPDATE_DOCS === '1') {
      mkdirSync(join(ROOT, 'docs'), { recursive: true });
      writeFileSync(
        join(ROOT, 'docs', 'sessions.png'),
        await page.screenshot({ clip: { x: 0, y: 0, width: 1400, height: 330 } }),
      );
    }
    await resume.click();
    await resume.waitFor({ state: 'detached' });
    expect((await post('/gate', { conversation: 'ses_stuck' })).json.action).toBe('allow');
    await page.close();
  });

  it('Channels: toggle, Send test alert shows delivered, then the failure reason', async () => {
    const page = await openPage(`${base}/#channels`);
    await live(page);
    await useToken(page);
    const enabled = page.locator('[data-channel="hook"] [data-knob="notifications.channels[].enabled"]');
    await enabled.uncheck();
    await eventually(async () => (await get('/channels'))[0].enabled === false);
    await enabled.check();
    await eventually(async () => (await get('/channels'))[0].enabled === true);
    await page.selectOption('[data-channel="hook"] select', 'critical');
    await eventually(async () => (await get('/channels'))[0].min_severity === 'critical');

    const result = page.locator('[data-channel="hook"] .result');
    await page.click('[data-channel="hook"] button.test');
    await page.waitForFunction(() =>
      document.querySelector('[data-channel="hook"] .result')?.textContent?.startsWith('delivered'),
    );
    expect(receiver.got.some((a) => a.data?.test && a.data.title?.startsWith('TEST'))).toBe(true);
    receiver.fail = true;
    await page.click('[data-channel="hook"] button.test');
    await page.waitForFunction(() =>
      document.querySelector('[data-channel="hook"] .result')?.textContent?.startsWith('failed:'),
    );
    expect(await result.textContent()).toMatch(/500/);
    receiver.fail = false;
    await page.waitForSelector('[data-channel="hook"] tr.o-failed');
    await shot(page, 'channels');
    await page.click('#tab-sessions');
    await page.waitForSelector('#failures');
    await page.close();
  });

  it('Knobs: a change applies, a bad value shows the field error; every knob has a control', async () => {
    const page = await openPage(`${base}/#knobs`);
    await live(page);
    await useToken(page);
    await page.fill('[data-knob="progress.stall_turns"]', '5');
    await page.press('[data-knob="progress.stall_turns"]', 'Enter');
    await eventually(async () => (await get('/knobs')).progress.stall_turns === 5);
    await page.fill('[data-knob="modes.auto_recover.recover_window"]', '30m');
    await page.press('[data-knob="modes.auto_recover.recover_window"]', 'Enter');
    await eventually(async () => (await get('/knobs')).modes.auto_recover.recover_window === 1_800_000);
    await page.waitForFunction(
      () =>
        (document.querySelector('[data-knob="modes.auto_recover.recover_window"]') as HTMLInputElement).value === '30m',
    );

    await page.fill('[data-knob="progress.dup_warn"]', '2');
    await page.press('[data-knob="progress.dup_warn"]', 'Enter');
    const error = page.locator('tr:has([data-knob="progress.dup_warn"]) .field-error');
    await error.waitFor();
    expect(await error.textContent()).toMatch(/<=\s*1|too big/i);
    expect(await page.getAttribute('[data-knob="progress.dup_warn"]', 'aria-invalid')).toBe('true');
    expect((await get('/knobs')).progress.dup_warn).toBe(0.25);
    await shot(page, 'knobs');

    // Knob coverage on the rendered page: every controlled knob has its control.
    const seen = new Set(await page.$$eval('[data-knob]', (els) => els.map((e) => e.getAttribute('data-knob') ?? '')));
    await page.click('#tab-channels');
    await page.waitForSelector('[data-channel]');
    for (const k of await page.$$eval('[data-knob]', (els) => els.map((e) => e.getAttribute('data-knob') ?? '')))
      seen.add(k);
    const missing = controlledLeaves(createRegistry()).filter((k) => !seen.has(k));
    expect(missing).toEqual([]);
    await page.close();
  });

  it('Breakers, detector panels and the watchdog: a tripped model is resumed; a blind watchdog shows', async () => {
    await post(
      '/watchdog/heartbeat',
      { last_tick_at: Date.now(), result: { status: 'ok', sessions: 1 } },
      { 'content-type': 'application/json' },
    );
    const page = await openPage(`${base}/#breakers`);
    await live(page);
    await useToken(page);
    await page.waitForFunction(() => document.querySelector('#watchdog')?.textContent === 'ok');
    await post('/watchdog/heartbeat', {
      last_tick_at: Date.now(),
      result: { status: 'blind', error: 'unexpected shape' },
    });
    await page.waitForFunction(() => document.querySelector('#watchdog')?.textContent === 'blind');

    const r = await fetch(`${base}/knobs`, {
      method: 'PATCH',
      headers: { 'content-type': 'application/json', ...admin },
      body: JSON.stringify({
        modes: { mode: 'warn' },
        breaker: { min_sessions: 2, min_other_sessions: 2, min_ratio: 1, alpha: 1 },
      }),
    });
    expect(r.status).toBe(200);
    for (const i of [1, 2, 3]) {
      await post('/requests', requests(`ses_good${i}`, 'good/model', 2));
      await post('/requests', requests(`ses_bad${i}`, 'bad/model', 8));
      for (const ev of loopEvents(`ses_bad${i}`, 12)) await post('/progress', ev);
    }
    await eventually(async () => (await get('/breaker')).models.some((m: any) => m.model === 'bad/model' && m.tripped));
    const resume = page.locator('button[aria-label="Resume model bad/model"]');
    await resume.waitFor();
    await shot(page, 'breakers');
    await resume.click();
    await resume.waitFor({ state: 'detached' });
    expect((await get('/breaker')).models.find((m: any) => m.model === 'bad/model').tripped).toBe(false);

    await page.click('#tab-detectors');
    const row = page.locator('table[data-detector="behavior-breaker"] tr', { hasText: 'bad/model' });
    await row.waitFor();
    expect(await row.locator('td').nth(1).textContent()).toBe('no');
    await shot(page, 'detectors');
    await page.click('#tab-health');
    await page.waitForFunction(() => document.querySelector('[data-key="watchdog"]')?.textContent === 'blind');
    expect(await page.textContent('[data-key="behavior-breaker: tripped models"]')).toBe('none');
    await shot(page, 'health');
    await page.close();
  });

  it('Spend: the chart of the last days (in loops vs total, per model) and the budget beside the session', async () => {
    // Ten days of spend on a test clock: a healthy session per model per day, and on
    // most days a loop on the cheap model (reads of one file) that the judge flags.
    const clock = new FakeClock(Date.parse('2026-09-17T09:00:00Z'));
    const v = await testVigil({
      backend: 'memory',
      clock,
      overlay: { money: { budgets: { tree: { usd: 1 } } }, server: { rate_limit: { max: 1_000_000 } } },
    });
    const s = await serve(v);
    const send = async (path: string, body: unknown) => {
      const r = await fetch(`${s.base}${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
      expect(r.status).toBe(202);
    };
    const call = (session: string, model: string, usd: number, i: number, parent?: string) => ({
      session_id: session,
      ...(parent ? { parent_session_id: parent } : {}),
      request_id: `${session}-${i}`,
      model,
      prompt_tokens: 20_000 + 1_000 * i,
      cost_usd: usd,
      ts: clock.advance(20_000),
    });
    try {
      for (let d = 0; d < 10; d++) {
        clock.set(Date.parse('2026-09-17T09:00:00Z') + d * 86_400_000);
        for (let i = 0; i < 8 + (d % 3) * 4; i++)
          await send('/requests', call(`ses_day${d}_ok`, 'anthropic/claude-sonnet-5', 0.09, i));
        for (let i = 0; i < 10 + d; i++)
          await send('/requests', call(`ses_day${d}_glm`, 'z-ai/glm-5.3-flash', 0.02, i));
        // The day ends: a flagged session idle since ends its stretch (the service's timer ticks; here the test does).
        if (d > 0) {
          clock.advance(3_600_000);
          await v.engine.tick();
        }
        if (d % 4 === 3) continue; // a day without a loop
        for (const [i, ev] of loopEvents(`ses_day${d}_loop`, 14 + 2 * d, { parent: `ses_day${d}_orch` }).entries()) {
          await send('/requests', call(`ses_day${d}_loop`, 'z-ai/glm-5.3-flash', 0.04, i, `ses_day${d}_orch`));
          await send('/progress', { ...ev, ts: clock.now() });
        }
      }
      const page = await openPage(`${s.base}/#sessions`);
      await live(page);
      // Beside the session: its tree's spend today against the tree ceiling.
      const cell = page.locator('[data-session="ses_day9_loop"] td.budget');
      await cell.waitFor();
      expect(await cell.textContent()).toBe('tree $1.28/$1.00 128%');
      expect(await cell.getAttribute('class')).toContain('budget-over');
      await page.waitForSelector('tr.tree[data-root="ses_day9_orch"] .badge.refused');

      await page.click('#tab-detectors');
      const chart = page.locator('figure.chart');
      await chart.locator('canvas').waitFor();
      const legend = await chart.locator('.u-legend .u-label').allTextContents();
      expect(legend).toEqual(
        expect.arrayContaining([
          'anthropic/claude-sonnet-5: total',
          'anthropic/claude-sonnet-5: in loops',
          'z-ai/glm-5.3-flash: total',
          'z-ai/glm-5.3-flash: in loops',
        ]),
      );
      // The table under it carries the same figures: the last day's loop on the cheap model.
      const row = page.locator('table[data-detector="money"] tr', { hasText: '2026-09-26' }).filter({
        hasText: 'z-ai/glm-5.3-flash',
      });
      expect(await row.locator('td').nth(3).textContent()).toBe('1.28');
      const box = page.locator('.panel-box', { has: chart });
      await shot(page, 'money');
      if (process.env.VIGIL_UPDATE_DOCS === '1') {
        const b = (await box.boundingBox())!;
        writeFileSync(
          join(ROOT, 'docs', 'money.png'),
          await page.screenshot({
            clip: { x: b.x, y: b.y, width: Math.min(b.width, 1000), height: Math.min(b.height, 420) },
          }),
        );
      }
      await page.close();
    } finally {
      const closing = s.app.close();
      s.app.server.closeAllConnections();
      await closing;
      await v.close();
    }
  });

  it('off loopback: the page asks for the token, then reads and streams with it', async () => {
    const v = await testVigil({
      backend: 'memory',
      env: { VIGIL_ADMIN_TOKEN: TOKEN, VIGIL_INGEST_TOKEN: 'ingest-t0ken-for-the-browser-test' },
      overlay: { progress: LOOP_KNOBS },
    });
    const guarded = await serve(v, '0.0.0.0');
    try {
      const page = await openPage(`${guarded.base}/`);
      await page.waitForFunction(() => document.querySelector('#conn')?.textContent === 'token needed');
      const html = await page.content();
      expect(html).not.toContain(TOKEN);
      await shot(page, 'token-needed');
      await useToken(page);
      expect(await page.content()).not.toContain(TOKEN);
      // The sensors' token, as the plugin sends it (the admin token is not for ingestion).
      await fetch(`${guarded.base}/progress`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: 'Bearer ingest-t0ken-for-the-browser-test' },
        body: JSON.stringify(loopEvents('ses_remote', 12)),
      });
      await page.waitForFunction(
        () => document.querySelector('[data-session="ses_remote"] .verdict')?.textContent?.trim() === 'looping',
      );
      await page.close();
    } finally {
      const closing = guarded.app.close();
      guarded.app.server.closeAllConnections();
      await closing;
      await v.close();
    }
  });
});
