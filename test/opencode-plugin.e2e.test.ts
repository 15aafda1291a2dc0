import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ProgressEvent } from '../core/wire.ts';
import { defaultKnobs } from '../detectors/no-progress/knobs.ts';
import { newLandedTracker, type OcMessageInfo, textOnlyStep, toolPartToEvent } from '../sensors/opencode/convert.ts';
import { freePort, http, type Proc, sleep, startProc, stopProc, until } from './fixtures/opencode-e2e/procs.ts';
import { cleanEnv, needsOpencode, type OpencodeLab, startOpencode } from './helpers/opencode.ts';

const HAVE_OPENCODE = needsOpencode(import.meta.filename);

// The opencode plugin end to end, against the real opencode-ai 1.18.33 (the
// devDependency's binary) and a scripted fake model (test/fixtures/opencode-e2e/, from
// the shared lab), with `vigil serve` as the judge. The plugin is built and installed
// by sensors/opencode/plugin/install.mjs into an isolated XDG config dir. Everything
// binds to loopback; every process runs in its own process group and is stopped in
// afterAll; the temp dir is removed (VIGIL_E2E_KEEP=1 keeps it: logs/ has the
// plugin's debug log, the fake model's requests and every server's output).

const ROOT = join(import.meta.dirname, '..');
const FIX = join(ROOT, 'test', 'fixtures', 'opencode-e2e');

// Small but realistic thresholds: a loop is flagged after a couple of dozen calls.
const THRESHOLDS = `progress:
  window: 30
  dup_min_events: 10
  stall_turns: 10
  loop_turns: 20
  top_warn: 8
  top_loop: 16
  session_repeat_warn: 10
  session_repeat_loop: 20
`;
// Memory backend and no channels: nothing shared with other test runs, no desktop popups.
const overlay = (mode: string) =>
  `store:\n  backend: memory\nmodes:\n  mode: ${mode}\n${THRESHOLDS}notifications:\n  channels: []\n`;

let lab: OpencodeLab | undefined;
let tmp = '';
let logs = '';
let fakeLog = '';
let vigilUrl = '';
let vigilPort = 0;
let ocUrl = '';
let pluginVersion = '';
let vigil: Proc | undefined;
const procs: Proc[] = [];
// Between the plugin and the service: forwards every request as is, and keeps the
// progress events the plugin sent (to compare with what the converter makes of the
// stored history).
let proxy: Server | undefined;
const sent: ProgressEvent[] = [];
/** Each plugin request's route and whether it carried session keys (X-Vigil-Session-Key). */
const keyed: { route: string; key: boolean }[] = [];

async function startProxy(): Promise<string> {
  const port = await freePort();
  proxy = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', async () => {
      const body = Buffer.concat(chunks);
      keyed.push({ route: `${req.method} ${req.url?.split('?')[0]}`, key: !!req.headers['x-vigil-session-key'] });
      if (req.method === 'POST' && req.url === '/progress') {
        try {
          sent.push(...(JSON.parse(body.toString('utf8')) as ProgressEvent[]));
        } catch {
          // not ours to judge: the service answers it
        }
      }
      try {
        const headers = Object.fromEntries(
          Object.entries(req.headers).filter(([k]) => k !== 'host' && k !== 'content-length' && k !== 'connection'),
        ) as Record<string, string>;
        const r = await fetch(`${vigilUrl}${req.url}`, {
          method: req.method,
          headers,
          body: req.method === 'GET' || req.method === 'HEAD' ? undefined : body,
        });
        res.writeHead(r.status, { 'content-type': r.headers.get('content-type') ?? 'application/json' });
        res.end(Buffer.from(await r.arrayBuffer()));
      } catch {
        res.writeHead(502);
        res.end();
      }
    });
  });
  await new Promise<void>((r) => proxy?.listen(port, '127.0.0.1', () => r()));
  return `http://127.0.0.1:${port}`;
}

