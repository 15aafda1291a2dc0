import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Webhook } from 'standardwebhooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort, http, type Proc, sleep, startProc, stopProc, until } from './fixtures/opencode-e2e/procs.ts';
import { cleanEnv, needsOpencode, type OpencodeLab, startOpencode } from './helpers/opencode.ts';
import { type WireServer, wireServer } from './helpers/wire-servers.ts';

const HAVE_OPENCODE = needsOpencode(import.meta.filename);

// auto_recover's stages end to end, against the real opencode-ai 1.18.33 with the
// scripted fake model, `vigil serve` and the installed plugin, and no router: the plugin
// alone carries out every action. The scripted session alternates a failing
// `sh check.sh` and a read of one file, and goes straight back to that loop after each
// compaction (the fake model plays its `afterCompaction` steps again after every one).
// Vigil must: stage 1 (abort, compact with the report), judge the session afresh once
// the compaction is done, stage 2 on the renewed loop (the same plus a context cap on the
// tree), stage 3 on the next one (the whole tree refused and its tool calls blocked until
// an admin Resume). Each stage shows in GET /trees/:root and reaches a signed webhook at
// its DEFAULT settings (min_severity warning, quiet window 5m, 10 incidents per 10m), in
// order, the hard stop as critical. Then "continue" sent to the stopped session (as an
// orchestrator does) runs no tool; Resume, and the session goes on by itself. A healthy
// session in the same run: nothing.

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

/**
 * The loop: a failing check (each run leaves a line in runs.log, so the test can count
 * the tools that really ran), a read of the spec, over and over, then it gives up. Long:
 * each stage must cut it well before its end (a loop flagged after about 20 calls, its
 * abort a poll away, on a loaded machine), or the end of the script would pass for a stop.
 */
const LOOP_CALLS = 80;
const GIVES_UP = 'The check still fails.';
const LOOP = [
  ...Array.from({ length: LOOP_CALLS }, (_, i) =>
    i % 2 === 0
      ? { tool: 'bash', args: { command: 'sh check.sh' } }
      : { tool: 'read', args: { filePath: '{{workdir}}/docs/spec.md' } },
  ),
  { text: GIVES_UP },
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
  refuse_all?: { reason: string; dedup_key?: string; since: number };
  limits: Record<string, { max_context_tokens: number }>;
  recoveries: number[];
  awaiting_compaction?: { session: string };
}
interface Hook {
  type: string;
  data: { dedup_key: string; state: string; severity: string; title: string; summary: string; at: number };
}
interface Part {
  type: string;
  tool?: string;
  text?: string;
  state?: { status: string; error?: string };
}
interface Message {
  info: { id: string; role: string; summary?: boolean; error?: { name: string }; time?: { completed?: number } };
  parts: Part[];
}

let lab: OpencodeLab | undefined;
let hook: WireServer | undefined;
let vigil: Proc | undefined;
let vigilUrl = '';
let ocUrl = '';
const secret = `whsec_${randomBytes(32).toString('base64')}`;

const vigilGet = async <T>(path: string) => (await http<T>('GET', `${vigilUrl}${path}`)).data;
const treeOf = async (root: string) => (await vigilGet<{ tree: Tree | null }>(`/trees/${root}`)).tree;
const gate = async (conversation: string) =>
  (await http<{ action: string; status?: number }>('POST', `${vigilUrl}/gate`, { conversation })).data;
/** What the receiver got, each verified as a Standard Webhooks receiver does, with when it arrived. */
const hooks = (): (Hook & { received: number })[] =>
  (hook?.requests ?? []).map((r) => ({
    ...(new Webhook(secret).verify(r.text, r.headers as Record<string, string>) as Hook),
    received: r.at,
  }));
const incident = (key: string) =>
  hooks()
    .filter((h) => h.data.dedup_key === key)
    .map((h) => `${h.data.state}/${h.data.severity}`);
