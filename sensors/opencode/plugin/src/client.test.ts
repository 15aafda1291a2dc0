import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { parseSessionKeys, sessionKey } from '../../../../core/session-key.ts';
import type { ProgressEvent } from '../../../../core/wire.ts';
import { type Trouble, VigilClient } from './client.ts';

// A stand-in Vigil service on loopback that can be up, down (503), hanging or refusing
// (400), recording what reached it.
interface Hit {
  method: string;
  url: string;
  headers: IncomingMessage['headers'];
  body: any;
}
let server: Server;
let url = '';
let mode: 'up' | 'down' | 'hang' | 'reject' = 'up';
let hits: Hit[] = [];
let directives: unknown[] = [];

beforeEach(async () => {
  mode = 'up';
  hits = [];
  directives = [];
  server = createServer((req, res) => {
    let raw = '';
    req.on('data', (c) => (raw += c));
    req.on('end', () => {
      if (mode === 'hang') return; // never answers
      const body = raw ? JSON.parse(raw) : undefined;
      if (mode === 'down') return res.writeHead(503).end();
      if (mode === 'reject') return res.writeHead(400, { 'content-type': 'application/json' }).end('{"message":"bad"}');
      hits.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers, body });
      const accepted = Array.isArray(body) ? body.length : 1;
      res.writeHead(req.method === 'POST' && req.url === '/progress' ? 202 : 200, {
        'content-type': 'application/json',
      });
      res.end(JSON.stringify(req.url?.startsWith('/directives/ack') ? { acknowledged: 1 } : { accepted, directives }));
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterEach(async () => {
  server.closeAllConnections();
  await new Promise((r) => server.close(r));
});

const ev = (i: number): ProgressEvent => ({
  kind: 'tool',
  session_id: 'ses_a',
  tool: 'read',
  call_id: `call_${i}`,
  fingerprint: 'a'.repeat(64),
  target: 'src/app.js',
  exit: 0,
  landed: false,
  ts: 1_000 + i,
});

async function until(what: string, fn: () => boolean, ms = 10_000): Promise<void> {
  const end = Date.now() + ms;
  while (!fn()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

const fast = { flushDelayMs: 5, retryMinMs: 20, retryMaxMs: 80, timeoutMs: 200 };
const sentIds = () =>
  hits.filter((h) => h.url === '/progress').flatMap((h) => h.body.map((e: ProgressEvent) => e.call_id));

describe('VigilClient', () => {
  it('batches a burst into one POST /progress with the plugin header', async () => {
    const c = new VigilClient({ url, pluginId: 'vigil-opencode/1.0.0+abc', ...fast, flushDelayMs: 50 });
    for (let i = 0; i < 5; i++) c.send(ev(i));
    await until('the batch', () => c.stats.sent === 5);
    expect(hits).toHaveLength(1);
    expect(hits[0].headers['x-vigil-plugin']).toBe('vigil-opencode/1.0.0+abc');
    expect(hits[0].body).toHaveLength(5);
    await c.close();
  });

  it('keeps events while the service is down and sends them in order when it is back', async () => {
    mode = 'down';
    const c = new VigilClient({ url, pluginId: 'p/1', ...fast });
    for (let i = 0; i < 3; i++) c.send(ev(i));
    await until('a failed send', () => c.stats.failures >= 1);
    expect(c.pending).toBe(3);
    c.send(ev(3));
    mode = 'up';
    await until('the retry', () => c.pending === 0 && c.stats.sent === 4);
    expect(sentIds()).toEqual(['call_0', 'call_1', 'call_2', 'call_3']);
    await c.close();
  });

  it('gives up on a hanging service at the timeout and retries later', async () => {
    mode = 'hang';
    const c = new VigilClient({ url, pluginId: 'p/1', ...fast, timeoutMs: 50 });
    c.send(ev(0));
    await until('a timed-out send', () => c.stats.failures >= 1);
    mode = 'up';
    await until('the retry', () => c.stats.sent === 1);
    await c.close();
  });

  it('bounds the buffer: the oldest events go first', async () => {
    mode = 'down';
    const c = new VigilClient({ url, pluginId: 'p/1', ...fast, maxBuffer: 10 });
    for (let i = 0; i < 25; i++) c.send(ev(i));
    expect(c.pending).toBe(10);
    expect(c.stats.dropped).toBe(15);
    mode = 'up';
    await until('the rest sent', () => c.stats.sent === 10);
    expect(sentIds()).toEqual(Array.from({ length: 10 }, (_, i) => `call_${i + 15}`));
    await c.close();
  });

  it('drops a batch the service refuses (4xx): a retry would not pass either', async () => {
    mode = 'reject';
    const c = new VigilClient({ url, pluginId: 'p/1', ...fast });
    c.send(ev(0));
    await until('the rejection', () => c.stats.rejected === 1);
    expect(c.pending).toBe(0);
    await c.close();
  });

  it('hands the directives of each answer over; polls and acks', async () => {
    const got: unknown[] = [];
    const d = { id: 'd1', root_id: 'ses_a', type: 'toast', session_id: 'ses_a', created_at: 1 };
    directives = [d];
    const c = new VigilClient({ url, pluginId: 'p/1', ...fast, onDirectives: (ds) => got.push(...ds) });
    c.send(ev(0));
    await until('the directives', () => got.length === 1);
    expect(got[0]).toEqual(d);
    expect(await c.directives('ses_a')).toEqual([d]);
    expect(hits.at(-1)?.url).toBe('/directives?session=ses_a');
    expect(await c.ack([{ id: 'd1', root_id: 'ses_a', session_id: 'ses_a' }])).toBe(true);
    expect(hits.at(-1)?.body).toEqual({ acks: [{ id: 'd1', root_id: 'ses_a', session_id: 'ses_a' }] });
    mode = 'down';
    expect(await c.directives('ses_a')).toBeUndefined();
    expect(await c.ack([{ id: 'd1', root_id: 'ses_a', session_id: 'ses_a' }])).toBe(false);
    await c.close();
  });

  it('sends the key of every session a request names: progress (with parents), directive reads, acks', async () => {
    const secret = Buffer.alloc(32, 5);
    const c = new VigilClient({
      url,
      pluginId: 'p/1',
      ...fast,
      flushDelayMs: 50,
      sessionKey: (id) => sessionKey(secret, id),
    });
    c.send(ev(0));
    c.send({ ...ev(1), session_id: 'ses_kid', parent_session_id: 'ses_a' });
    await until('the batch', () => c.stats.sent === 2);
    await c.directives('ses_kid');
    await c.ack([
      { id: 'd1', root_id: 'ses_a', session_id: 'ses_kid' },
      { id: 'd2', root_id: 'ses_a', session_id: 'ses_kid' },
    ]);
    const keysOf = (h: Hit) => {
      const k = parseSessionKeys(h.headers['x-vigil-session-key'] as string);
      if (typeof k === 'string') throw new Error(k);
      return Object.fromEntries(k.bySession);
    };
    const k = (id: string) => sessionKey(secret, id);
    expect(hits.map((h) => [h.url, keysOf(h)])).toEqual([
      ['/progress', { ses_a: k('ses_a'), ses_kid: k('ses_kid') }],
      ['/directives?session=ses_kid', { ses_kid: k('ses_kid') }],
      ['/directives/ack', { ses_kid: k('ses_kid') }],
    ]);
    await c.close();
  });

  it("a compaction_done carries its tree root's key too (it lifts the tree)", async () => {
    const secret = Buffer.alloc(32, 6);
    const c = new VigilClient({
      url,
      pluginId: 'p/1',
      ...fast,
      sessionKey: (id) => sessionKey(secret, id),
      rootOf: (id) => (id === 'ses_grandkid' || id === 'ses_kid' ? 'ses_top' : id),
    });
    c.send({ kind: 'compaction_done', session_id: 'ses_grandkid', parent_session_id: 'ses_kid', ts: 1, landed: false });
    await until('sent', () => c.stats.sent === 1);
    const k = parseSessionKeys(hits[0].headers['x-vigil-session-key'] as string);
    if (typeof k === 'string') throw new Error(k);
    expect([...k.bySession.keys()].sort()).toEqual(['ses_grandkid', 'ses_kid', 'ses_top']);
    expect(k.bySession.get('ses_top')).toBe(sessionKey(secret, 'ses_top'));
    await c.close();
  });

  it('splits a batch so no request names more sessions than one key header holds', async () => {
    const c = new VigilClient({
      url,
      pluginId: 'p/1',
      ...fast,
      flushDelayMs: 50,
      sessionKey: (id) => `k${id}`.repeat(8),
    });
    for (let i = 0; i < 150; i++) c.send({ ...ev(i), session_id: `ses_${i}` });
    await until('all sent', () => c.stats.sent === 150);
    expect(hits.map((h) => h.body.length)).toEqual([100, 50]);
    for (const h of hits) expect(String(h.headers['x-vigil-session-key']).split(' ')).toHaveLength(h.body.length);
    await c.close();
  });

  it('a refusal for a session bound to another key is said as such (SESSION_KEY_MISMATCH)', async () => {
    const troubles: Trouble[] = [];
    server.removeAllListeners('request');
    server.on('request', (_req, res) =>
      res
        .writeHead(403, { 'content-type': 'application/json' })
        .end('{"statusCode":403,"code":"SESSION_KEY_MISMATCH","message":"headers.x-vigil-session-key: ..."}'),
    );
    const c = new VigilClient({ url, pluginId: 'p/1', ...fast, onTrouble: (t) => troubles.push(t) });
    c.send(ev(0));
    await c.flush();
    expect(troubles).toEqual([{ kind: 'unauthorized', url, detail: 'answered 403 SESSION_KEY_MISMATCH' }]);
    expect(c.stats.rejected).toBe(1);
    await c.close();
  });

  it('without a key source it sends no key header (an older service, no secret)', async () => {
    const c = new VigilClient({ url, pluginId: 'p/1', ...fast });
    c.send(ev(0));
    await until('sent', () => c.stats.sent === 1);
    expect(hits[0].headers['x-vigil-session-key']).toBeUndefined();
    await c.close();
  });

  it('never throws, even with nothing listening', async () => {
    const c = new VigilClient({ url: 'http://127.0.0.1:9', pluginId: 'p/1', ...fast });
    c.send(ev(0));
    await c.flush();
    expect(c.stats.failures).toBeGreaterThanOrEqual(1);
    expect(await c.directives('ses_a')).toBeUndefined();
    await c.close();
  });

  it('says once that nothing answers, and again only after a success and a new outage', async () => {
    const troubles: Trouble[] = [];
    // A port nothing listens on: taken, then given back.
    const probe = createServer();
    await new Promise<void>((r) => probe.listen(0, '127.0.0.1', r));
    const closed = `http://127.0.0.1:${(probe.address() as AddressInfo).port}`;
    await new Promise((r) => probe.close(r));
    const c = new VigilClient({
      url: closed,
      pluginId: 'p/1',
      ...fast,
      onTrouble: (t) => troubles.push(t),
    });
    for (let i = 0; i < 3; i++) {
      c.send(ev(i));
      await c.flush();
    }
    await c.directives('ses_a');
    expect(troubles).toEqual([{ kind: 'unreachable', url: closed, detail: 'connection refused' }]);
    await c.close();

    const up = new VigilClient({ url, pluginId: 'p/1', ...fast, onTrouble: (t) => troubles.push(t) });
    mode = 'down';
    up.send(ev(0));
    await up.flush();
    await up.flush();
    expect(troubles.at(-1)).toEqual({ kind: 'unreachable', url, detail: 'answered 503' });
    expect(troubles).toHaveLength(2);
    mode = 'up';
    await until('sent after the outage', () => up.stats.sent === 1);
    mode = 'down';
    up.send(ev(1));
    await up.flush();
    expect(troubles).toHaveLength(3);
    await up.close();
  });

  it('a URL where something else answers (404): kept and retried, and said once', async () => {
    const troubles: Trouble[] = [];
    const c = new VigilClient({ url: `${url}/nothing`, pluginId: 'p/1', ...fast, onTrouble: (t) => troubles.push(t) });
    server.removeAllListeners('request');
    server.on('request', (_req, res) => res.writeHead(404).end('Not Found'));
    c.send(ev(0));
    await c.flush();
    await c.flush();
    expect(troubles).toEqual([{ kind: 'not_vigil', url: `${url}/nothing`, detail: 'answered 404' }]);
    expect(c.stats.rejected).toBe(0);
    expect(c.pending).toBe(1);
    await c.close();
  });
});
