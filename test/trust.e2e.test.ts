import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join, resolve } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { Vigil } from '../core/vigil.ts';
import { buildServer } from '../service/server.ts';
import { freePort, startProc, stopProc, until } from './fixtures/opencode-e2e/procs.ts';
import { tempDir, testVigil } from './helpers/index.ts';
import { fakeOpencode, ocMessages, ocSession } from './helpers/opencode.ts';
import { TestRedis } from './helpers/redis-server.ts';

// Trust, as an operator meets it with real processes: the watchdog reporting to a
// service that requires both tokens, alerts kept across a clean stop of the memory
// backend, a Slack webhook's secret path quoted back by the receiver, a wrong Redis
// password.

const ROOT = resolve(import.meta.dirname, '..');
const ADMIN = 'adm1n-t0ken-for-the-trust-e2e';
const INGEST = 'ingest-t0ken-for-the-trust-e2e';
const SECRET = `whsec_${randomBytes(24).toString('base64')}`;

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
});

const bearer = (t: string) => ({ authorization: `Bearer ${t}` });

async function json<T = any>(url: string, init: RequestInit = {}): Promise<{ status: number; data: T }> {
  const res = await fetch(url, { ...init, signal: AbortSignal.timeout(20_000) });
  const text = await res.text();
  return { status: res.status, data: (text ? JSON.parse(text) : null) as T };
}

const post = (url: string, body: unknown, headers: Record<string, string> = {}) =>
  json(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });

/** `vigil serve` as a process on `port`, its config from `yaml`; resolves once /health answers. */
async function serve(o: { dir: string; port: number; yaml: string[]; env: NodeJS.ProcessEnv; name: string }) {
  const file = join(o.dir, `${o.name}.yaml`);
  writeFileSync(file, o.yaml.join('\n'));
  const proc = startProc(
    o.name,
    process.execPath,
    ['bin/vigil.mjs', 'serve', '--port', String(o.port), '--config', file],
    {
      cwd: ROOT,
      env: { PATH: process.env.PATH, HOME: o.dir, VIGIL_LOG_FORMAT: 'json', ...o.env },
      logDir: o.dir,
    },
  );
  cleanups.push(() => stopProc(proc));
  const url = `http://127.0.0.1:${o.port}`;
  await until('vigil serve', async () => (await json(`${url}/health`, { headers: bearer(ADMIN) })).status === 200, {
    detail: () => proc.output(),
  });
  return { proc, url };
}

/**
 * A webhook receiver: in `hold` it keeps every request unanswered until release();
 * answered deliveries are counted by the transition they carry (dedup_key/state/seq).
 */
class Receiver {
  readonly got = new Set<string>();
  held: { req: IncomingMessage; res: ServerResponse; key: string }[] = [];
  mode: 'hold' | 'ok' = 'hold';
  seen = 0;
  url = '';
  private server: Server | undefined;