const messagesOf = async (id: string) => (await http<Message[]>('GET', `${ocUrl}/session/${id}/message`)).data;
const runs = () => {
  const f = join(lab?.project ?? '', 'runs.log');
  return existsSync(f) ? readFileSync(f, 'utf8').split('\n').filter(Boolean).length : 0;
};
const idle = async (id: string) => {
  const st = await http<Record<string, { type: string }>>('GET', `${ocUrl}/session/status`);
  return st.status === 200 && (st.data[id] === undefined || st.data[id].type === 'idle');
};
/**
 * The session's turns between user messages (the prompt, each compaction's continue, a
 * later prompt): for each, its assistant steps, how many ran a tool, whether the last
 * was aborted and whether the script reached its end. Printed when a check fails.
 */
const segments = (ms: Message[]) => {
  const out: { steps: number; aborted: boolean; gaveUp: boolean }[] = [];
  for (const m of ms) {
    if (m.info.role === 'user') out.push({ steps: 0, aborted: false, gaveUp: false });
    else if (!m.info.summary && out.length) {
      const s = out[out.length - 1];
      s.steps++;
      s.aborted = m.info.error?.name === 'MessageAbortedError';
      if (m.parts.some((p) => p.type === 'text' && p.text === GIVES_UP)) s.gaveUp = true;
    }
  }
  return out.filter((s) => s.steps > 0);
};
const tail = (p: Proc | undefined) => (p ? `--- ${p.name} ---\n${p.output().slice(-3000)}` : '');
const detail = () => {
  const f = join(lab?.logs ?? '', 'plugin.jsonl');
  const plugin = existsSync(f) ? `--- plugin log ---\n${readFileSync(f, 'utf8').slice(-3000)}` : '';
  return [tail(vigil), lab?.detail() ?? '', plugin].join('\n');
};

