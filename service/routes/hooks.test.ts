import { existsSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { gunzipSync, inflateRawSync, inflateSync } from 'node:zlib';
import { Redis } from 'ioredis';
import pino from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { eventually } from '../../channels/testing/index.ts';
import { HOOK_KEY_HEADER, hookKey, loadSensorSecret } from '../../core/session-key.ts';
import { MemoryStore } from '../../core/store/memory.ts';
import type { Vigil } from '../../core/vigil.ts';
import { backends, flushPrefix, REDIS_URL, testPrefix, testVigil } from '../../test/helpers/index.ts';
import { type App, buildServer } from '../server.ts';

// The local hook endpoint (POST /hooks/<sensor>): raw hook payloads are reduced in
// memory and dropped. The proof: payloads carrying a marker in their tool arguments,
// tool outputs, prompts and transcripts leave it in no log line, no stored value, no
// readout and no answer; a peer not on this machine is refused; a service bound off
// loopback mounts the endpoint only when told to.

const MARK = 'ZQX7-RAW-PAYLOAD-MARKER-41';

const running: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of running.splice(0).reverse()) await c();
});

interface Svc {
  v: Vigil;
  app: App;
  url: string;
  key: string;
  logs: string[];
  prefix?: string;
}

async function service(backend: 'memory' | 'redis', o: { host?: string; overlay?: unknown } = {}): Promise<Svc> {
  const dir = mkdtempSync(join(tmpdir(), 'vigil-hooks-'));
  const logs: string[] = [];
  const logger = pino(
    { level: 'trace' },
    new Writable({
      write(c, _e, cb) {
        logs.push(String(c));
        cb();
      },
    }),
  );
  const prefix = backend === 'redis' ? testPrefix() : undefined;
  const secretFile = join(dir, 'secret');
  const v = await testVigil({
    backend,
    prefix,
    logger,
    env: {
      VIGIL_SENSOR_SECRET_FILE: secretFile,
      VIGIL_HOOK_STATE_DIR: join(dir, 'state'),
      VIGIL_ADMIN_TOKEN: 'an-admin-token-of-16+',
      VIGIL_INGEST_TOKEN: 'an-ingest-token-of-16+',
    },
    overlay: { modes: { mode: 'auto_recover' }, ...((o.overlay as object) ?? {}) },
    channels: [{ name: 'desk', type: 'desktop', command: '/nonexistent/notify-send' }],
  });
  const app = await buildServer(v, { logger: true, version: '9.9.9', ...(o.host ? { host: o.host } : {}) });
  await app.listen({ port: 0, host: '127.0.0.1' });
  running.push(async () => {
    await app.close();
    await v.close();
    if (prefix) await flushPrefix(prefix);
  });
  const key = hookKey(loadSensorSecret(secretFile, { create: true }));
  return { v, app, url: `http://127.0.0.1:${(app.server.address() as { port: number }).port}`, key, logs, prefix };
}

