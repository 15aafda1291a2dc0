import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRegistry } from '../builtins.ts';
import { loadConfig } from '../core/config.ts';
import type { Vigil } from '../core/vigil.ts';
import type { NoProgressDetector } from '../detectors/no-progress/no-progress.detector.ts';
import { buildServer } from '../service/server.ts';
import { readState } from '../watchdog/state.ts';
import { runTick } from '../watchdog/tick.ts';
import { needsSqlite3 } from './helpers/external.ts';
import { behaviour, recordingPlugin, tempDir, testVigil } from './helpers/index.ts';
import { type FakeServer, fakeOllama, needsOpencode, type OpencodeLab, startOpencode } from './helpers/opencode.ts';

const HAVE_OPENCODE = needsOpencode(import.meta.filename);

// The watchdog against a REAL `opencode serve` 1.18.33 (scripted fake model, offline,
// isolated dirs, no plugin): one session loops (40 reads of one file), one is healthy
// (a failing check, edits with diffs, the check passing). A real Vigil service runs
// in-process on 127.0.0.1:0 and a fake ollama counts model calls.

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

const SCRIPT = {
  title: 'Watchdog e2e session',
  steps: [{ text: 'Nothing scripted for this prompt.' }],
  scripts: [
    {
      match: '^HEALTHY',
      steps: [
        { tool: 'read', args: { filePath: '{{workdir}}/src/app.js' } },
        { tool: 'bash', args: { command: 'sh test.sh' } },
        {
          tool: 'edit',
          args: { filePath: '{{workdir}}/src/app.js', oldString: 'return a - b;', newString: 'return a + b;' },
        },
        { tool: 'bash', args: { command: 'sh test.sh' } },
        {
          tool: 'write',
          args: { filePath: '{{workdir}}/src/mul.js', content: 'export function mul(a, b) {\n  return a * b;\n}\n' },
        },
        { tool: 'bash', args: { command: 'sh test.sh' } },
        { text: 'Fixed add, added mul, the check passes.' },
      ],
    },
    {
      match: '^LOOP',
      steps: [
        { tool: 'read', args: { filePath: '{{workdir}}/docs/spec.md' }, repeat: 40 },
        { text: 'I read the spec again and again.' },
      ],
    },
  ],
};

let lab: OpencodeLab;
let vigil: Vigil;
let serviceUrl = '';
let closeService: (() => Promise<void>) | undefined;
let llm: FakeServer;
let dir = '';
const rec = behaviour();
let healthy = '';
let loop = '';

beforeAll(async () => {
  dir = tempDir('vigil-wd-e2e');
  llm = await fakeOllama({ answer: 'Yes - it reads docs/spec.md over and over and nothing lands.' });
  vigil = await testVigil({
    backend: 'memory',
    registry: createRegistry().register(recordingPlugin(rec)),
    channels: [{ name: 'rec', type: 'recording', min_severity: 'info' }],
    overlay: { progress: THRESHOLDS },
  });
  const app = await buildServer(vigil);
  serviceUrl = await app.listen({ host: '127.0.0.1', port: 0 });
  closeService = async () => {
    await app.close();
    await vigil.close();
  };
  lab = await startOpencode({
    script: SCRIPT,
    files: {
      'src/app.js': 'export function add(a, b) {\n  return a - b;\n}\n',
      'test.sh': "#!/bin/sh\ngrep -q 'a + b' src/app.js && echo PASS || { echo 'FAIL: add' >&2; exit 1; }\n",
      'docs/spec.md': '# Spec\n\nadd(a, b) returns the sum.\n',
    },
  });
}, 240_000);

afterAll(async () => {
  await lab?.stop();
  await llm?.close();
  await closeService?.();
  if (dir) rmSync(dir, { recursive: true, force: true });
}, 60_000);

function config(watchdog: Record<string, unknown>) {
  return loadConfig({
    registry: createRegistry(),
    env: {},
    overlay: {
      progress: THRESHOLDS,
      local_compute: { enabled: true },
      notifications: { channels: [] },
      watchdog: {
        // found through rc-servers.json, as the session-registry plugin would list it
        servers: [],
        rc_servers_file: join(dir, 'rc-servers.json'),
        service_url: serviceUrl,
        ollama_url: llm.url,
        model: 'fake-llm',
        state_file: join(dir, 'state.json'),
        lock_file: join(dir, 'watchdog.lock'),
        opencode_db: join(dir, 'none.db'),
        // opencode only: not the machine's other agents' transcripts
        transcripts: false,
        ...watchdog,
      },
    },
  });
}

type Row = { session: string; verdict: string; source: string; agent: string | null };
const rows = async () => (await (await fetch(`${serviceUrl}/sessions`)).json()) as Row[];

