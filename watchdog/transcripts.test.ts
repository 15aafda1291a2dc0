import { mkdirSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createRegistry } from '../builtins.ts';
import { loadConfig } from '../core/config.ts';
import type { Vigil } from '../core/vigil.ts';
import { buildServer } from '../service/server.ts';
import { tempDir, testVigil } from '../test/helpers/index.ts';
import { resolvePaths, WatchdogSchema } from './options.ts';
import { runTick } from './tick.ts';
import { collectTranscripts, readBounded } from './transcripts.ts';

// The tick over other agents' transcripts on disk, no hook installed: files in each
// agent's own layout and line format (as their sensors' replay readers parse them) in a
// temp HOME, a real Vigil service on 127.0.0.1:0.

const THRESHOLDS = {
  window: 30,
  dup_min_events: 10,
  stall_turns: 10,
  loop_turns: 20,
  top_warn: 8,
  top_loop: 16,
  session_repeat_warn: 10,
  session_repeat_loop: 20,
};

const CC_LOOP = '11111111-1111-4111-8111-111111111111';
const CC_GOOD = '22222222-2222-4222-8222-222222222222';
const CC_OLD = '33333333-3333-4333-8333-333333333333';
const CX_LOOP = '44444444-4444-4444-8444-444444444444';
const GM_LOOP = '55555555-5555-4555-8555-555555555555';

const iso = (t: number) => new Date(t).toISOString();
const jsonl = (lines: unknown[]) => `${lines.map((l) => JSON.stringify(l)).join('\n')}\n`;

/** A Claude Code transcript: one Read per file in `files`, each with its tool_result. */
function claude(session: string, files: string[], t0: number): string {
  const lines: unknown[] = [];
  files.forEach((f, i) => {
    const base = { sessionId: session, userType: 'external', cwd: '/w/project', version: '2.1.328' };
    lines.push({
      ...base,
      type: 'assistant',
      timestamp: iso(t0 + i * 1000),
      message: {
        id: `msg_${i}`,
        role: 'assistant',
        content: [{ type: 'tool_use', id: `toolu_${i}`, name: 'Read', input: { file_path: `/w/project/${f}` } }],
        usage: { input_tokens: 100, output_tokens: 10 },
      },
    });
    lines.push({
      ...base,
      type: 'user',
      timestamp: iso(t0 + i * 1000 + 500),
      message: { role: 'user', content: [{ type: 'tool_result', tool_use_id: `toolu_${i}`, content: 'text' }] },
      toolUseResult: { type: 'text', file: { filePath: `/w/project/${f}`, content: 'text' } },
    });
  });
  return jsonl(lines);
}

/** A Codex rollout: session_meta, then `n` runs of the same command with their outputs. */
function rollout(thread: string, n: number, t0: number): string {
  const lines: unknown[] = [
    { timestamp: iso(t0), type: 'session_meta', payload: { id: thread, session_id: thread, cwd: '/w/project' } },
  ];
  for (let i = 0; i < n; i++) {
    const ts = iso(t0 + i * 1000 + 1);
    lines.push({
      timestamp: ts,
      type: 'response_item',
      payload: {
        type: 'function_call',
        name: 'exec_command',
        arguments: '{"cmd":"cat docs/spec.md"}',
        call_id: `c${i}`,
      },
    });
    lines.push({
      timestamp: ts,
      type: 'response_item',
      payload: { type: 'function_call_output', call_id: `c${i}`, output: 'Exit code: 0\nOutput:\ntext\n' },
    });
  }
  return jsonl(lines);
}

/** A Gemini CLI chat file: its header line, then `n` model turns reading the same file. */
function chat(session: string, n: number, t0: number): string {
  const lines: unknown[] = [{ sessionId: session, projectHash: 'abc', startTime: iso(t0), directories: ['/w/p'] }];
  for (let i = 0; i < n; i++) {
    lines.push({
      id: `m${i}`,
      type: 'gemini',
      timestamp: iso(t0 + i * 1000),
      content: '',
      model: 'gemini-2.5-pro',
      tokens: { input: 100, output: 10 },
      toolCalls: [
        {
          id: `read_file-${i}`,
          name: 'read_file',
          args: { file_path: 'docs/spec.md' },
          result: [{ functionResponse: { response: { output: 'text' } } }],
          status: 'success',
          timestamp: iso(t0 + i * 1000 + 500),
        },
      ],
    });
  }
  return jsonl(lines);
}