  async start(): Promise<void> {
    this.server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        this.seen++;
        const d = JSON.parse(Buffer.concat(chunks).toString('utf8')).data;
        const key = `${d.dedup_key}/${d.state}/${d.seq}`;
        if (this.mode === 'hold') this.held.push({ req, res, key });
        else this.answer(res, key);
      });
    });
    await new Promise<void>((r) => this.server!.listen(0, '127.0.0.1', r));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}/hook`;
  }

  private answer(res: ServerResponse, key: string): void {
    // A request its sender gave up on (a cut delivery) was not delivered.
    if (res.destroyed || res.socket?.destroyed) return;
    this.got.add(key);
    res.writeHead(204).end();
  }

  release(): void {
    this.mode = 'ok';
    for (const h of this.held.splice(0)) this.answer(h.res, h.key);
  }

  async stop(): Promise<void> {
    const s = this.server;
    if (!s) return;
    s.closeAllConnections();
    await new Promise<void>((r) => s.close(() => r()));
  }
}

describe('the watchdog and a service that requires both tokens', () => {
  it('reports its verdicts and heartbeat with the ingestion token (the admin token in its env too)', async () => {
    const dir = tempDir('vigil-trust-wd');
    // The service: off loopback in its config (so both tokens are required), reached on 127.0.0.1 here.
    const vigil: Vigil = await testVigil({
      backend: 'memory',
      env: { VIGIL_ADMIN_TOKEN: ADMIN, VIGIL_INGEST_TOKEN: INGEST },
      overlay: { server: { host: '0.0.0.0' } },
    });
    const app = await buildServer(vigil, { host: vigil.config.server.host });
    const serviceUrl = await app.listen({ host: '127.0.0.1', port: 0 });
    cleanups.push(async () => {
      await app.close();
      await vigil.close();
    });
    // An opencode session reading one file over and over: the watchdog's judge flags it.
    const sid = 'ses_wdtrust00000000000000001';
    const now = Date.now();
    const reads = Array.from({ length: 12 }, () => ({ tool: 'read', input: { filePath: '/work/project/nav.js' } }));
    const oc = await fakeOpencode({
      health: { healthy: true, version: '1.18.33' },
      sessions: [ocSession(sid, now)],
      messages: { [sid]: ocMessages(sid, now - 60_000, reads) },
    });
    cleanups.push(() => oc.close());
    const cfg = join(dir, 'vigil.yaml');
    writeFileSync(
      cfg,
      [
        'server:',
        '  host: 0.0.0.0',
        'notifications:',
        '  channels: []',
        'watchdog:',
        `  servers: [${oc.url}]`,
        `  service_url: ${serviceUrl}`,
        `  state_file: ${join(dir, 'state.json')}`,
        `  lock_file: ${join(dir, 'watchdog.lock')}`,
        `  opencode_db: ${join(dir, 'none.db')}`,
        `  rc_servers_file: ${join(dir, 'rc.json')}`,
        '',
      ].join('\n'),
    );
    // The deploy's env file holds both tokens; the watchdog must pick the ingestion one.
    const tick = startProc('watchdog-tick', process.execPath, ['bin/vigil.mjs', 'watchdog', 'tick', '--config', cfg], {
      cwd: ROOT,
      env: { PATH: process.env.PATH, HOME: dir, VIGIL_ADMIN_TOKEN: ADMIN, VIGIL_INGEST_TOKEN: INGEST },
      logDir: join(dir, 'logs'),
    });
    cleanups.push(() => stopProc(tick));
    expect(await tick.exited, tick.output()).toBe(0);
    expect(tick.output()).toMatch(/^watchdog tick: flagged servers=1 sessions=1 flagged=1 .*service=up$/m);

    const health = await json(`${serviceUrl}/health`, { headers: bearer(ADMIN) });
    expect(health.data.watchdog?.result).toMatchObject({ status: 'flagged', servers: 1, sessions: 1, flagged: 1 });
    const rows = (await json(`${serviceUrl}/sessions`, { headers: bearer(ADMIN) })).data as {
      session: string;
      source: string;
      verdict: string;
    }[];
    expect(rows.find((r) => r.session === sid)).toMatchObject({ source: 'watchdog' });
    expect(rows.find((r) => r.session === sid)?.verdict).not.toBe('ok');
  }, 90_000);
});

describe('a clean stop of the memory backend with alerts queued', () => {
  it('spools the undelivered alerts on SIGTERM; the next start delivers them, /health counts them meanwhile', async () => {
    const dir = tempDir('vigil-trust-spool');
    const r = new Receiver();
    await r.start();
    cleanups.push(() => r.stop());
    const port = await freePort();
    const opts = {
      dir,
      port,
      env: { HOOK_SECRET: SECRET, VIGIL_ADMIN_TOKEN: ADMIN, XDG_STATE_HOME: join(dir, 'state') },
      yaml: [
        'notifications:',
        '  drain_timeout: 1s',
        '  channels:',
        '    - name: hook',
        '      type: webhook',
        `      url: ${r.url}`,
        '      secret_env: HOOK_SECRET',
        '      min_severity: info',
        '      quiet_window: 0s',
        '      rate_limit: { max: 100000, window: 1m }',
        '',
      ],
    };
    const first = await serve({ ...opts, name: 'spool-first' });
    for (let i = 0; i < 5; i++) {
      const v = { session_id: `ses_spool${i}`, level: 'looping', reason: 'looping (test)', source: 'test' };
      expect((await post(`${first.url}/verdicts`, v)).status).toBe(202);
    }
    // The receiver holds the first delivery; the other four wait behind it.
    await until('the first delivery at the receiver', () => r.held.length === 1);
    await stopProc(first.proc, 30_000);
    expect(await first.proc.exited).toBe(0);
    expect(first.proc.output()).toContain('5 alerts not delivered before shutdown, spooled');
    const spool = join(dir, 'state', 'vigil', `alert-spool-${port}.json`);
    expect(JSON.parse(readFileSync(spool, 'utf8')).jobs).toHaveLength(5);
    expect(r.got.size).toBe(0);

    r.held = [];
    const second = await serve({ ...opts, name: 'spool-second' });
    // Still held at the receiver: all five wait, and /health says so.
    const health = await json(`${second.url}/health`);
    expect(health.data).toMatchObject({ queue: 'memory', queue_spooled: 5 });
    expect(existsSync(spool)).toBe(false);
    r.release();
    await until('the five spooled alerts delivered', () => r.got.size === 5, { detail: () => second.proc.output() });
    expect([...r.got].sort()).toEqual([0, 1, 2, 3, 4].map((i) => `ses_spool${i}/trigger/1`));
    await until('nothing spooled left', async () => (await json(`${second.url}/health`)).data.queue_spooled === 0);
  }, 120_000);
});

describe('a Slack webhook URL quoted back by the receiver', () => {
  it('never reaches the test-alert answer, /deliveries or the log', async () => {
    const dir = tempDir('vigil-trust-slack');
    const token = randomBytes(12).toString('hex'); // 24 characters, as Slack's last segment
    const path = `/services/T01ABCDEFG/B01ABCDEFG/${token}`;
    // A receiver that answers 400 and quotes the request path, as some proxies and gateways do.
    const srv = createServer((req, res) => {
      req.resume();
      req.on('end', () => res.writeHead(400, { 'content-type': 'text/plain' }).end(`${req.url}: invalid_token`));
    });
    await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
    cleanups.push(() => new Promise((r) => srv.close(r)));
    const hook = `http://127.0.0.1:${(srv.address() as AddressInfo).port}${path}`;
    const { proc, url } = await serve({
      dir,
      port: await freePort(),
      name: 'slack',
      env: { SLACK_URL: hook, VIGIL_ADMIN_TOKEN: ADMIN, VIGIL_LOG_LEVEL: 'info', XDG_STATE_HOME: join(dir, 'state') },
      yaml: [
        'notifications:',
        '  channels:',
        '    - name: slack',
        '      type: webhook',
        '      format: slack',
        '      url_env: SLACK_URL',
        '      min_severity: info',
        '',
      ],
    });
    const test = await json(`${url}/channels/slack/test?wait_ms=15000`, { method: 'POST', headers: bearer(ADMIN) });
    expect(test.data).toMatchObject({ outcome: 'failed' });
    expect(test.data.reason).toMatch(/^slack answered 400 /);
    // A real alert too, so its failure is logged as the pipeline logs it.
    await post(`${url}/verdicts`, {
      session_id: 'ses_slack',
      level: 'looping',
      reason: 'looping (test)',
      source: 'test',
    });
    await until('the alert failed', async () => {
      const d = (await json(`${url}/deliveries`)).data as { test?: boolean; outcome: string }[];
      return d.some((x) => !x.test && x.outcome === 'failed');
    });
    const deliveries = JSON.stringify((await json(`${url}/deliveries`)).data);
    await stopProc(proc);
    const log = proc.output();
    expect(log).toContain('alert delivery failed');
    for (const [where, text] of [
      ['test answer', JSON.stringify(test.data)],
      ['/deliveries', deliveries],
      ['log', log],
    ] as const) {
      expect(text, where).not.toContain(token);
      expect(text, where).not.toContain('/services/T01ABCDEFG/B01ABCDEFG');
    }
    expect(deliveries).toContain('[REDACTED]');
  }, 90_000);
});