describe.runIf(HAVE_OPENCODE)('the watchdog against opencode 1.18.33', () => {
  it('a healthy-only tick: the session is judged ok, nothing is reported, no model call', async () => {
    writeFileSync(join(dir, 'rc-servers.json'), JSON.stringify([{ serverUrl: lab.url }]));
    healthy = await lab.runSession('healthy', 'HEALTHY: fix add() so test.sh passes');
    const r = await runTick({ config: config({}) });
    expect(r, lab.detail()).toMatchObject({
      status: 'ok',
      servers: 1,
      sessions: 1,
      flagged: 0,
      model_calls: 0,
      service: 'up',
      source: 'api',
    });
    expect(r.reported).toEqual([]);
    expect(llm.requests).toHaveLength(0);
    // no verdict reported; the service knows the session only from its bulk (session hygiene)
    expect((await rows()).find((x) => x.session === healthy)).toMatchObject({
      verdict: 'ok',
      source: 'session-hygiene',
    });
    expect(r.stats).toBe(1);
  }, 240_000);

  it('then a looping session: the tick reports exactly it, with the second opinion beside the verdict', async () => {
    loop = await lab.runSession('loop', 'LOOP: study docs/spec.md');
    const r = await runTick({ config: config({}) });
    // active since the last tick: the looping session only (the healthy one was idle since)
    expect(r).toMatchObject({ status: 'flagged', servers: 1, sessions: 1, flagged: 1, model_calls: 1, service: 'up' });
    expect(r.reported.map((v) => [v.session_id, v.level, v.source])).toEqual([[loop, 'looping', 'watchdog']]);
    // The unbroken run of identical reads decides it now (before the duplicate share would):
    // the stored outputs give each read its result fingerprint, all the same.
    expect(r.reported[0].reason).toMatch(/^looping: 41 turns .*(in a row, the same result each time|duplicate calls)/);
    expect(r.reported[0].second_opinion).toEqual({
      model: 'fake-llm',
      looping: true,
      reason: 'it reads docs/spec.md over and over and nothing lands.',
    });

    // the model saw a digest: tool names, targets, exit codes; no prompt, no file content
    expect(llm.requests).toHaveLength(1);
    const asked = JSON.stringify(llm.requests[0].body);
    expect(asked).toContain('read docs/spec.md exit=0');
    for (const content of ['LOOP: study', 'returns the sum', 'HEALTHY']) expect(asked).not.toContain(content);

    // the service: flagged with source watchdog, the healthy one never reported
    const row = (await rows()).find((x) => x.session === loop);
    expect(row).toMatchObject({ verdict: 'looping', source: 'watchdog', agent: 'build' });
    expect((await rows()).find((x) => x.session === healthy)).toMatchObject({
      verdict: 'ok',
      source: 'session-hygiene',
    });
    expect(await vigil.detector<NoProgressDetector>('no-progress').externalVerdict(loop)).toMatchObject({
      source: 'watchdog',
      level: 'looping',
      second_opinion: { model: 'fake-llm', looping: true },
    });
    const health = (await (await fetch(`${serviceUrl}/health`)).json()) as { watchdog: { result: unknown } };
    expect(health.watchdog.result).toMatchObject({ status: 'flagged', servers: 1, flagged: 1, model_calls: 1 });
    expect(readState(join(dir, 'state.json'))).toMatchObject({
      result: { status: 'flagged' },
      flagged: { [loop]: 'looping' },
    });
  }, 240_000);

  it('the next tick finds nothing updated since: zero sessions, zero model calls', async () => {
    const calls = llm.requests.length;
    const r = await runTick({ config: config({}) });
    expect(r).toMatchObject({ status: 'ok', servers: 1, sessions: 0, flagged: 0, model_calls: 0 });
    expect(llm.requests).toHaveLength(calls);
  }, 60_000);

  it('a fresh window sees both sessions and still reports only the looping one', async () => {
    const r = await runTick({ config: config({ state_file: join(dir, 'fresh.json') }) });
    expect(r).toMatchObject({ status: 'flagged', sessions: 2, flagged: 1, model_calls: 1 });
    expect(r.reported.map((v) => v.session_id)).toEqual([loop]);
  }, 60_000);

  it('with no server answering, it reads the same sessions from opencode.db (read-only)', async (ctx) => {
    if (!needsSqlite3(import.meta.filename)) return ctx.skip();
    const r = await runTick({
      config: config({
        rc_servers_file: join(dir, 'none.json'),
        servers: ['http://127.0.0.1:9'],
        opencode_db: lab.db,
        state_file: join(dir, 'db.json'),
      }),
    });
    expect(r).toMatchObject({ source: 'db', servers: 0, status: 'flagged', sessions: 2, flagged: 1 });
    expect(r.reported.map((v) => [v.session_id, v.level])).toEqual([[loop, 'looping']]);
  }, 60_000);
});