let dir = '';
let home = '';
let vigil: Vigil;
let serviceUrl = '';
let close: () => Promise<void>;

beforeEach(async () => {
  dir = tempDir('vigil-wd-transcripts');
  home = join(dir, 'home');
  vigil = await testVigil({ backend: 'memory', overlay: { progress: THRESHOLDS } });
  const app = await buildServer(vigil);
  serviceUrl = await app.listen({ host: '127.0.0.1', port: 0 });
  close = async () => {
    await app.close();
    await vigil.close();
  };
});

afterEach(async () => {
  await close();
  rmSync(dir, { recursive: true, force: true });
});

function put(rel: string, text: string, mtime?: number) {
  const f = join(home, rel);
  mkdirSync(dirname(f), { recursive: true });
  writeFileSync(f, text);
  if (mtime !== undefined) utimesSync(f, mtime / 1000, mtime / 1000);
  return f;
}

function config(watchdog: Record<string, unknown> = {}) {
  return loadConfig({
    registry: createRegistry(),
    env: {},
    overlay: {
      progress: THRESHOLDS,
      notifications: { channels: [] },
      watchdog: {
        servers: [],
        service_url: serviceUrl,
        state_file: join(dir, 'state.json'),
        lock_file: join(dir, 'watchdog.lock'),
        opencode_db: join(dir, 'no-opencode.db'),
        rc_servers_file: join(dir, 'rc-servers.json'),
        ...watchdog,
      },
    },
  });
}

const loopFiles = Array.from({ length: 30 }, () => 'docs/spec.md');
const goodFiles = ['src/a.js', 'src/b.js', 'src/c.js', 'test/a.test.js'];

