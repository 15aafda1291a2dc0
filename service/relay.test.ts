import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { createRegistry } from '../builtins.ts';
import { installRelayUnit, relayUnit, uninstallRelayUnit } from '../cli/relay-unit.ts';
import { PACKAGE_ROOT } from '../core/paths.ts';
import { HOOK_KEY_HEADER, hookKey, loadSensorSecret } from '../core/session-key.ts';
import { testVigil } from '../test/helpers/index.ts';
import { type Relay, startRelay } from './relay.ts';
import { buildServer } from './server.ts';

// `vigil relay` in front of a service elsewhere: the hooks' raw payloads reach the
// relay on loopback only, the service gets the reduced events (one request per tool
// call), with the session keys and the ingestion token, and its directives come back
// as the hooks' answers. What crosses to the service carries nothing of the payload.

const MARK = 'QQ9-RELAY-RAW-MARKER-77';
const INGEST = 'relay-ingest-token-0123456789';
const closing: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of closing.splice(0).reverse()) await c();
});

interface Seen {
  method: string;
  url: string;
  headers: Record<string, unknown>;
  body: string;
}

/** The service, with a recording proxy in front of it: what the relay sends on, as the service gets it. */
async function serviceBehindProxy(dir: string) {
  const v = await testVigil({
    backend: 'memory',
    env: { VIGIL_INGEST_TOKEN: INGEST, VIGIL_SENSOR_SECRET_FILE: join(dir, 'service-secret') },
    overlay: { modes: { mode: 'auto_recover' } },
  });
  const app = await buildServer(v);
  await app.listen({ port: 0, host: '127.0.0.1' });
  const target = `http://127.0.0.1:${(app.server.address() as { port: number }).port}`;
  const seen: Seen[] = [];
  const proxy: Server = createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', async () => {
      seen.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers, body });
      const r = await fetch(`${target}${req.url}`, {
        method: req.method,
        headers: Object.fromEntries(
          Object.entries(req.headers).filter(([k]) => k !== 'host' && k !== 'content-length'),
        ) as Record<string, string>,
        ...(body ? { body } : {}),
      });
      res.writeHead(r.status, { 'content-type': r.headers.get('content-type') ?? 'application/json' });
      res.end(await r.text());
    });
  });
  await new Promise<void>((r) => proxy.listen(0, '127.0.0.1', r));
  closing.push(async () => {
    await new Promise((r) => proxy.close(r));
    await app.close();
    await v.close();
  });
  return { v, seen, url: `http://127.0.0.1:${(proxy.address() as { port: number }).port}` };
}

describe('vigil relay', () => {
  it("reduces the hooks' payloads on this machine and forwards only events, one request per tool call; the service's directives are the hooks' answers", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'vigil-relay-'));
    const svc = await serviceBehindProxy(dir);
    const secretFile = join(dir, 'user-secret');
    const relay: Relay = await startRelay({
      to: svc.url,
      port: 0,
      bridges: createRegistry().hooks,
      env: {
        VIGIL_INGEST_TOKEN: INGEST,
        VIGIL_SENSOR_SECRET_FILE: secretFile,
        VIGIL_HOOK_STATE_DIR: join(dir, 'state'),
      },
      version: '9.9.9',
    });
    closing.push(() => relay.close());
    const key = hookKey(loadSensorSecret(secretFile));
    const transcript = join(dir, 't.jsonl');
    writeFileSync(transcript, '');
    const base = { session_id: 'relay-s1', transcript_path: transcript, cwd: dir };
    const hook = async (body: Record<string, unknown>) => {
      const r = await fetch(`${relay.address}/hooks/claude-code`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', [HOOK_KEY_HEADER]: key },
        body: JSON.stringify({ ...base, ...body }),
      });
      expect(r.status).toBe(200);
      return r.text();
    };
    await hook({ hook_event_name: 'UserPromptSubmit', prompt: MARK, prompt_id: 'p1' });
    const answers: string[] = [];
    const before = svc.seen.length;
    for (let i = 0; i < 16; i++) {
      const call = {
        tool_name: 'Bash',
        tool_input: { command: `grep -rn ${MARK} src`, description: MARK },
        tool_use_id: `t${i}`,
      };
      answers.push(await hook({ hook_event_name: 'PreToolUse', ...call }));
      answers.push(
        await hook({
          hook_event_name: 'PostToolUseFailure',
          ...call,
          error: `Exit code 1\n${MARK}`,
          is_interrupt: false,
        }),
      );
    }
    // flagged on the service, from the relay's events; the deny with the report came back
    const row = await svc.v.engine.sessionRow('relay-s1');
    expect(row?.verdict).not.toBe('ok');
    const denied = answers.filter((a) => a.includes('"permissionDecision":"deny"'));
    expect(denied.length).toBeGreaterThan(0);
    // one request per tool call: each PreToolUse carried the previous result with it (the
    // recovery's own acknowledgements and marker aside)
    const forwarded = svc.seen
      .slice(before)
      .filter(
        (s) => (s.url === '/progress' && !s.body.includes('compaction_done')) || s.url.startsWith('/directives?'),
      );
    expect(forwarded.length).toBe(16);
    // signed and authenticated as a sensor of this user is
    for (const s of svc.seen) {
      expect(s.headers.authorization).toBe(`Bearer ${INGEST}`);
      expect(String(s.headers['x-vigil-session-key'] ?? '')).toMatch(/relay-s1=/);
      expect(s.headers['x-vigil-plugin']).toBe('vigil-claude-code/9.9.9');
    }
    expect(svc.seen.map((s) => JSON.stringify(s)).filter((s) => s.includes(MARK))).toEqual([]);
    expect(answers.filter((a) => a.includes(MARK))).toEqual([]);
    const health = await (await fetch(`${relay.address}/health`)).json();
    expect(health).toMatchObject({ relay: true, service: 'answers', sensors: ['claude-code', 'codex', 'gemini'] });
  });

  it('listens on loopback only, and a service that does not answer leaves the hooks with no opinion', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'vigil-relay-'));
    const secretFile = join(dir, 'secret');
    const relay = await startRelay({
      to: 'http://127.0.0.1:9',
      port: 0,
      bridges: createRegistry().hooks,
      env: { VIGIL_SENSOR_SECRET_FILE: secretFile, VIGIL_HOOK_STATE_DIR: join(dir, 'state') },
      version: 't',
    });
    closing.push(() => relay.close());
    expect(relay.address).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    const r = await fetch(`${relay.address}/hooks/gemini`, {
      method: 'POST',
      headers: { [HOOK_KEY_HEADER]: hookKey(loadSensorSecret(secretFile)) },
      body: JSON.stringify({ session_id: 'g1', hook_event_name: 'BeforeTool', tool_name: 'read_file', tool_input: {} }),
    });
    expect([r.status, await r.text()]).toEqual([200, '']);
  });
});