describe('a wrong Redis password', () => {
  function vigil(args: string[], env: NodeJS.ProcessEnv): Promise<{ code: number; out: string; err: string }> {
    return new Promise((r) =>
      execFile(
        process.execPath,
        ['bin/vigil.mjs', ...args],
        { cwd: ROOT, env: { PATH: process.env.PATH, HOME: tempDir('vigil-trust-home'), ...env }, timeout: 60_000 },
        (e, out, err) => r({ code: e ? ((e as { code?: number }).code ?? 1) : 0, out, err }),
      ),
    );
  }

  it('is reported as AUTH_FAILED (refused credentials), not as a Redis that does not answer', async () => {
    const redis = await TestRedis.start({ password: 'the-right-pass-0123' });
    cleanups.push(() => redis.down('kill'));
    const url = `redis://:the-wrong-pass-4567@127.0.0.1:${redis.port}`;
    const served = await vigil(['serve', '--port', '0'], { REDIS_URL: url });
    expect(served.code).toBe(1);
    expect(served.err).toBe(
      `vigil: Redis at redis://[REDACTED]@127.0.0.1:${redis.port} refused the credentials (WRONGPASS): AUTH_FAILED (store.redis_url_env: REDIS_URL)\n`,
    );
    const check = await vigil(['config', 'check'], { REDIS_URL: url });
    expect(check.out).toContain(
      `not read: Redis at redis://[REDACTED]@127.0.0.1:${redis.port} refused the credentials (AUTH_FAILED)`,
    );
    expect(`${check.out}${check.err}${served.err}`).not.toContain('the-wrong-pass');
    // The right password: it serves.
    const ok = await vigil(['config', 'check'], { REDIS_URL: `redis://:the-right-pass-0123@127.0.0.1:${redis.port}` });
    expect(ok.out).toContain(`read from Redis at redis://[REDACTED]@127.0.0.1:${redis.port}`);
  }, 90_000);
});