interface SessionRow {
  session: string;
  agent: string | null;
  parent: string | null;
  root: string;
  verdict: string;
  reason: string;
  stage: number;
  top_target: string | null;
  top_count: number;
  calls: number;
  landed: number;
  plugin_live: boolean;
  plugin_version: string | null;
}
interface OcMessage {
  info: {
    id: string;
    role: string;
    agent?: string;
    finish?: string;
    summary?: boolean;
    error?: { name: string };
    time: { completed?: number };
  };
  parts: {
    type: string;
    tool?: string;
    text?: string;
    synthetic?: boolean;
    state?: { status: string; error?: string };
  }[];
}
interface FakeRequest {
  headers: Record<string, string>;
  tools: string[];
  decision: { kind: string; script?: string };
  body?: { messages: { role: string; content: unknown }[] };
}

const vigilGet = async <T>(path: string) => (await http<T>('GET', `${vigilUrl}${path}`)).data;
const ocGet = async <T>(path: string) => (await http<T>('GET', `${ocUrl}${path}`)).data;
const row = async (id: string) => (await vigilGet<SessionRow[]>('/sessions')).find((r) => r.session === id);
const toolCalls = (ms: OcMessage[]) => ms.flatMap((m) => m.parts).filter((p) => p.type === 'tool');
const fakeRequests = (): FakeRequest[] =>
  existsSync(fakeLog)
    ? readFileSync(fakeLog, 'utf8')
        .trim()
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l))
    : [];
const textOf = (c: unknown): string =>
  typeof c === 'string'
    ? c
    : Array.isArray(c)
      ? c.map((x) => (typeof x === 'string' ? x : (x?.text ?? ''))).join('\n')
      : '';
const tail = (p: Proc | undefined) => (p ? `--- ${p.name} (last 3000 chars) ---\n${p.output().slice(-3000)}` : '');
const pluginLog = () => {
  const f = join(logs, 'plugin.jsonl');
  return existsSync(f) ? `--- plugin log ---\n${readFileSync(f, 'utf8').slice(-3000)}` : '';
};
const detail = () => [tail(vigil), lab?.detail() ?? '', pluginLog()].join('\n');

async function startVigil(mode: string): Promise<Proc> {
  const file = join(tmp, `vigil-${mode}.yaml`);
  writeFileSync(file, overlay(mode));
  const p = startProc(
    `vigil-${mode}`,
    process.execPath,
    ['bin/vigil.mjs', 'serve', '--port', String(vigilPort), '--config', file],
    {
      cwd: ROOT,
      env: cleanEnv(),
      logDir: logs,
    },
  );
  procs.push(p);
  await until(
    'vigil serve /health',
    async () => (await http('GET', `${vigilUrl}/health`, undefined, 2_000)).status === 200,
    {
      timeoutMs: 60_000,
      detail: () => tail(p),
    },
  );
  return p;
}

/** POST a prompt and wait for the whole agent loop (the sync route answers when it ends). */
async function runSession(title: string, prompt: string): Promise<{ id: string; messages: OcMessage[] }> {
  const s = await http<{ id: string }>('POST', `${ocUrl}/session`, { title });
  expect(s.status).toBe(200);
  const r = await http(
    'POST',
    `${ocUrl}/session/${s.data.id}/message`,
    { parts: [{ type: 'text', text: prompt }] },
    240_000,
  );
  expect(r.status, JSON.stringify(r.data).slice(0, 300)).toBe(200);
  return { id: s.data.id, messages: await ocGet<OcMessage[]>(`/session/${s.data.id}/message`) };
}

