import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort, http, type Proc, sleep, startProc, stopProc, until } from './fixtures/opencode-e2e/procs.ts';
import {
  cleanEnv,
  type FakeServer,
  fakeServer,
  json,
  needsOpencode,
  type OpencodeLab,
  startOpencode,
} from './helpers/opencode.ts';

const HAVE_OPENCODE = needsOpencode(import.meta.filename);

// auto_recover's stages end to end, against the real opencode-ai 1.18.33 with the
// scripted fake model, `vigil serve` and the installed plugin. The scripted session
// alternates a failing `sh check.sh` and a read of one file, and goes straight back to
// that loop after each compaction (the fake model plays its `afterCompaction` steps
// again after every one). Vigil must: stage 1 (abort, compact with the report), judge the
// session afresh once the compaction is done, stage 2 on the renewed loop (the same plus
// a context cap on the tree), stage 3 on the next one (the whole tree refused until an
// admin Resume). Each stage shows in GET /trees/:root and as a transition of the tree's
// recovery incident, delivered to a webhook. A healthy session in the same run: nothing.

const ROOT = join(import.meta.dirname, '..');
const TOKEN = 'recovery-e2e-token';

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

/** The loop: a failing check, a read of the spec, over and over (40 calls), then it gives up. */
const LOOP = [
  ...Array.from({ length: 40 }, (_, i) =>
    i % 2 === 0
      ? { tool: 'bash', args: { command: 'sh check.sh' } }
      : { tool: 'read', args: { filePath: '{{workdir}}/docs/spec.md' } },
  ),
  { text: 'The check still fails.' },
];
const SCRIPT = {
  title: 'Vigil recovery e2e',
  summary: '## Objective\n- Make check.sh pass\n\n## Work State\n- Stopped by Vigil.',
  endText: 'Script finished.',
  compactionDelayMs: 500,
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
        { tool: 'bash', args: { command: 'git add -A' } },
        {
          tool: 'bash',
          args: { command: "git -c user.name=e2e -c user.email=e2e@example.invalid commit -qm 'fix add'" },
        },
        { text: 'Fixed add, the test passes, committed.' },
      ],
    },
    { match: '^RECOVER-LOOP', steps: LOOP, afterCompaction: LOOP },
  ],
};

interface Tree {
  stage: number;
  refused: Record<string, unknown>;
  refuse_all?: { reason: string; dedup_key?: string };
  limits: Record<string, { max_context_tokens: number }>;
  recoveries: number[];
  awaiting_compaction?: { session: string };
}
interface Hook {
  type: string;
  data: { dedup_key: string; state: string; severity: string; title: string; summary: string };
}

let lab: OpencodeLab | undefined;
let hook: FakeServer | undefined;
let vigil: Proc | undefined;
let vigilUrl = '';
let ocUrl = '';

const vigilGet = async <T>(path: string) => (await http<T>('GET', `${vigilUrl}${path}`)).data;
const treeOf = async (root: string) => (await vigilGet<{ tree: Tree | null }>(`/trees/${root}`)).tree;
const gate = async (conversation: string) =>
  (await http<{ action: string; status?: number }>('POST', `${vigilUrl}/gate`, { conversation })).data;
const hooks = (): Hook[] => (hook?.requests ?? []).filter((r) => r.path === '/hook').map((r) => r.body as Hook);
const incident = (key: string) =>
  hooks()
    .filter((h) => h.data.dedup_key === key)
    .map((h) => `${h.data.state}/${h.data.severity}`);
const tail = (p: Proc | undefined) => (p ? `--- ${p.name} ---\n${p.output().slice(-3000)}` : '');
const detail = () => {
  const f = join(lab?.logs ?? '', 'plugin.jsonl');
  const plugin = existsSync(f) ? `--- plugin log ---\n${readFileSync(f, 'utf8').slice(-3000)}` : '';
  return [tail(vigil), lab?.detail() ?? '', plugin].join('\n');
};

