import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { z } from 'zod/mini';
import type { HookBridge } from '../../core/sensor.ts';
import { parseSessionKeys, sessionKey } from '../../core/session-key.ts';
import { hookHarness } from '../../test/helpers/hooks.ts';
import { claudeCodeBridge } from '../claude-code/bridge.ts';
import { httpTransport } from './client.ts';
import { HookHost } from './hook-host.ts';

// The resident half of the hook sensors: fail open whatever Vigil does, one session's
// calls in order, a bridge's state kept across a restart, every report signed with the
// session's key.

const PRE = {
  session_id: 'ses-h1',
  transcript_path: '/nonexistent/t.jsonl',
  cwd: '/w',
  hook_event_name: 'PreToolUse',
  tool_name: 'Read',
  tool_input: { file_path: '/w/a.js' },
  tool_use_id: 'toolu_1',
};

const closedPort = async () => {
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const port = (srv.address() as { port: number }).port;
  await new Promise((r) => srv.close(r));
  return port;
};

describe('the hook host fails open', () => {
  it('an answer past the deadline is not carried out: its directives are not acknowledged, so the next call gets them', async () => {
    const block = { id: 'd1', type: 'block', session_id: 'a', root_id: 'a' };
    const sent: string[] = [];
    let slow = true;
    const transport = {
      request: async (_method: string, path: string) => {
        sent.push(path);
        if (path.startsWith('/directives/ack')) return {};
        if (slow) await new Promise((r) => setTimeout(r, 200));
        return { directives: [block] };
      },
    };
    const asks: HookBridge = {
      sensor: 'asks',
      sessionOf: (p) => (p as { session_id: string }).session_id,
      handle: (_p, io) =>
        io.exchange([], 'a', (ds) => ({
          output: { denied: ds.map((d) => d.id) },
          acks: ds.map((d) => ({ id: d.id, root_id: d.root_id, session_id: d.session_id })),
          markers: [],
        })),
    };
    const host = new HookHost({
      bridges: new Map([['asks', asks]]),
      transport,
      secret: randomBytes(32),
      stateDir: mkdtempSync(join(tmpdir(), 'vigil-late-')),
      version: 't',
      deadlineMs: 50,
    });
    try {
      expect(await host.handle('asks', JSON.stringify({ session_id: 'a' }), host.key)).toEqual({
        status: 200,
        body: '',
      });
      await host.close(); // the late call has finished
      expect(sent.filter((p) => p.startsWith('/directives/ack'))).toEqual([]);
      slow = false;
      const next = await host.handle('asks', JSON.stringify({ session_id: 'a' }), host.key);
      expect(JSON.parse(next.body)).toEqual({ denied: ['d1'] });
      expect(sent.filter((p) => p.startsWith('/directives/ack'))).toHaveLength(1);
    } finally {
      await host.close();
    }
  });

  it('with nothing listening at the service it answers no opinion', async () => {
    const transport = httpTransport({ url: `http://127.0.0.1:${await closedPort()}`, timeoutMs: 500 });
    const h = hookHarness([claudeCodeBridge], { transport });
    expect(await h.call('claude-code', PRE)).toBeUndefined();
  });

  it('a service that never answers is given up on at the deadline; the request did reach it', async () => {
    let seen = 0;
    const srv = createServer(() => {
      seen++; // never answers
    });
    await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
    try {
      const transport = httpTransport({
        url: `http://127.0.0.1:${(srv.address() as { port: number }).port}`,
        timeoutMs: 60_000,
      });
      const h = hookHarness([claudeCodeBridge], { transport, deadlineMs: 150 });
      const t0 = Date.now();
      expect(await h.host.handle('claude-code', JSON.stringify(PRE), h.host.key)).toEqual({ status: 200, body: '' });
      expect(Date.now() - t0).toBeLessThan(5_000);
      expect(seen).toBe(1);
    } finally {
      srv.closeAllConnections();
      srv.close();
    }
  });

  it('a payload it does not understand is no opinion, and nothing is sent on', async () => {
    const h = hookHarness([claudeCodeBridge]);
    for (const bad of [
      'not json',
      '[]',
      '{"hook_event_name":"PreToolUse"}',
      '{"session_id":"a b","hook_event_name":"Stop"}',
    ])
      expect(await h.host.handle('claude-code', bad, h.host.key)).toEqual({ status: 200, body: '' });
    expect(h.sent).toEqual([]);
  });

  it('without the key, with another key, or for a sensor it does not know: refused, nothing read or sent', async () => {
    const h = hookHarness([claudeCodeBridge]);
    expect((await h.host.handle('claude-code', JSON.stringify(PRE), undefined)).status).toBe(401);
    expect((await h.host.handle('claude-code', JSON.stringify(PRE), 'y'.repeat(43))).status).toBe(401);
    expect((await h.host.handle('nobody', JSON.stringify(PRE), h.host.key)).status).toBe(404);
    expect(h.sent).toEqual([]);
  });

  it('a bridge that throws is no opinion, and the host says which sensor, never what', async () => {
    const errors: string[] = [];
    const boom: HookBridge = {
      sensor: 'boom',
      sessionOf: () => 's',
      handle: async () => {
        throw new Error('secret payload text');
      },
    };
    const host = new HookHost({
      bridges: new Map([['boom', boom]]),
      transport: { request: async () => undefined },
      secret: randomBytes(32),
      stateDir: mkdtempSync(join(tmpdir(), 'vigil-hh-')),
      version: 't',
      onError: (sensor, kind) => errors.push(`${sensor} ${kind}`),
    });
    expect(await host.handle('boom', '{}', host.key)).toEqual({ status: 200, body: '' });
    expect(errors).toEqual(['boom Error']);
  });
});

