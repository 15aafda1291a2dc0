import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { z } from 'zod';
import { loadSensorSecret, parseSessionKeys, sessionKey } from '../../../core/session-key.ts';
import { ProgressEventSchema } from '../../../core/wire.ts';
import { CHILD, CWD, captured, ROOT } from './fixtures/captured.ts';

// The built file, as opencode loads it: self-contained, one plugin export, every hook
// safe, and nothing but converter output on the wire.

const HERE = import.meta.dirname;
let dir = '';
let file = '';
let version = '';
let mod: Record<string, unknown> = {};
let secretFile = '';

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'vigil-plugin-bundle-'));
  file = join(dir, 'vigil.js');
  // The plugin makes its sensor secret on first use: here, not in the user's home.
  secretFile = join(dir, 'state', 'sensor-secret');
  process.env.VIGIL_SENSOR_SECRET_FILE = secretFile;
  const out = execFileSync(process.execPath, [join(HERE, 'build.mjs'), '--out', file], { encoding: 'utf8' });
  version = /\((vigil-opencode\/\S+)\)/.exec(out)?.[1] ?? '';
  mod = await import(pathToFileURL(file).href);
}, 60_000);

afterAll(() => {
  delete process.env.VIGIL_SENSOR_SECRET_FILE;
  vi.unstubAllGlobals();
  rmSync(dir, { recursive: true, force: true });
});

type HookFn = (...a: unknown[]) => Promise<void>;
type PluginFn = (c: unknown, options?: unknown) => Promise<Record<string, HookFn>>;
const toasts: unknown[] = [];
const logs: unknown[] = [];

/** ctx as opencode 1.18 passes it, with a stand-in v1 client (results are {data, response}). */
function fakeCtx() {
  const ok = (data: unknown) => Promise.resolve({ data, response: new Response(null, { status: 200 }) });
  const calls: string[] = [];
  const client = {
    session: {
      get: (o: { path: { id: string } }) => ok({ id: o.path.id, parentID: o.path.id === CHILD ? ROOT : undefined }),
      abort: (o: { path: { id: string } }) => {
        calls.push(`abort ${o.path.id}`);
        return ok(true);
      },
      status: () => ok({}),
      summarize: () => ok(true),
      messages: () => ok([]),
      promptAsync: (o: { path: { id: string }; body: { parts: { text: string }[] } }) => {
        calls.push(`prompt_async ${o.path.id}: ${o.body.parts[0].text}`);
        return ok(undefined);
      },
    },
    tui: {
      showToast: (o: { body: unknown }) => {
        toasts.push(o.body);
        return ok(true);
      },
    },
    app: {
      log: (o: { body: unknown }) => {
        logs.push(o.body);
        return ok(true);
      },
    },
  };
  return {
    client,
    calls,
    directory: CWD,
    worktree: CWD,
    serverUrl: new URL('http://127.0.0.1:1/'),
    project: { id: 'p' },
  };
}