const post = async (s: Svc, sensor: string, body: unknown, key = s.key) => {
  const r = await fetch(`${s.url}/hooks/${sensor}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', [HOOK_KEY_HEADER]: key },
    body: JSON.stringify(body),
  });
  return { status: r.status, text: await r.text() };
};

/** Every text a value holds, inflated where it is compressed (a marker must not hide in a deflated blob). */
function texts(b: Buffer): string[] {
  const out = [b.toString('latin1'), b.toString('utf8')];
  for (const f of [inflateSync, inflateRawSync, gunzipSync]) {
    try {
      out.push(f(b).toString('utf8'));
    } catch {
      // not that format
    }
  }
  return out;
}

/** Every stored value of the instance's store: the memory store's entries, or every Redis key under its prefix. */
async function storedValues(s: Svc): Promise<string[]> {
  if (!s.prefix) {
    const base = (s.v.store as unknown as { base: unknown }).base;
    expect(base).toBeInstanceOf(MemoryStore);
    // everything the instance holds: the memory store (entries, input ids, outbox) and
    // every detector's, mode's and cache's own state in the process
    const out: string[] = [];
    const seen = new Set<unknown>();
    const walk = (x: unknown): void => {
      if (typeof x === 'string') out.push(x);
      else if (x instanceof Uint8Array) out.push(...texts(Buffer.from(x)));
      else if (x && typeof x === 'object' && !seen.has(x)) {
        seen.add(x);
        if (x instanceof Map) for (const e of x) walk(e);
        else if (x instanceof Set || Array.isArray(x)) for (const v of x) walk(v);
        else for (const v of Object.values(x)) walk(v);
      }
    };
    walk(s.v);
    expect(out.length).toBeGreaterThan(10);
    return out;
  }
  const r = new Redis(REDIS_URL);
  try {
    const out: string[] = [];
    let cursor = '0';
    do {
      const [next, keys] = await r.scan(cursor, 'MATCH', `${s.prefix}*`, 'COUNT', 500);
      cursor = next;
      for (const k of keys) {
        out.push(k);
        const type = await r.type(k);
        const bufs: Buffer[] =
          type === 'string'
            ? [(await r.getBuffer(k)) as Buffer]
            : type === 'hash'
              ? (await r.hgetallBuffer(k)) &&
                Object.entries(await r.hgetallBuffer(k)).flatMap(([f, x]) => [Buffer.from(f), x])
              : type === 'list'
                ? await r.lrangeBuffer(k, 0, -1)
                : type === 'set'
                  ? await r.smembersBuffer(k)
                  : type === 'zset'
                    ? await r.zrangeBuffer(k, 0, -1)
                    : type === 'stream'
                      ? (await r.xrangeBuffer(k, '-', '+')).flatMap(([id, f]) => [id, ...f])
                      : [];
        for (const b of bufs) out.push(...texts(b));
      }
    } while (cursor !== '0');
    expect(out.length).toBeGreaterThan(10);
    return out;
  } finally {
    r.disconnect();
  }
}

/** A Claude Code session whose payloads and transcript all carry the marker, looping on one failing check. */
async function claudeLoop(s: Svc, dir: string, sid: string): Promise<string[]> {
  const transcript = join(dir, `${sid}.jsonl`);
  const lines: string[] = [];
  const answers: string[] = [];
  const base = { session_id: sid, transcript_path: transcript, cwd: dir };
  const say = async (body: Record<string, unknown>) => {
    const r = await post(s, 'claude-code', { ...base, ...body });
    expect(r.status).toBe(200);
    answers.push(r.text);
  };
  await say({ hook_event_name: 'UserPromptSubmit', prompt: `fix it ${MARK}`, prompt_id: 'p1' });
  await say({
    hook_event_name: 'PostToolUse',
    tool_name: 'Edit',
    tool_input: { file_path: join(dir, 'a.js'), old_string: `old ${MARK}`, new_string: `new ${MARK}` },
    tool_use_id: 'toolu_edit',
    tool_response: { structuredPatch: [{ lines: [`-old ${MARK}`, `+new ${MARK}`] }], originalFile: MARK },
  });
  for (let i = 0; i < 14; i++) {
    lines.push(
      JSON.stringify({
        type: 'assistant',
        timestamp: new Date().toISOString(),
        message: {
          id: `msg_${i}`,
          model: 'claude-x',
          stop_reason: 'tool_use',
          usage: { input_tokens: 10, output_tokens: 5 },
          content: [
            { type: 'text', text: `thinking about ${MARK}` },
            { type: 'tool_use', name: 'Bash', input: { command: `grep -rn ${MARK} src` } },
          ],
        },
      }),
    );
    writeFileSync(transcript, `${lines.join('\n')}\n`);
    const call = {
      tool_name: 'Bash',
      tool_input: { command: `grep -rn ${MARK} src`, description: `look for ${MARK}` },
      tool_use_id: `toolu_${i}`,
    };
    await say({ hook_event_name: 'PreToolUse', ...call });
    await say({
      hook_event_name: 'PostToolUseFailure',
      ...call,
      error: `Exit code 1\nsrc/x.js: ${MARK} not found`,
      is_interrupt: false,
    });
  }
  await say({ hook_event_name: 'Stop', stop_hook_active: false, last_assistant_message: `done ${MARK}` });
  return answers;
}

describe.each(backends())('the hook endpoint (%s)', (backend) => {
  it('a raw payload marker reaches no log line, no stored value, no readout, no answer', async () => {
    const s = await service(backend);
    const dir = mkdtempSync(join(tmpdir(), 'vigil-hooks-work-'));
    const sid = 'priv-claude-1';
    const answers = await claudeLoop(s, dir, sid);
    // the loop was judged from the reduced events, and the tree was acted on
    const rows = await (await fetch(`${s.url}/sessions`)).json();
    const row = rows.find((r: { session: string }) => r.session === sid);
    expect(row.verdict).not.toBe('ok');
    expect(answers.some((a) => a.includes('permissionDecision'))).toBe(true);
    // the other two agents' payloads, marker in the same places
    const chat = join(dir, 'chat.jsonl');
    writeFileSync(chat, `${JSON.stringify({ id: 'r1', type: 'user', content: [{ text: MARK }] })}\n`);
    for (const [event, extra] of [
      ['BeforeAgent', { prompt: MARK }],
      ['BeforeTool', { tool_name: 'run_shell_command', tool_input: { command: `grep -rn ${MARK} .` } }],
      [
        'AfterTool',
        {
          tool_name: 'run_shell_command',
          tool_input: { command: `grep -rn ${MARK} .` },
          tool_response: { llmContent: `Output: ${MARK}\nExit Code: 1`, returnDisplay: MARK },
        },
      ],
      ['AfterAgent', { prompt: MARK, prompt_response: MARK }],
    ] as const)
      expect(
        (await post(s, 'gemini', { session_id: 'priv-gem-1', transcript_path: chat, hook_event_name: event, ...extra }))
          .status,
      ).toBe(200);
    const rollout = join(dir, 'rollout.jsonl');
    writeFileSync(
      rollout,
      [
        { type: 'session_meta', payload: { id: 'priv-codex-1', cwd: dir } },
        {
          type: 'response_item',
          payload: {
            type: 'function_call',
            name: 'exec_command',
            call_id: 'c1',
            arguments: JSON.stringify({ cmd: `grep -rn ${MARK} src` }),
          },
        },
        {
          type: 'response_item',
          payload: { type: 'function_call_output', call_id: 'c1', output: `${MARK}\nProcess exited with code 1` },
        },
        { type: 'response_item', payload: { type: 'message', role: 'assistant', content: [{ text: MARK }] } },
        {
          type: 'token_usage_record',
          payload: { response_id: 'resp_1', usage: { input_tokens: 9, output_tokens: 3 } },
        },
      ]
        .map((l) => JSON.stringify({ timestamp: new Date().toISOString(), ...l }))
        .join('\n'),
    );
    for (const [event, extra] of [
      ['UserPromptSubmit', { prompt: MARK, turn_id: 't1' }],
      ['PreToolUse', { tool_name: 'Bash', tool_input: { command: `grep -rn ${MARK} src` }, tool_use_id: 'c2' }],
      ['Stop', { last_assistant_message: MARK }],
    ] as const)
      expect(
        (
          await post(s, 'codex', {
            session_id: 'priv-codex-1',
            transcript_path: rollout,
            hook_event_name: event,
            ...extra,
          })
        ).status,
      ).toBe(200);
    const posted = (await (await fetch(`${s.url}/sessions`)).json()).map((r: { session: string }) => r.session);
    expect(posted).toEqual(expect.arrayContaining([sid, 'priv-gem-1', 'priv-codex-1']));

    const admin = { authorization: 'Bearer an-admin-token-of-16+' };
    const reads = await Promise.all(
      [
        '/sessions',
        `/sessions/${sid}/report`,
        `/trees/${sid}`,
        '/panels',
        '/warnings',
        '/alerts',
        '/deliveries',
        '/ledger',
        '/health',
        '/',
      ].map(async (p) => `${p}: ${await (await fetch(`${s.url}${p}`, { headers: admin })).text()}`),
    );
    expect(reads.join('\n')).toContain('priv-claude-1');
    const found = (where: string, xs: string[]) =>
      expect(
        xs
          .filter((x) => x.includes(MARK))
          .map((x) => x.slice(Math.max(0, x.indexOf(MARK) - 300), x.indexOf(MARK) + 100)),
        where,
      ).toEqual([]);
    found('answers to the agent', answers);
    found('readouts', reads);
    found('log lines', s.logs);
    expect(s.logs.length).toBeGreaterThan(5);
    found('stored values', await storedValues(s));
    // the bridges' states, written to their files within a second
    const stateDir = join(s.v.env.VIGIL_HOOK_STATE_DIR as string);
    const states = await eventually(() => {
      const files = existsSync(stateDir)
        ? readdirSync(stateDir, { recursive: true, withFileTypes: true }).filter((e) => e.isFile())
        : [];
      return files.length >= 3 ? files.map((e) => readFileSync(join(e.parentPath, e.name), 'utf8')) : undefined;
    }, 5_000);
    found('bridge state files', states ?? []);
  });
});

describe('who may post to the hook endpoint', () => {
  it('a peer that is not on this machine is refused with a clear error, before anything is read', async () => {
    const s = await service('memory');
    const r = await s.app.inject({
      method: 'POST',
      url: '/hooks/claude-code',
      remoteAddress: '192.0.2.7',
      headers: { [HOOK_KEY_HEADER]: s.key },
      payload: { session_id: 's1', hook_event_name: 'UserPromptSubmit', prompt: MARK },
    });
    expect(r.statusCode).toBe(403);
    expect(r.json()).toMatchObject({ code: 'HOOK_NOT_LOOPBACK' });
    expect(r.json().message).toMatch(/this machine only/);
    expect(await s.v.engine.sessionRows()).toEqual([]);
  });

  it('a local process without the hook key is refused (401), and a forged payload stops nothing', async () => {
    const s = await service('memory');
    const wrong = await post(
      s,
      'claude-code',
      { session_id: 's2', hook_event_name: 'UserPromptSubmit' },
      'x'.repeat(43),
    );
    expect(wrong.status).toBe(401);
    expect(JSON.parse(wrong.text)).toMatchObject({ code: 'HOOK_KEY_MISMATCH' });
    const none = await fetch(`${s.url}/hooks/claude-code`, { method: 'POST', body: '{}' });
    expect(none.status).toBe(401);
    expect(await s.v.engine.sessionRows()).toEqual([]);
    expect((await post(s, 'nobody', {})).status).toBe(404);
  });

  it('a refused call is refused before its body is read: a body past the limit is still 401 or 403, not 413', async () => {
    const s = await service('memory');
    const big = 'x'.repeat(40 * 1024 * 1024); // past the 32 MB body limit
    const far = await s.app.inject({
      method: 'POST',
      url: '/hooks/claude-code',
      remoteAddress: '192.0.2.7',
      headers: { [HOOK_KEY_HEADER]: s.key, 'content-type': 'application/json' },
      payload: big,
    });
    expect(far.statusCode).toBe(403);
    const keyless = await s.app.inject({
      method: 'POST',
      url: '/hooks/claude-code',
      remoteAddress: '127.0.0.1',
      headers: { 'content-type': 'application/json' },
      payload: big,
    });
    expect(keyless.statusCode).toBe(401);
    // the same body with the key is read, and refused for its size
    const keyed = await s.app.inject({
      method: 'POST',
      url: '/hooks/claude-code',
      remoteAddress: '127.0.0.1',
      headers: { [HOOK_KEY_HEADER]: s.key, 'content-type': 'application/json' },
      payload: big,
    });
    expect(keyed.statusCode).toBe(413);
  });

  it('a payload it cannot read is no opinion: 200 with nothing in it', async () => {
    const s = await service('memory');
    for (const body of [
      'not json',
      '[]',
      '{"hook_event_name":"PreToolUse"}',
      `{"session_id": "a b", "x": "${MARK}"}`,
    ]) {
      const r = await fetch(`${s.url}/hooks/claude-code`, {
        method: 'POST',
        headers: { [HOOK_KEY_HEADER]: s.key },
        body,
      });
      expect([r.status, await r.text()]).toEqual([200, '']);
    }
    expect(s.logs.filter((l) => l.includes(MARK) || l.includes('not json'))).toEqual([]);
  });

  it('bound off loopback the endpoint is not mounted unless server.hooks_off_loopback says so', async () => {
    const off = await service('memory', { host: '0.0.0.0' });
    const r = await post(off, 'claude-code', { session_id: 's3', hook_event_name: 'UserPromptSubmit' });
    expect(r.status).not.toBe(200);
    expect(off.app.hasRoute({ method: 'POST', url: '/hooks/:sensor' })).toBe(false);
    const on = await service('memory', { host: '0.0.0.0', overlay: { server: { hooks_off_loopback: true } } });
    expect((await post(on, 'claude-code', { session_id: 's4', hook_event_name: 'UserPromptSubmit' })).status).toBe(200);
    const far = await on.app.inject({
      method: 'POST',
      url: '/hooks/claude-code',
      remoteAddress: '203.0.113.9',
      headers: { [HOOK_KEY_HEADER]: on.key },
      payload: {},
    });
    expect(far.statusCode).toBe(403);
  });
});
