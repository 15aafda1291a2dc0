import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { SessionRow } from '../core/engine.ts';
import type { Vigil } from '../core/vigil.ts';
import { http, until } from './fixtures/opencode-e2e/procs.ts';
import { needsOpencode, type OpencodeLab, startOpencode } from './helpers/opencode.ts';

const HAVE_OPENCODE = needsOpencode(import.meta.filename);

// The README's "Embed it in a router", end to end with real traffic: the example router
// (test/fixtures/readme-router.ts, the README block verbatim: test/readme.test.ts) sits
// between the real opencode 1.18.33 and the scripted fake model, which streams every
// answer (SSE, usage in the last chunk). The plugin is installed and pointed at the
// router as the README's commands say. A worker that reads one file over and over is
// flagged with its model and spend from the streamed usage, its tree is recovered
// (auto_recover stage 1), and while the recovery is held in its middle (the fake model
// keeps the root's compaction summary until the test lets it go) the worker's next
// request gets a 429 and another tree's requests pass.

const ROOT = join(import.meta.dirname, '..');
const README = readFileSync(join(ROOT, 'README.md'), 'utf8');

/** The README's commands for opencode behind the router, comments dropped. */
function commands(): string[] {
  const at = README.indexOf('<!-- readme-test: router-opencode -->');
  const block = /```sh\n([\s\S]*?)```/.exec(README.slice(at))?.[1] ?? '';
  return block
    .split('\n')
    .map((l) => l.replace(/\s+#.*$/, '').trim())
    .filter(Boolean);
}

const SCRIPT = {
  title: 'Vigil router e2e',
  summary: '## Objective\n- Finish the task\n\n## Work State\n- A worker was stopped by Vigil.',
  endText: 'Script finished.',
  steps: [{ text: 'Nothing scripted for this prompt.' }],
  scripts: [
    {
      match: '^ORCHESTRATE',
      steps: [
        {
          tool: 'task',
          args: {
            description: 'Study the spec',
            prompt: 'SUBAGENT-LOOP: study docs/spec.md',
            subagent_type: 'general',
          },
        },
        { text: 'The worker finished.' },
      ],
      afterCompaction: [{ text: 'Recovered from the compacted context: stopping here.' }],
    },
    {
      match: '^SUBAGENT-LOOP',
      steps: [
        { tool: 'read', args: { filePath: '{{workdir}}/docs/spec.md' }, repeat: 40 },
        { text: 'Read it 40 times.' },
      ],
    },
    {
      match: '^HEALTHY',
      steps: [
        { tool: 'read', args: { filePath: '{{workdir}}/src/app.js' } },
        { tool: 'edit', args: { filePath: '{{workdir}}/src/app.js', oldString: 'a - b', newString: 'a + b' } },
        { tool: 'bash', args: { command: 'sh test.sh' } },
        { text: 'Fixed add.' },
      ],
    },
  ],
};

interface Seen {
  conversation: string;
  status: number;
  stream: boolean;
  tools: boolean;
  type: string;
  retryAfter?: string;
}
interface OcMessage {
  info: { role: string; time: { completed?: number }; error?: { name: string } };
  parts: { type: string; text?: string }[];
}

let lab: OpencodeLab;
let router: FastifyInstance;
let vigil: Vigil;
let routerUrl = '';
let hold = '';
const seen: Seen[] = [];
const env = { UPSTREAM_URL: process.env.UPSTREAM_URL, UPSTREAM_KEY: process.env.UPSTREAM_KEY };

const row = async (id: string) => (await vigil.engine.sessionRow(id)) as (SessionRow & Record<string, any>) | undefined;
const ocGet = async <T>(path: string) => (await http<T>('GET', `${lab.url}${path}`)).data;
const pluginLog = () => {
  const f = join(lab?.logs ?? '', 'plugin.jsonl');
  return existsSync(f) ? `--- plugin log ---\n${readFileSync(f, 'utf8').slice(-3000)}` : '';
};
const detail = () => `${lab?.detail() ?? ''}\n${pluginLog()}\n--- router ---\n${JSON.stringify(seen.slice(-20))}`;

beforeAll(async () => {
  process.env.UPSTREAM_KEY = 'fake-key';
  // The README's router, as written; the test only listens to what passes through it.
  ({ router, vigil } = await import('./fixtures/readme-router.ts'));
  router.addHook('onResponse', async (req, reply) => {
    const conv = req.headers['x-router-conversation'] ?? req.headers['x-session-id'];
    if (typeof conv !== 'string' || !req.url.endsWith('/chat/completions')) return;
    const body = req.body as { stream?: boolean; tools?: unknown[] };
    seen.push({
      conversation: conv,
      status: reply.statusCode,
      stream: body?.stream === true,
      tools: Boolean(body?.tools?.length),
      type: String(reply.getHeader('content-type') ?? ''),
      ...(reply.getHeader('retry-after') ? { retryAfter: String(reply.getHeader('retry-after')) } : {}),
    });
  });
  routerUrl = await router.listen({ host: '127.0.0.1', port: 0 });
  const [install, exportUrl] = commands();
  expect(install).toBe('npx vigil install opencode');
  // The README's address, on the port this test got.
  const m = /^export VIGIL_URL=http:\/\/127\.0\.0\.1:8080(\/\S*)$/.exec(exportUrl ?? '');
  expect(m, exportUrl).not.toBeNull();
  const vigilUrl = `${routerUrl}${m?.[1]}`;

  lab = await startOpencode({
    script: SCRIPT,
    files: {
      'src/app.js': 'export function add(a, b) {\n  return a - b;\n}\n',
      'test.sh': "#!/bin/sh\ngrep -q 'a + b' src/app.js && echo PASS || { echo 'FAIL: add' >&2; exit 1; }\n",
      'docs/spec.md': '# Spec\n\nadd(a, b) returns the sum.\n',
    },
    modelUrl: (fake) => {
      process.env.UPSTREAM_URL = fake;
      return routerUrl;
    },
    beforeStart(dirs) {
      hold = join(dirs.tmp, 'release-compaction');
      writeFileSync(join(dirs.tmp, 'script.json'), JSON.stringify({ ...SCRIPT, compactionHoldFile: hold }));
      // The install as the README says, into this lab's config dir.
      const r = spawnSync('bash', ['-c', install], {
        cwd: ROOT,
        env: {
          PATH: process.env.PATH,
          HOME: dirs.tmp,
          XDG_CONFIG_HOME: join(dirs.xdg, 'config'),
          npm_config_update_notifier: 'false',
        },
        encoding: 'utf8',
        timeout: 120_000,
      });
      expect(r.stderr).toBe('');
      expect(r.status).toBe(0);
      expect(existsSync(join(dirs.xdg, 'config', 'opencode', 'plugin', 'vigil.js'))).toBe(true);
    },
    env: (dirs) => ({ VIGIL_URL: vigilUrl, VIGIL_POLL_MS: '1000', VIGIL_PLUGIN_LOG: join(dirs.logs, 'plugin.jsonl') }),
  });
}, 240_000);

afterAll(async () => {
  if (hold && existsSync(dirname(hold)) && !existsSync(hold)) writeFileSync(hold, '');
  await lab?.stop();
  await router?.close();
  await vigil?.close();
  for (const [k, v] of Object.entries(env)) {
    if (v === undefined) delete process.env[k];
    else process.env[k] = v;
  }
}, 60_000);

describe.runIf(HAVE_OPENCODE)('README: the router embedding Vigil, with opencode 1.18.33 streaming through it', () => {
  it('flags the looping worker with its model and streamed spend, refuses it with a 429 while another tree passes', async () => {
    const s = await http<{ id: string }>('POST', `${lab.url}/session`, { title: 'orchestrator' });
    const root = s.data.id;
    const pa = await http('POST', `${lab.url}/session/${root}/prompt_async`, {
      parts: [{ type: 'text', text: 'ORCHESTRATE: have a worker study the spec' }],
    });
    expect(pa.status).toBe(204);
    const child = await until(
      'the worker child session',
      async () => (await ocGet<{ id: string }[]>(`/session/${root}/children`))[0]?.id,
      { detail },
    );

    // Flagged by the judge in the router's process, from the plugin's reports through
    // the router's mount, with the model and spend of the streamed answers.
    const flagged = await until(
      'the worker flagged looping',
      async () => {
        const x = await row(child);
        return x?.verdict === 'looping' ? x : undefined;
      },
      { timeoutMs: 120_000, detail },
    );
    expect(flagged).toMatchObject({ parent: root, root, agent: 'general', plugin_live: true, models: ['loop-model'] });
    expect(flagged.top_target).toBe('read docs/spec.md');
    expect(flagged.context_tokens).toBeGreaterThan(1000);
    expect(flagged.usd_since_landed).toBeGreaterThan(0);
    expect(flagged.reason).toMatch(/\(\$\d+\.\d\d\)/);
    expect(flagged.reason).not.toContain('($0.00)');
    const workerCalls = seen.filter((x) => x.conversation === child);
    expect(workerCalls.length).toBeGreaterThan(0);
    // Every model request of the worker asked for a stream, and every answer the model
    // gave was one (a request refused once the loop was flagged got the gate's JSON 429).
    expect(workerCalls.every((x) => x.stream)).toBe(true);
    // The worker reads one file with the same result each time: the judge flags it after
    // four such calls (the repeat rule that compares results), so at least four answers
    // were streamed before the gate refused.
    const answered = workerCalls.filter((x) => x.status === 200);
    expect(answered.length).toBeGreaterThanOrEqual(4);
    expect(answered.every((x) => x.type.startsWith('text/event-stream'))).toBe(true);

    // The tree is recovering (the fake model holds the root's compaction summary): the
    // plugin has aborted the worker (its ack is in the plugin log), which stays refused
    // until the compaction is done. On a loaded machine the gate can refuse the worker's
    // next request before the abort lands: opencode then holds that turn for its retry
    // (Retry-After), so the turn is either aborted or waiting on the refusal; either way
    // no request of the worker passes.
    const abortAcked = () => {
      const f = join(lab?.logs ?? '', 'plugin.jsonl');
      if (!existsSync(f)) return false;
      const lines = readFileSync(f, 'utf8')
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l) as Record<string, unknown>);
      const ids = new Set(
        lines.filter((l) => l.msg === 'directive' && l.type === 'abort' && l.session === child).map((l) => l.id),
      );
      return lines.some((l) => l.msg === 'ack' && l.type === 'abort' && ids.has(l.id) && l.ok === true);
    };
    await until(
      'the worker aborted',
      async () => {
        if (!abortAcked()) return false;
        const ms = await ocGet<OcMessage[]>(`/session/${child}/message`);
        const busy = await ocGet<Record<string, unknown>>('/session/status');
        const aborted = ms.some((m) => m.info.error?.name === 'MessageAbortedError') && !(child in busy);
        return aborted || seen.some((x) => x.conversation === child && x.status === 429);
      },
      { detail },
    );
    expect(await vigil.gate({ conversation: child, parent: root })).toMatchObject({ action: 'refuse' });

    // "Continue" to the stopped worker, as an orchestrator does: its model request is refused.
    await http('POST', `${lab.url}/session/${child}/prompt_async`, { parts: [{ type: 'text', text: 'continue' }] });
    const refused = await until(
      'a 429 for the worker',
      () => seen.find((x) => x.conversation === child && x.status === 429),
      { detail },
    );
    expect(Number(refused.retryAfter)).toBeGreaterThan(0);
    await http('POST', `${lab.url}/session/${child}/abort`);

    // Another tree goes on meanwhile: every one of its requests passes.
    const other = await http<{ id: string }>('POST', `${lab.url}/session`, { title: 'healthy' });
    const done = await http(
      'POST',
      `${lab.url}/session/${other.data.id}/message`,
      { parts: [{ type: 'text', text: 'HEALTHY: fix add()' }] },
      240_000,
    );
    expect(done.status).toBe(200);
    const otherCalls = seen.filter((x) => x.conversation === other.data.id);
    expect(otherCalls.length).toBeGreaterThanOrEqual(4);
    expect(otherCalls.every((x) => x.status === 200)).toBe(true);
    expect(await vigil.gate({ conversation: child, parent: root })).toMatchObject({ action: 'refuse' });
    const healthy = await until(
      'the other tree judged',
      async () => {
        const x = await row(other.data.id);
        return x && x.calls >= 3 ? x : undefined;
      },
      { detail },
    );
    expect(healthy).toMatchObject({ verdict: 'ok', refused: false, models: ['loop-model'] });
    expect(healthy.landed).toBeGreaterThanOrEqual(1);

    // Let the compaction finish: the refusal lifts and the root resumes to its end.
    writeFileSync(hold, '');
    await until(
      'the root to resume and finish after its compaction',
      async () => {
        const ms = await ocGet<OcMessage[]>(`/session/${root}/message`);
        const last = ms.at(-1);
        return (
          last?.info.role === 'assistant' &&
          Boolean(last.info.time.completed) &&
          last.parts.some((p) => p.text?.startsWith('Recovered'))
        );
      },
      { timeoutMs: 120_000, detail },
    );
    let last = '';
    await until(
      'the refusal lifted',
      async () => {
        const a = await vigil.gate({ conversation: child, parent: root });
        last = JSON.stringify({ gate: a, tree: await vigil.engine.treeState(root) });
        return a.action === 'allow';
      },
      { detail: () => `${detail()}\n--- last ---\n${last}` },
    );
  }, 300_000);
});