describe('the bundled plugin (dist/vigil.js)', () => {
  it('is self-contained: no imports but node: built-ins, one exported plugin function', () => {
    const text = readFileSync(file, 'utf8');
    const imports = [...text.matchAll(/^import .* from "([^"]+)";$/gm)].map((m) => m[1]);
    expect(imports.length).toBeGreaterThan(0);
    expect(imports.every((p) => p.startsWith('node:'))).toBe(true);
    expect([...text].every((c) => c.charCodeAt(0) < 128)).toBe(true); // ASCII only
    // opencode calls every exported function as a plugin: exactly one.
    expect(Object.keys(mod)).toEqual(['VigilPlugin']);
    expect(typeof mod.VigilPlugin).toBe('function');
    expect(version).toMatch(/^vigil-opencode\/\d+\.\d+\.\d+\+[0-9a-f]{8}$/);
    expect(text.startsWith(`// ${version.replace('/', ' ')}:`)).toBe(true);
  });

  it('runs the captured hooks: identity headers with its version, valid content-free events to VIGIL_URL', async () => {
    const posted: { url: string; body: any; headers: Record<string, string> }[] = [];
    vi.stubGlobal('fetch', async (url: string, init: RequestInit) => {
      posted.push({
        url,
        body: init.body ? JSON.parse(String(init.body)) : undefined,
        headers: init.headers as Record<string, string>,
      });
      return new Response(JSON.stringify({ accepted: 1, verdicts: [], directives: [] }), { status: 202 });
    });
    vi.stubEnv('VIGIL_URL', 'http://vigil.test:7411/');
    vi.stubEnv('VIGIL_POLL_MS', '60000');
    const ctx = fakeCtx();
    const hooks = (await (mod.VigilPlugin as (c: unknown) => Promise<Record<string, HookFn>>)(ctx)) as Record<
      string,
      HookFn
    >;
    const headers: Record<string, Record<string, string>> = {};
    for (const l of captured()) {
      if (l.hook === 'event') await hooks.event({ event: l.input.event });
      else if (l.hook === 'chat.headers') {
        const out = structuredClone(l.output);
        await hooks['chat.headers'](l.input, out);
        headers[l.input.sessionID] = out.headers;
      } else if (hooks[l.hook]) await hooks[l.hook](l.input, structuredClone(l.output));
    }
    await hooks.dispose();
    vi.unstubAllEnvs();

    expect(headers[ROOT]).toEqual({
      'X-Router-Conversation': ROOT,
      'X-Router-Agent': 'build',
      'X-Vigil-Plugin': version,
    });
    expect(headers[CHILD]).toEqual({
      'X-Router-Conversation': CHILD,
      'X-Router-Agent': 'general',
      'X-Router-Parent': ROOT,
      'X-Vigil-Plugin': version,
    });
    expect(posted.length).toBeGreaterThan(0);
    expect(
      posted.every((p) => p.url === 'http://vigil.test:7411/progress' && p.headers['x-vigil-plugin'] === version),
    ).toBe(true);
    // Each request carries the key of every session it names, from the secret it made (0600).
    expect(statSync(secretFile).mode & 0o777).toBe(0o600);
    const secret = loadSensorSecret(secretFile, { create: false });
    for (const p of posted) {
      const keys = parseSessionKeys(p.headers['x-vigil-session-key']);
      if (typeof keys === 'string') throw new Error(keys);
      const named = new Set<string>();
      for (const e of p.body as { session_id: string; parent_session_id?: string }[]) {
        named.add(e.session_id);
        if (e.parent_session_id) named.add(e.parent_session_id);
      }
      expect(new Map([...named].map((id) => [id, sessionKey(secret, id)]))).toEqual(keys.bySession);
    }
    const events = z.array(ProgressEventSchema).parse(posted.flatMap((p) => p.body));
    const hygiene = new Set(['assistant', 'prompt', 'retry', 'image', 'session_stats']);
    expect(events.filter((e) => !hygiene.has(e.kind))).toHaveLength(21);
    // session hygiene: the two user prompts (neither a resume) and the three finished model steps captured
    expect(
      events
        .filter((e) => hygiene.has(e.kind))
        .map((e) => e.kind)
        .sort(),
    ).toEqual(['assistant', 'assistant', 'assistant', 'prompt', 'prompt']);
    expect(events.filter((e) => e.kind === 'prompt').every((e) => e.kind === 'prompt' && !e.resume)).toBe(true);
    const wire = JSON.stringify(posted.map((p) => p.body));
    for (const content of ['FAIL: add', 'export function', 'return a', 'Continue if', 'SUBAGENT', CWD, 'echo ok']) {
      expect(wire).not.toContain(content);
    }
  });

  it("refuses a stopped tree's tool calls by throwing in tool.execute.before, until a Resume lifts it (then nudges)", async () => {
    let pending: unknown[] = [
      {
        id: 'b1',
        root_id: ROOT,
        type: 'block',
        session_id: ROOT,
        scope: 'tree',
        reason: 'hard stop: waiting for Resume',
        report: '[vigil] report',
        created_at: 1,
      },
    ];
    vi.stubGlobal('fetch', async (url: string) => {
      const directives = String(url).includes('/directives/ack') ? undefined : pending;
      return new Response(JSON.stringify({ accepted: 1, verdicts: [], directives, acknowledged: 1 }), { status: 202 });
    });
    vi.stubEnv('VIGIL_URL', 'http://vigil.test:7411');
    vi.stubEnv('VIGIL_POLL_MS', '250');
    const ctx = fakeCtx();
    const hooks = (await (mod.VigilPlugin as (c: unknown) => Promise<Record<string, HookFn>>)(ctx)) as Record<
      string,
      HookFn
    >;
    const after = captured().find((l) => l.hook === 'tool.execute.after' && l.input.sessionID === ROOT)!;
    await hooks['tool.execute.after'](after.input, structuredClone(after.output)); // its answer carries the block
    const call = { tool: 'read', sessionID: ROOT, callID: 'call_blocked' };
    await vi.waitFor(() => expect(hooks['tool.execute.before'](call, { args: {} })).rejects.toThrow(/hard stop/), {
      timeout: 5_000,
    });
    await vi.waitFor(() => expect(ctx.calls).toContain(`abort ${ROOT}`));
    pending = [
      { id: 'l1', root_id: ROOT, type: 'lift', session_id: ROOT, scope: 'tree', reason: 'resumed by t', created_at: 2 },
    ];
    await vi.waitFor(() => expect(ctx.calls.some((c) => c.startsWith(`prompt_async ${ROOT}`))).toBe(true), {
      timeout: 5_000,
    });
    await expect(hooks['tool.execute.before'](call, { args: {} })).resolves.toBeUndefined();
    await hooks.dispose();
    vi.unstubAllEnvs();
  });

  it('never fails a hook, whatever it is handed, and loads as a no-op when disabled', async () => {
    vi.stubGlobal('fetch', async () => {
      throw new Error('service down');
    });
    const ctx = fakeCtx();
    const hooks = (await (mod.VigilPlugin as (c: unknown) => Promise<Record<string, HookFn>>)(ctx)) as Record<
      string,
      HookFn
    >;
    for (const [name, fn] of Object.entries(hooks)) {
      for (const bad of [undefined, null, 0, 'x', {}, { event: { type: 'message.part.updated', properties: null } }]) {
        await expect(fn(bad, bad), name).resolves.toBeUndefined();
      }
    }
    vi.stubEnv('VIGIL_PLUGIN_DISABLED', '1');
    expect(await (mod.VigilPlugin as (c: unknown) => Promise<object>)(ctx)).toEqual({});
    vi.unstubAllEnvs();
  });

  it("says once, in a toast and in opencode's log, when nothing answers at its URL; the option sets the URL", async () => {
    const urls: string[] = [];
    const auth: unknown[] = [];
    vi.stubGlobal('fetch', async (url: string, init: RequestInit) => {
      urls.push(url);
      auth.push((init.headers as Record<string, string>).authorization);
      throw Object.assign(new TypeError('fetch failed'), { cause: { code: 'ECONNREFUSED' } });
    });
    toasts.length = 0;
    logs.length = 0;
    vi.stubEnv('VIGIL_INGEST_TOKEN', 'the-ingest-token');
    const hooks = await (mod.VigilPlugin as PluginFn)(fakeCtx(), { url: 'http://127.0.0.1:8080/vigil' });
    vi.unstubAllEnvs();
    for (const l of captured()) {
      if (l.hook === 'tool.execute.after') await hooks[l.hook](l.input, structuredClone(l.output));
    }
    await hooks.dispose();
    await new Promise((r) => setTimeout(r, 0));
    expect(urls.length).toBeGreaterThan(0);
    expect(urls.every((u) => u.startsWith('http://127.0.0.1:8080/vigil/'))).toBe(true);
    expect(new Set(auth)).toEqual(new Set(['Bearer the-ingest-token']));
    expect(toasts).toEqual([
      {
        title: 'Vigil',
        variant: 'warning',
        duration: 15_000,
        message: expect.stringContaining('Vigil at http://127.0.0.1:8080/vigil does not answer (connection refused)'),
      },
    ]);
    expect(logs).toEqual([{ service: 'vigil', level: 'warn', message: (toasts[0] as { message: string }).message }]);
    // A bad option: said, and the plugin loads as a no-op.
    toasts.length = 0;
    expect(await (mod.VigilPlugin as PluginFn)(fakeCtx(), { url: 'ftp://x' })).toEqual({});
    await new Promise((r) => setTimeout(r, 0));
    expect(toasts).toEqual([
      expect.objectContaining({ message: expect.stringContaining('"url": not an http(s) URL') }),
    ]);
  });
});