beforeAll(async () => {
  // The project: a git repo with a bug, a test script and a spec the loops read.
  const files = {
    'src/app.js': 'export function add(a, b) {\n  return a - b;\n}\n',
    'test.sh': "#!/bin/sh\ngrep -q 'a + b' src/app.js && echo PASS || { echo 'FAIL: add' >&2; exit 1; }\n",
    'docs/spec.md': '# Spec\n\nadd(a, b) returns the sum.\n',
    'status.txt': 'build: not started\n',
  };
  let proxyUrl = '';
  lab = await startOpencode({
    script: JSON.parse(readFileSync(join(FIX, 'script.json'), 'utf8')),
    files,
    fakeModelLog: true,
    async beforeStart(dirs) {
      tmp = dirs.tmp;
      logs = dirs.logs;
      // The plugin, built and installed the way an operator does it.
      const out = execFileSync(
        process.execPath,
        ['sensors/opencode/plugin/install.mjs', '--dest', join(dirs.xdg, 'config', 'opencode', 'plugin')],
        { cwd: ROOT, encoding: 'utf8' },
      );
      pluginVersion = /installed (vigil-opencode\/\S+)/.exec(out)?.[1] ?? '';
      expect(pluginVersion).toMatch(/^vigil-opencode\/\d+\.\d+\.\d+\+[0-9a-f]{8}$/);
      // Vigil, warn mode first (the sensor alone).
      vigilPort = await freePort();
      vigilUrl = `http://127.0.0.1:${vigilPort}`;
      vigil = await startVigil('warn');
      proxyUrl = await startProxy();
    },
    env: (dirs) => ({
      VIGIL_URL: proxyUrl,
      VIGIL_POLL_MS: '1000',
      VIGIL_PLUGIN_LOG: join(dirs.logs, 'plugin.jsonl'),
    }),
  });
  ocUrl = lab.url;
  fakeLog = lab.fakeLog;
}, 180_000);

afterAll(async () => {
  for (const p of procs.reverse()) await stopProc(p);
  await lab?.stop();
  await new Promise((r) => (proxy ? proxy.close(r) : r(undefined)));
}, 60_000);

/** The tool calls of a session up to its first aborted step. */
function callsBeforeAbort(ms: OcMessage[]): number {
  let n = 0;
  for (const m of ms) {
    if (m.info.error?.name === 'MessageAbortedError') return n + toolCalls([m]).length;
    n += toolCalls([m]).length;
  }
  return n;
}