describe('watchdog tick over agent transcripts (no hook)', () => {
  it("reports each agent's looping session, not the healthy one, not a file older than the window", async () => {
    const now = Date.now();
    put(`.claude/projects/-w-project/${CC_LOOP}.jsonl`, claude(CC_LOOP, loopFiles, now - 60_000));
    put(`.claude/projects/-w-project/${CC_GOOD}.jsonl`, claude(CC_GOOD, goodFiles, now - 60_000));
    // last written two days ago: outside the window (interval 5m, first tick)
    put(
      `.claude/projects/-w-old/${CC_OLD}.jsonl`,
      claude(CC_OLD, loopFiles, now - 2 * 86_400_000),
      now - 2 * 86_400_000,
    );
    put(`.codex/sessions/2026/12/02/rollout-2026-12-02T01-00-00-${CX_LOOP}.jsonl`, rollout(CX_LOOP, 30, now - 60_000));
    put(
      `.gemini/tmp/proj/chats/session-2026-12-02T01-00-${GM_LOOP.slice(0, 8)}.jsonl`,
      chat(GM_LOOP, 30, now - 60_000),
    );

    const r = await runTick({ config: config(), env: { HOME: home } });
    expect(r).toMatchObject({ status: 'flagged', servers: 0, transcripts: 4, service: 'up' });
    expect(r.reported.map((v) => [v.session_id, v.level, v.source]).sort()).toEqual(
      [
        [CC_LOOP, 'looping', 'watchdog'],
        [CX_LOOP, 'looping', 'watchdog'],
        [GM_LOOP, 'looping', 'watchdog'],
      ].sort(),
    );
    expect(r.sessions).toBe(4); // the healthy one was judged, and ok

    const rows = (await (await fetch(`${serviceUrl}/sessions`)).json()) as { session: string; verdict: string }[];
    for (const id of [CC_LOOP, CX_LOOP, GM_LOOP]) {
      expect(rows.find((x) => x.session === id)).toMatchObject({ verdict: 'looping', source: 'watchdog' });
    }
    expect(rows.find((x) => x.session === CC_OLD)).toBeUndefined();
    expect(rows.find((x) => x.session === CC_GOOD)?.verdict ?? 'ok').toBe('ok');
  });

  it("a subagent's transcript is its own session, child of the session (Claude Code and Gemini layouts)", () => {
    const now = Date.now();
    const sub = claude(CC_LOOP, loopFiles, now - 60_000)
      .trimEnd()
      .split('\n')
      .map((l) => JSON.stringify({ ...JSON.parse(l), agentId: 'a1b2c3' }))
      .join('\n');
    put(`.claude/projects/-w-project/${CC_LOOP}/subagents/agent-a1b2c3.jsonl`, `${sub}\n`);
    const child = chat('66666666-6666-4666-8666-666666666666', 5, now - 60_000).replace(
      '"projectHash"',
      '"kind":"subagent","projectHash"',
    );
    put(`.gemini/tmp/proj/chats/${GM_LOOP}/child.jsonl`, child);
    const r = collectTranscripts(resolvePaths(WatchdogSchema.parse({}), { HOME: home }), {
      since: now - 60_000,
      maxFiles: 10,
      maxBytes: 1_000_000,
    });
    expect(r.sessions.map((s) => [s.id, s.parent]).sort()).toEqual(
      [
        [`${CC_LOOP}.a1b2c3`, CC_LOOP],
        [`${GM_LOOP}.66666666`, GM_LOOP],
      ].sort(),
    );
  });

  it('transcripts: false reads none; an absent agent home is skipped', async () => {
    const now = Date.now();
    put(`.claude/projects/-w-project/${CC_LOOP}.jsonl`, claude(CC_LOOP, loopFiles, now - 60_000));
    const off = await runTick({ config: config({ transcripts: false }), env: { HOME: home } });
    expect(off).toMatchObject({ status: 'idle', transcripts: 0, reported: [] });
    // no .codex or .gemini in this HOME: the Claude Code file alone
    const on = await runTick({ config: config({ state_file: join(dir, 's2.json') }), env: { HOME: home } });
    expect(on).toMatchObject({ status: 'flagged', transcripts: 1 });
  });

  it('bounds a tick: the newest max_files files, and the first line plus the tail of a big file', () => {
    const now = Date.now();
    put(`.claude/projects/-w-project/${CC_LOOP}.jsonl`, claude(CC_LOOP, loopFiles, now - 60_000), now - 1_000);
    put(`.claude/projects/-w-project/${CC_GOOD}.jsonl`, claude(CC_GOOD, goodFiles, now - 60_000), now - 5_000);
    const big = put(`.codex/sessions/2026/12/02/rollout-x-${CX_LOOP}.jsonl`, rollout(CX_LOOP, 400, now - 60_000), now);
    const paths = resolvePaths(WatchdogSchema.parse({}), { HOME: home });

    const two = collectTranscripts(paths, { since: now - 60_000, maxFiles: 2, maxBytes: 16_384 });
    expect(two).toMatchObject({ files: 2, truncated: true });
    expect(two.sessions.map((s) => s.id).sort()).toEqual([CC_LOOP, CX_LOOP].sort());

    // the tail alone still names its thread (the first line is kept), and holds whole lines only
    const text = readBounded(big, 16_384);
    expect(text.length).toBeLessThan(16_384 + 1_000);
    const lines = text.trimEnd().split('\n');
    expect(JSON.parse(lines[0]).type).toBe('session_meta');
    for (const l of lines) expect(() => JSON.parse(l)).not.toThrow();
    const cx = two.sessions.find((s) => s.id === CX_LOOP)!;
    expect(cx.inputs.length).toBeGreaterThan(10);
    expect(cx.inputs.length).toBeLessThan(400);
  });

  it('the default folders follow HOME, CLAUDE_CONFIG_DIR and CODEX_HOME', () => {
    const o = WatchdogSchema.parse({});
    expect(resolvePaths(o, { HOME: '/h' })).toMatchObject({
      claudeProjects: '/h/.claude/projects',
      codexSessions: '/h/.codex/sessions',
      geminiTmp: '/h/.gemini/tmp',
    });
    expect(resolvePaths(o, { HOME: '/h', CLAUDE_CONFIG_DIR: '/c', CODEX_HOME: '~/cx' })).toMatchObject({
      claudeProjects: '/c/projects',
      codexSessions: '/h/cx/sessions',
    });
    expect(resolvePaths(WatchdogSchema.parse({ gemini_tmp_dir: '~/g' }), { HOME: '/h' }).geminiTmp).toBe('/h/g');
  });
});