beforeAll(async () => {
  hook = await fakeServer((_req, _body, res) => json(res, 200, { ok: true }));
  lab = await startOpencode({
    script: SCRIPT,
    files: {
      'src/app.js': 'export function add(a, b) {\n  return a - b;\n}\n',
      'test.sh': "#!/bin/sh\ngrep -q 'a + b' src/app.js && echo PASS || { echo 'FAIL: add' >&2; exit 1; }\n",
      'check.sh': "#!/bin/sh\necho 'FAIL: the spec is not met' >&2\nexit 1\n",
      'docs/spec.md': '# Spec\n\nadd(a, b) returns the sum.\n',
    },
    fakeModelLog: true,
    async beforeStart(dirs) {
      execFileSync(
        process.execPath,
        ['opencode/plugin/install.mjs', '--dest', join(dirs.xdg, 'config', 'opencode', 'plugin')],
        { cwd: ROOT, encoding: 'utf8' },
      );
      const port = await freePort();
      vigilUrl = `http://127.0.0.1:${port}`;
      const config = join(dirs.tmp, 'vigil.yaml');
      writeFileSync(
        config,
        `store:\n  backend: memory\nmodes:\n  mode: auto_recover\n${THRESHOLDS}notifications:\n  channels:\n` +
          `    - name: hook\n      type: webhook\n      url: ${hook!.url}/hook\n      secret_env: E2E_HOOK_SECRET\n` +
          '      min_severity: info\n      quiet_window: 0\n      rate_limit: { max: 1000, window: 1h }\n',
      );
      vigil = startProc(
        'vigil',
        process.execPath,
        ['bin/vigil.mjs', 'serve', '--port', String(port), '--config', config],
        {
          cwd: ROOT,
          env: {
            ...cleanEnv(),
            VIGIL_ADMIN_TOKEN: TOKEN,
            E2E_HOOK_SECRET: `whsec_${randomBytes(32).toString('base64')}`,
          },
          logDir: dirs.logs,
        },
      );
      await until(
        'vigil serve /health',
        async () => (await http('GET', `${vigilUrl}/health`, undefined, 2_000)).status === 200,
        {
          timeoutMs: 60_000,
          detail: () => tail(vigil),
        },
      );
    },
    env: (dirs) => ({ VIGIL_URL: vigilUrl, VIGIL_POLL_MS: '1000', VIGIL_PLUGIN_LOG: join(dirs.logs, 'plugin.jsonl') }),
  });
  ocUrl = lab.url;
}, 180_000);

afterAll(async () => {
  if (vigil) await stopProc(vigil);
  await lab?.stop();
  await hook?.close();
}, 60_000);