describe.runIf(HAVE_OPENCODE)('the opencode plugin against opencode 1.18.33', () => {
  it('keeps a healthy session ok: edits with diffs, a test that passes after failing, a commit', async () => {
    const { id, messages } = await runSession('healthy', 'HEALTHY: fix add() so test.sh passes');
    const calls = toolCalls(messages);
    expect(calls.map((c) => `${c.tool}:${c.state?.status}`)).toEqual([
      'read:completed',
      'bash:completed',
      'edit:completed',
      'bash:completed',
      'read:completed',
      'write:completed',
      'edit:completed',
      'bash:completed',
      'bash:completed',
      'bash:completed',
    ]);
    const r = await until(
      'all 10 events judged',
      async () => {
        const x = await row(id);
        return x && x.calls === 10 ? x : undefined;
      },
      { detail },
    );
    expect(r.verdict).toBe('ok');
    expect(r.landed).toBeGreaterThanOrEqual(4); // edit, passing test after a failure, write, edit, commit
    expect(r.agent).toBe('build');
    expect(r.plugin_version).toBe(pluginVersion);
    expect(r.plugin_live).toBe(true);

    // The identity headers reached the model (the fake model logs x- headers).
    const mine = fakeRequests().filter((q) => q.headers['x-router-conversation'] === id);
    expect(mine.length).toBeGreaterThanOrEqual(11);
    for (const q of mine) {
      expect(q.headers['x-router-agent']).toBe('build');
      expect(q.headers['x-vigil-plugin']).toBe(pluginVersion);
      expect(q.headers['x-router-parent']).toBeUndefined();
    }
    const health = await vigilGet<{ plugins: { version: string }[] }>('/health');
    expect(health.plugins.map((p) => p.version)).toContain(pluginVersion);
  }, 240_000);

  it('flags a session that reads one file over and over (warn mode: it runs on)', async () => {
    const { id, messages } = await runSession('loop-warn', 'LOOP-WARN: understand docs/spec.md');
    const calls = toolCalls(messages);
    expect(calls).toHaveLength(30);
    expect(calls.every((c) => c.tool === 'read' && c.state?.status === 'completed')).toBe(true);
    const r = await until(
      '30 events judged',
      async () => {
        const x = await row(id);
        return x && x.calls === 30 ? x : undefined;
      },
      { detail },
    );
    expect(r.verdict).toBe('looping');
    expect(r.top_target).toBe('read docs/spec.md');
    expect(r.top_count).toBeGreaterThanOrEqual(20);
    expect(r.landed).toBe(0);
    expect(r.stage).toBe(0); // warn: no recovery
    expect(r.reason).toMatch(/^looping: /);
    const report = (await http<string>('GET', `${vigilUrl}/sessions/${id}/report`)).data;
    expect(report).toContain('read docs/spec.md');
  }, 240_000);

  it('auto_recover: aborts a looping child, compacts its root with the incident report, lifts after compaction_done', async () => {
    // The same plugin, a judge in auto_recover mode on the same port (the plugin's
    // buffer and directive poll ride over the restart).
    if (vigil) await stopProc(vigil);
    vigil = await startVigil('auto_recover');
    expect((await vigilGet<{ mode: string }>('/health')).mode).toBe('auto_recover');

    const s = await http<{ id: string }>('POST', `${ocUrl}/session`, { title: 'orchestrator' });
    const root = s.data.id;
    // Watch the tree while the recovery runs: the refusal and the wait for the
    // compaction must show, then the lift.
    const seen: { refusedChild: boolean; awaiting: boolean; stage: number }[] = [];
    let child = '';
    let watching = true;
    const watcher = (async () => {
      while (watching) {
        const t = await vigilGet<{
          tree: { stage: number; refused: Record<string, unknown>; awaiting_compaction?: unknown } | null;
        }>(`/trees/${root}`).catch(() => undefined);
        if (t?.tree) {
          seen.push({
            refusedChild: child !== '' && child in t.tree.refused,
            awaiting: !!t.tree.awaiting_compaction,
            stage: t.tree.stage,
          });
        }
        await sleep(100);
      }
    })();

    const pa = await http('POST', `${ocUrl}/session/${root}/prompt_async`, {
      parts: [{ type: 'text', text: 'ORCHESTRATE: have a worker study the spec' }],
    });
    expect(pa.status).toBe(204);
    child = await until(
      'the worker child session',
      async () => {
        const kids = await ocGet<{ id: string }[]>(`/session/${root}/children`);
        return kids[0]?.id;
      },
      { detail },
    );

    // The judge flags the child, the plugin aborts it and the root, compacts the root
    // with the report, the root resumes from the compacted context and finishes.
    const flagged = await until(
      'the child flagged looping',
      async () => {
        const x = await row(child);
        return x && x.verdict === 'looping' ? x : undefined;
      },
      { timeoutMs: 120_000, detail },
    );
    expect(flagged.parent).toBe(root);
    expect(flagged.root).toBe(root);
    expect(flagged.agent).toBe('general');

    const rootMessages = await until(
      'the root to resume and finish after its compaction',
      async () => {
        const ms = await ocGet<OcMessage[]>(`/session/${root}/message`);
        const last = ms.at(-1);
        const done =
          last?.info.role === 'assistant' &&
          last.info.time.completed &&
          last.parts.some((p) => p.text?.startsWith('Recovered'));
        return done ? ms : undefined;
      },
      { timeoutMs: 120_000, detail },
    );

    // Root: aborted turn, compaction request, summary, opencode's synthetic continue, the resumed answer.
    expect(rootMessages.some((m) => m.info.error?.name === 'MessageAbortedError')).toBe(true);
    expect(rootMessages.some((m) => m.parts.some((p) => p.type === 'compaction'))).toBe(true);
    expect(rootMessages.some((m) => m.info.summary === true)).toBe(true);
    expect(rootMessages.some((m) => m.parts.some((p) => p.type === 'text' && p.synthetic))).toBe(true);

    // Child: stopped before its 40 scripted reads, once the unbroken run of identical
    // reads (the same result each time) was a loop.
    const childMessages = await ocGet<OcMessage[]>(`/session/${child}/message`);
    expect(childMessages.some((m) => m.info.error?.name === 'MessageAbortedError')).toBe(true);
    expect(toolCalls(childMessages).length).toBeLessThan(40);
    expect(toolCalls(childMessages).length).toBeGreaterThanOrEqual(defaultKnobs().result_lookup_run_loop);

    // The compaction request the model got carries the incident report at its end.
    const compaction = fakeRequests().find(
      (q) => q.tools.length === 0 && q.body?.messages.some((m) => textOf(m.content).includes('<conversation>')),
    );
    expect(compaction, 'a compaction request reached the model').toBeDefined();
    const prompt = compaction!.body!.messages.map((m) => textOf(m.content)).join('\n');
    expect(prompt).toContain('[vigil] A sub-agent');
    expect(prompt).toContain(`session: ${child}`);
    expect(prompt).toContain('read docs/spec.md');
    expect(prompt).toMatch(/Avoid: /);
    // The child's model requests named its parent.
    const childReqs = fakeRequests().filter((q) => q.headers['x-router-conversation'] === child);
    expect(childReqs.length).toBeGreaterThan(0);
    expect(
      childReqs.every((q) => q.headers['x-router-parent'] === root && q.headers['x-router-agent'] === 'general'),
    ).toBe(true);

    // The tree: stage 1, and once compaction_done arrived, the refusal lifted and every
    // directive (abort x2, compact, toast, lift) acknowledged.
    const tree = await until(
      'the refusal lifted and all directives acknowledged',
      async () => {
        const t = await vigilGet<{
          tree: {
            stage: number;
            refused: Record<string, unknown>;
            awaiting_compaction?: unknown;
            recoveries: number[];
          };
          directives: unknown[];
        }>(`/trees/${root}`);
        return t.tree &&
          !t.tree.awaiting_compaction &&
          Object.keys(t.tree.refused).length === 0 &&
          t.directives.length === 0
          ? t
          : undefined;
      },
      { timeoutMs: 60_000, detail },
    );
    watching = false;
    await watcher;
    expect(tree.tree.stage).toBe(1);
    expect(tree.tree.recoveries).toHaveLength(1);
    expect(seen.some((x) => x.refusedChild && x.awaiting && x.stage === 1)).toBe(true);
    // (Read afresh: the watcher's last read may have been answered before the lift.)
    const after = await vigilGet<{
      tree: { stage: number; refused: Record<string, unknown>; awaiting_compaction?: unknown };
    }>(`/trees/${root}`);
    expect({
      refusedChild: child in after.tree.refused,
      awaiting: !!after.tree.awaiting_compaction,
      stage: after.tree.stage,
    }).toEqual({ refusedChild: false, awaiting: false, stage: 1 });
    // Every report, poll and ack carried the sessions' keys, so the tree is bound to this
    // plugin: another local process cannot stop it again (no key: 403, nothing judged).
    const routes = new Set(keyed.map((k) => k.route));
    for (const r of ['POST /progress', 'GET /directives', 'POST /directives/ack']) expect(routes).toContain(r);
    expect(keyed.filter((k) => !k.key)).toEqual([]);
    const forged = await http<{ code: string }>('POST', `${vigilUrl}/verdicts`, {
      session_id: child,
      level: 'looping',
      reason: 'forged',
      source: 'watchdog',
    });
    expect([forged.status, forged.data.code]).toEqual([403, 'SESSION_KEY_MISMATCH']);
    expect((await vigilGet<{ tree: { stage: number } }>(`/trees/${root}`)).tree.stage).toBe(1);
  }, 300_000);
  it('sends result fingerprints and text fingerprints, as the converter computes them from the stored history', async () => {
    // every session so far: the plugin's tool events against the stored parts, converted
    const ids = [...new Set(sent.map((e) => e.session_id))];
    expect(ids.length).toBeGreaterThanOrEqual(3);
    let compared = 0;
    let texts = 0;
    for (const id of ids) {
      const ms = await ocGet<{ info: OcMessageInfo; parts: Record<string, unknown>[] }[]>(`/session/${id}/message`);
      const stored = new Map<string, string | undefined>();
      const steps = new Map<string, string | undefined>();
      for (const m of ms) {
        steps.set(m.info.id, textOnlyStep(m.info, m.parts));
        for (const p of m.parts) {
          if (p.type !== 'tool') continue;
          const r = toolPartToEvent(p, { session_id: id, cwd: lab?.project }, newLandedTracker());
          if (r) stored.set(r.event.call_id, r.event.result_fingerprint);
        }
      }
      for (const e of sent) {
        if (e.session_id !== id) continue;
        if (e.kind === 'tool' && stored.has(e.call_id)) {
          expect(e.result_fingerprint, `${id} ${e.tool} ${e.call_id}`).toMatch(/^[0-9a-f]{64}$/);
          expect(e.result_fingerprint).toBe(stored.get(e.call_id));
          compared++;
        }
        if (e.kind === 'assistant' && steps.has(e.call_id)) {
          expect(e.text_fingerprint, `${id} ${e.call_id}`).toBe(steps.get(e.call_id));
          if (e.text_fingerprint) texts++;
        }
      }
    }
    expect(compared).toBeGreaterThanOrEqual(30);
    // the scripted final answers ("Fixed add, ...", "I read the spec again and again.")
    expect(texts).toBeGreaterThanOrEqual(2);
    // nothing of the outputs or the text went out
    const wire = JSON.stringify(sent);
    expect(wire).not.toContain('returns the sum');
    expect(wire).not.toContain('Fixed add');
  });

  it('auto_recover: stops a 30-read loop on an unchanged file within 6 calls', async () => {
    const { id } = await (async () => {
      const s = await http<{ id: string }>('POST', `${ocUrl}/session`, { title: 'read-loop' });
      const pa = await http('POST', `${ocUrl}/session/${s.data.id}/prompt_async`, {
        parts: [{ type: 'text', text: 'READ-LOOP: understand docs/spec.md' }],
      });
      expect(pa.status).toBe(204);
      return s.data;
    })();
    const flagged = await until(
      'the loop flagged looping',
      async () => {
        const x = await row(id);
        return x && x.verdict !== 'ok' && x.stage >= 1 ? x : undefined;
      },
      { timeoutMs: 120_000, detail },
    );
    expect(flagged.top_target).toBe('read docs/spec.md');
    const messages = await until(
      'the session aborted, compacted and finished',
      async () => {
        const ms = await ocGet<OcMessage[]>(`/session/${id}/message`);
        const last = ms.at(-1);
        return last?.info.role === 'assistant' &&
          last.info.time.completed &&
          last.parts.some((p) => p.text?.startsWith('Recovered'))
          ? ms
          : undefined;
      },
      { timeoutMs: 120_000, detail },
    );
    expect(messages.some((m) => m.info.error?.name === 'MessageAbortedError')).toBe(true);
    const n = callsBeforeAbort(messages);
    expect(n, detail()).toBeGreaterThanOrEqual(defaultKnobs().result_lookup_run_loop);
    expect(n, detail()).toBeLessThanOrEqual(6);
    expect(toolCalls(messages).length).toBe(n);
    // the incident report in the compaction prompt names the run and its unchanged result
    const compaction = fakeRequests().find(
      (q) =>
        q.tools.length === 0 &&
        q.body?.messages.some((m) => textOf(m.content).includes('<conversation>')) &&
        q.body.messages.some((m) => textOf(m.content).includes(`session: ${id}`)),
    );
    expect(compaction, 'the compaction request reached the model').toBeDefined();
    const prompt = compaction?.body?.messages.map((m) => textOf(m.content)).join('\n') ?? '';
    expect(prompt).toMatch(/in a row: read docs\/spec\.md x\d+, the same result each time/);
    console.log(`read loop: ${n} calls before the abort`);
  }, 300_000);

  it('auto_recover: lets a loop that polls a file which changes each time run to its end', async () => {
    const { id, messages } = await runSession('poll-changing', 'POLL-CHANGING: wait for the build in status.txt');
    const calls = toolCalls(messages);
    expect(calls).toHaveLength(30);
    expect(messages.some((m) => m.info.error)).toBe(false);
    const r = await until(
      '30 polls judged',
      async () => {
        const x = await row(id);
        return x && x.calls === 30 ? x : undefined;
      },
      { detail },
    );
    expect(r.verdict).toBe('ok');
    expect(r.stage).toBe(0);
    // the same call every time, a new result every time
    const polls = sent.filter((e) => e.session_id === id && e.kind === 'tool');
    expect(polls).toHaveLength(30);
    expect(new Set(polls.map((e) => (e.kind === 'tool' ? e.fingerprint : ''))).size).toBe(1);
    expect(new Set(polls.map((e) => (e.kind === 'tool' ? e.result_fingerprint : ''))).size).toBe(30);
  }, 300_000);
});