describe('calls Vigil never acts from', () => {
  const POST = { ...PRE, hook_event_name: 'PostToolUse', tool_response: { type: 'text', file: { content: 'x' } } };

  it("are answered at once; their events go with the session's next answered call, in one request", async () => {
    const h = hookHarness([claudeCodeBridge]);
    // answered before the bridge ran: nothing sent yet
    expect(await h.host.handle('claude-code', JSON.stringify(POST), h.host.key)).toEqual({ status: 200, body: '' });
    expect(h.sent).toEqual([]);
    await h.host.handle('claude-code', JSON.stringify({ ...PRE, tool_use_id: 'toolu_2' }), h.host.key);
    // the PreToolUse asked with the queued tool event: one /progress, no /directives
    expect(h.sent.map((r) => `${r.method} ${r.path}`)).toEqual(['POST /progress']);
    expect((h.sent[0].body as { call_id: string }[]).map((e) => e.call_id)).toEqual(['toolu_1']);
  });

  it('are sent on their own shortly after when no answered call follows', async () => {
    const sent: string[] = [];
    const host = new HookHost({
      bridges: new Map([['claude-code', claudeCodeBridge]]),
      transport: {
        async request(method, path) {
          sent.push(`${method} ${path}`);
          return { directives: [] };
        },
      },
      secret: randomBytes(32),
      stateDir: mkdtempSync(join(tmpdir(), 'vigil-hh-')),
      version: 't',
      flushMs: 30,
    });
    await host.handle('claude-code', JSON.stringify(POST), host.key);
    await new Promise((r) => setTimeout(r, 300));
    expect(sent).toEqual(['POST /progress']);
  });
});

describe('the hook host keeps order and state', () => {
  it("one session's calls run one at a time, in the order they came; other sessions are not held", async () => {
    const log: string[] = [];
    const slow: HookBridge = {
      sensor: 'slow',
      sessionOf: (p) => (p as { session_id: string }).session_id,
      async handle(p, io) {
        const { session_id, n } = p as { session_id: string; n: number };
        log.push(`${session_id}:${n}:start`);
        await new Promise((r) => setTimeout(r, n === 1 ? 60 : 1));
        const s = io.load(z.object({ seen: z.array(z.number()) }), () => ({ seen: [] as number[] }));
        s.seen.push(n);
        io.save(s);
        log.push(`${session_id}:${n}:end`);
        return { seen: s.seen };
      },
    };
    const h = hookHarness([slow]);
    const [a1, a2, b1] = await Promise.all([
      h.call('slow', { session_id: 'a', n: 1 }),
      h.call('slow', { session_id: 'a', n: 2 }),
      h.call('slow', { session_id: 'b', n: 3 }),
    ]);
    expect(a1).toEqual({ seen: [1] });
    expect(a2).toEqual({ seen: [1, 2] });
    expect(b1).toEqual({ seen: [3] });
    expect(log.indexOf('a:1:end')).toBeLessThan(log.indexOf('a:2:start'));
    expect(log.indexOf('b:3:end')).toBeLessThan(log.indexOf('a:1:end'));
    // kept on disk for a restart: a new host reads it back
    const again = new HookHost({
      bridges: new Map([['slow', slow]]),
      transport: { request: async () => undefined },
      secret: randomBytes(32),
      stateDir: h.stateDir,
      version: 't',
    });
    const r = await again.handle('slow', JSON.stringify({ session_id: 'a', n: 4 }), again.key);
    expect(JSON.parse(r.body)).toEqual({ seen: [1, 2, 4] });
    await again.close(); // states are written within a second, and at close
    expect(JSON.parse(readFileSync(join(h.stateDir, 'slow', 'a.json'), 'utf8'))).toEqual({ seen: [1, 2, 4] });
  });

  it('every request names its sessions with their keys, and the sensor in x-vigil-plugin', async () => {
    const h = hookHarness([claudeCodeBridge]);
    await h.call('claude-code', {
      ...PRE,
      hook_event_name: 'SubagentStart',
      agent_id: 'ag1',
      agent_type: 'general-purpose',
    });
    const [req] = h.sent;
    expect(req.path).toBe('/progress');
    expect(req.headers['x-vigil-plugin']).toBe('vigil-claude-code/test');
    const keys = parseSessionKeys(req.headers['x-vigil-session-key']);
    if (typeof keys === 'string') throw new Error(keys);
    // the child and its parent, each with HMAC(secret, id): the same keys a sensor of this user sends
    expect([...keys.bySession.keys()].sort()).toEqual(['ses-h1', 'ses-h1.ag1']);
    const secret = (h.host as unknown as { o: { secret: Buffer } }).o.secret;
    expect(keys.bySession.get('ses-h1.ag1')).toBe(sessionKey(secret, 'ses-h1.ag1'));
  });
});