beforeAll(async () => {
  hook = await wireServer({ status: 204 });
  lab = await startOpencode({
    script: SCRIPT,
    files: {
      'src/app.js': 'export function add(a, b) {\n  return a - b;\n}\n',
      'test.sh': "#!/bin/sh\ngrep -q 'a + b' src/app.js && echo PASS || { echo 'FAIL: add' >&2; exit 1; }\n",
      'check.sh': "#!/bin/sh\necho run >> runs.log\necho 'FAIL: the spec is not met' >&2\nexit 1\n",
      'docs/spec.md': '# Spec\n\nadd(a, b) returns the sum.\n',
    },
    fakeModelLog: true,
    async beforeStart(dirs) {
      execFileSync(
        process.execPath,
        ['sensors/opencode/plugin/install.mjs', '--dest', join(dirs.xdg, 'config', 'opencode', 'plugin')],
        { cwd: ROOT, encoding: 'utf8' },
      );
      const port = await freePort();
      vigilUrl = `http://127.0.0.1:${port}`;
      const config = join(dirs.tmp, 'vigil.yaml');
      // The webhook at its defaults: only what it needs to deliver.
      writeFileSync(
        config,
        `store:\n  backend: memory\nmodes:\n  mode: auto_recover\n${THRESHOLDS}notifications:\n  channels:\n` +
          `    - name: hook\n      type: webhook\n      url: ${hook!.origin}/hook\n      secret_env: E2E_HOOK_SECRET\n`,
      );
      vigil = startProc(
        'vigil',
        process.execPath,
        ['bin/vigil.mjs', 'serve', '--port', String(port), '--config', config],
        {
          cwd: ROOT,
          env: { ...cleanEnv(), VIGIL_ADMIN_TOKEN: TOKEN, E2E_HOOK_SECRET: secret },
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
    await until('the stopped session idle', () => idle(root), { timeoutMs: 60_000, detail });
    // opencode itself: each stage cut its loop (three turns, each aborted, none ran to the
    // script's end), two compactions with a summary. idle can come a few hundred ms before
    // the aborted message gets its error and completion time: read until all are complete.
    let messages = await until(
      'every assistant message of the stopped session complete',
      async () => {
        const ms = await messagesOf(root);
        return ms.every((m) => m.info.role !== 'assistant' || m.info.time?.completed) ? ms : undefined;
      },
      { timeoutMs: 30_000, detail },
    );
    const cut = segments(messages);
    const outline = JSON.stringify(cut);
    expect(cut, outline).toHaveLength(3);
    for (const seg of cut) {
      expect(seg, outline).toMatchObject({ aborted: true, gaveUp: false });
      expect(seg.steps, outline).toBeLessThan(LOOP_CALLS);
    }
    expect(messages.filter((m) => m.info.summary === true)).toHaveLength(2);
    expect(await gate(root)).toMatchObject({ action: 'refuse', status: 429 });
    expect((await treeOf(root))?.stage).toBe(3);

    // Every stage reached the webhook at its defaults, in order, the hard stop as critical,
    // each moments after its decision (printed: no timed assertion on a shared machine).
    await until('three recovery alerts', () => incident(recovery).length >= 3, { detail });
    const rec = hooks().filter((h) => h.data.dedup_key === recovery);
    expect(rec.map((h) => `${h.type}/${h.data.severity}`)).toEqual([
      'alert.trigger/warning',
      'alert.escalate/warning',
      'alert.escalate/critical',
    ]);
    expect(rec[0].data.title).toMatch(/^recovering \(stage 1\): /);
    expect(rec[1].data.title).toMatch(/^recovering with a context cap \(stage 2\): /);
    expect(rec[2].data.title).toMatch(/^hard stop: /);
    const decided = [stopped.recoveries[0], stopped.recoveries[1], stopped.refuse_all!.since];
    console.log(
      `stage decision -> webhook received: ${rec.map((h, i) => `stage ${i + 1} ${h.received - decided[i]} ms`).join(', ')}` +
        ` (quiet_window 5m and rate_limit 10/10m, the defaults)`,
    );
    // The loop's own incident opened once (warning) and stays open: nothing resolved it as "recovered".
    expect(incident(root)).toEqual(['trigger/warning']);
    const rows = await vigilGet<{ dedup_key: string; outcome: string; reason?: string }[]>('/deliveries');
    expect(rows.filter((r) => r.outcome === 'suppressed')).toEqual([]);

    // "continue", as an orchestrator sends it: the model answers, but no tool runs; the
    // plugin refuses each call with the report and stops the session again.
    const ran = runs();
    const before = messages.length;
    expect(
      (await http('POST', `${ocUrl}/session/${root}/prompt_async`, { parts: [{ type: 'text', text: 'continue' }] }))
        .status,
    ).toBe(204);
    const refused = await until(
      'a tool call of the stopped tree refused',
      async () => {
        const ms = (await messagesOf(root)).slice(before);
        const tools = ms.flatMap((m) => m.parts.filter((p) => p.type === 'tool'));
        return tools.length && tools.every((p) => p.state?.status === 'error') && (await idle(root))
          ? tools
          : undefined;
      },
      { timeoutMs: 60_000, detail },
    );
    expect(refused[0].state?.error).toMatch(/^Vigil refused this tool call: hard stop: /);
    await sleep(1_000);
    messages = await messagesOf(root);
    const after = messages.slice(before).flatMap((m) => m.parts.filter((p) => p.type === 'tool'));
    expect(after.map((p) => p.state?.status)).toEqual(after.map(() => 'error'));
    expect(runs()).toBe(ran);
    expect(await idle(root)).toBe(true);

    // Resume: needs the admin token; then stage 0, allowed, the incident resolved; and
    // the session goes on by itself (the plugin lifts its block and nudges it).
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
    await until('the session going on after Resume', () => runs() > ran, { timeoutMs: 60_000, detail });
    const nudge = (await messagesOf(root))
      .slice(before)
      .find((m) => m.info.role === 'user' && m.parts.some((p) => p.text?.startsWith('[Vigil CONTINUATION]')));
    expect(nudge?.parts.find((p) => p.type === 'text')?.text).toMatch(/resumed by e2e/);
    await until('the recovery incident resolved', () => incident(recovery).length >= 4, { detail });
    expect(incident(recovery).slice(0, 4)).toEqual([
      'trigger/warning',
      'escalate/warning',
      'escalate/critical',
      'resolve/critical',
    ]);

    // The healthy session in the same run: no tree state, no alert.
    expect(await treeOf(healthy)).toBeNull();
    expect(hooks().filter((h) => h.data.dedup_key.startsWith(healthy))).toEqual([]);
  }, 360_000);
});