describe.runIf(HAVE_OPENCODE)('auto_recover stages against opencode 1.18.33', () => {
  let healthy = '';

  it('a healthy session triggers nothing', async () => {
    healthy = await lab!.runSession('healthy', 'HEALTHY: fix add() so test.sh passes');
    const row = await until(
      'the healthy session judged',
      async () => {
        const rows = await vigilGet<{ session: string; verdict: string; calls: number }[]>('/sessions');
        const r = rows.find((x) => x.session === healthy);
        return r && r.calls === 6 ? r : undefined;
      },
      { detail },
    );
    expect(row.verdict).toBe('ok');
    expect(await treeOf(healthy)).toBeNull();
  }, 240_000);

  it('a loop that survives each recovery: stage 1, stage 2 with the cap, a hard stop that holds until Resume', async () => {
    const s = await http<{ id: string }>('POST', `${ocUrl}/session`, { title: 'recover-loop' });
    const root = s.data.id;
    const recovery = `${root}:recovery`;
    // Watch the tree: each distinct state, in order.
    const seen: string[] = [];
    let watching = true;
    const watcher = (async () => {
      while (watching) {
        const t = await treeOf(root).catch(() => null);
        if (t) {
          const at = `${t.stage}${t.awaiting_compaction ? ' awaiting' : ''}${t.limits['*'] ? ' capped' : ''}${t.refuse_all ? ' stopped' : ''}`;
          if (seen.at(-1) !== at) seen.push(at);
        }
        await sleep(100);
      }
    })();

    const pa = await http('POST', `${ocUrl}/session/${root}/prompt_async`, {
      parts: [{ type: 'text', text: 'RECOVER-LOOP: make check.sh pass' }],
    });
    expect(pa.status).toBe(204);

    // Stage 1, then stage 2, then the hard stop, each on a loop that resumed after a compaction.
    const stopped = await until(
      'the hard stop',
      async () => {
        const t = await treeOf(root);
        return t?.stage === 3 ? t : undefined;
      },
      { timeoutMs: 240_000, detail: () => `${seen.join(' | ')}\n${detail()}` },
    );
    expect(stopped.refuse_all?.dedup_key).toBe(recovery);
    expect(stopped.recoveries).toHaveLength(2);
    expect(stopped.limits['*']).toMatchObject({ max_context_tokens: 100_000 });

    // Each stage was visible, in order: recovering, lifted after the compaction, again
    // with the cap, lifted, stopped.
    await until('the watcher to see the stop', () => seen.at(-1)?.startsWith('3'), { detail });
    const order = ['1 awaiting', '1', '2 awaiting capped', '2 capped', '3 capped stopped'];
    let from = 0;
    for (const want of order) {
      const at = seen.indexOf(want, from);
      expect(at, `${want} in ${seen.join(' | ')}`).toBeGreaterThanOrEqual(from);
      from = at + 1;
    }

    // Each compaction request carried the incident report.
    const compactions = readFileSync(lab!.fakeLog, 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l))
      .filter((q) => q.tools.length === 0 && JSON.stringify(q.body?.messages ?? []).includes('<conversation>'));
    expect(
      compactions.filter((q) => JSON.stringify(q.body.messages).includes('[vigil]')).length,
    ).toBeGreaterThanOrEqual(2);

    // The root was aborted and stays idle; the stop holds: every conversation of the tree refused.
    await until(
      'the stopped session idle',
      async () => {
        const st = await http<Record<string, { type: string }>>('GET', `${ocUrl}/session/status`);
        return st.status === 200 && (st.data[root] === undefined || st.data[root].type === 'idle');
      },
      { timeoutMs: 60_000, detail },
    );
    // opencode itself: three aborted turns (one per stage), two compactions with a summary
    const messages = await http<{ info: { summary?: boolean; error?: { name: string } } }[]>(
      'GET',
      `${ocUrl}/session/${root}/message`,
    );
    expect(messages.data.filter((m) => m.info.error?.name === 'MessageAbortedError').length).toBeGreaterThanOrEqual(3);
    expect(messages.data.filter((m) => m.info.summary === true)).toHaveLength(2);
    expect(await gate(root)).toMatchObject({ action: 'refuse', status: 429 });
    expect((await treeOf(root))?.stage).toBe(3);
    expect(await gate(root)).toMatchObject({ action: 'refuse' });

    // The recovery incident escalated with each stage.
    await until('three recovery alerts', () => incident(recovery).length >= 3, { detail });
    expect(incident(recovery)).toEqual(['trigger/info', 'escalate/warning', 'escalate/critical']);
    const titles = hooks()
      .filter((h) => h.data.dedup_key === recovery)
      .map((h) => h.data.title);
    expect(titles[0]).toMatch(/^recovering \(stage 1\): /);
    expect(titles[1]).toMatch(/^recovering with a context cap \(stage 2\): /);
    expect(titles[2]).toMatch(/^hard stop: /);
    expect(hooks().find((h) => h.data.dedup_key === recovery && h.data.state === 'escalate')?.type).toBe(
      'alert.escalate',
    );

    // Resume: needs the admin token; then stage 0, allowed, the incident resolved.
    const resume = (token?: string) =>
      fetch(`${vigilUrl}/trees/${root}/resume`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...(token ? { authorization: `Bearer ${token}` } : {}) },
        body: JSON.stringify({ by: 'e2e' }),
      });
    expect((await resume()).status).toBe(401);
    expect((await treeOf(root))?.stage).toBe(3);
    expect((await resume(TOKEN)).status).toBe(200);
    watching = false;
    await watcher;
    expect((await treeOf(root))?.stage).toBe(0);
    expect(await gate(root)).toMatchObject({ action: 'allow' });
    await until('the recovery incident resolved', () => incident(recovery).at(-1) === 'resolve/critical', { detail });

    // The healthy session in the same run: no tree state, no alert.
    expect(await treeOf(healthy)).toBeNull();
    expect(hooks().filter((h) => h.data.dedup_key.startsWith(healthy))).toEqual([]);
  }, 360_000);
});