describe('vigil relay --install', () => {
  const o = {
    to: 'https://vigil.example.com:7411',
    port: 7412,
    home: '/home/u',
    node: process.execPath,
    script: join(PACKAGE_ROOT, 'bin', 'vigil.mjs'),
  };

  it('on Linux, a systemd user unit that systemd accepts, running this node and this package', () => {
    const u = relayUnit({ ...o, env: {}, platform: 'linux' });
    expect(u?.path).toBe('/home/u/.config/systemd/user/vigil-relay.service');
    expect(u?.text).toContain(
      `ExecStart=${process.execPath} ${o.script} relay --to https://vigil.example.com:7411 --port 7412`,
    );
    expect(u?.text).toContain('EnvironmentFile=-%h/.config/vigil/env');
    expect(u?.start.at(-1)).toEqual(['systemctl', '--user', 'enable', '--now', 'vigil-relay.service']);
    let verify = '';
    try {
      execFileSync('systemd-analyze', ['--version'], { stdio: 'ignore' });
      verify = 'systemd-analyze';
    } catch {}
    if (verify && !/\s/.test(o.script)) {
      const dir = mkdtempSync(join(tmpdir(), 'vigil-unit-'));
      const f = join(dir, 'vigil-relay.service');
      writeFileSync(f, u?.text ?? '');
      // (--user needs a user session manager; the unit's syntax is checked the same without it)
      const out = execFileSync('systemd-analyze', ['verify', f], { encoding: 'utf8', stdio: 'pipe' });
      expect(out).not.toMatch(/vigil-relay\.service:\d+/);
    }
  });

  it('on macOS, a launchd agent kept alive, its token (when set) in a plist only the user reads', () => {
    const u = relayUnit({ ...o, env: { VIGIL_INGEST_TOKEN: 'a&b<c' }, platform: 'darwin' });
    expect(u?.path).toBe('/home/u/Library/LaunchAgents/dev.vigil.relay.plist');
    expect(u?.mode).toBe(0o600);
    expect(u?.text).toContain('<string>relay</string>');
    expect(u?.text).toContain('<key>KeepAlive</key><true/>');
    expect(u?.text).toContain('<string>a&amp;b&lt;c</string>');
    expect(relayUnit({ ...o, env: {}, platform: 'win32' })).toBeUndefined();
  });

  it('the unit file is written where the platform looks for it', () => {
    const home = mkdtempSync(join(tmpdir(), 'vigil-unit-home-'));
    const u = relayUnit({ ...o, home, env: {}, platform: 'linux' });
    expect(u).toBeDefined();
    if (!u) return;
    // written, not started (no user session bus here)
    expect(installRelayUnit(u, { start: false })[0]).toBe(`wrote ${u.path}`);
    expect(readFileSync(u.path, 'utf8')).toBe(u.text);
    expect(uninstallRelayUnit(u)[0]).toBe(`removed ${u.path}`);
  });
});
