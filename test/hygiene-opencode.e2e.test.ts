import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort, http, type Proc, startProc, stopProc, until } from './fixtures/opencode-e2e/procs.ts';
import { cleanEnv, needsOpencode, type OpencodeLab, startOpencode } from './helpers/opencode.ts';

const HAVE_OPENCODE = needsOpencode(import.meta.filename);

// Session hygiene against the real opencode-ai 1.18.33 with the installed plugin and
// `vigil serve` (acting mode, small first_token_timeout and tick). A scripted model
// answers a session's first question, then stops answering after the resume: the
// plugin reports the resume (`prompt` with resume: true) and, while no first token
// comes, `session_stats` readings whose newest model-side output predates the resume;
// the service's tick finds the restore stall and the plugin aborts the session. With a
// model that answers after the resume, nothing fires.

const FIRST_TOKEN_TIMEOUT = 5_000;
const TICK = 1_000;
const SCRIPT = {
  title: 'Vigil hygiene e2e',
  summary: 'Summary.',
  endText: 'Script finished.',
  steps: [{ text: 'Nothing scripted for this prompt.' }],
  scripts: [
    {
      match: '^STALL-AFTER-RESUME',
      steps: [{ text: 'First answer.' }, { text: 'This never arrives.', delayMs: 600_000 }],
    },
    { match: '^RESUME-OK', steps: [{ text: 'First answer.' }, { text: 'Second answer.' }] },
  ],
};
const CONFIG = `store:
  backend: memory
modes:
  mode: auto_recover
detection:
  tick_interval: ${TICK}
hygiene:
  first_token_timeout: ${FIRST_TOKEN_TIMEOUT}
notifications:
  channels: []
`;

let lab: OpencodeLab | undefined;
let vigil: Proc | undefined;
let vigilUrl = '';
let ocUrl = '';
let logs = '';

interface OcMessage {
  info: { id: string; role: string; error?: { name: string }; time: { created: number; completed?: number } };
  parts: { type: string; text?: string }[];
}
interface Row {
  session: string;
  verdict: string;
  hygiene_level?: string;
  hygiene_rule?: string | null;
  messages?: number | null;
}

const tail = (p: Proc | undefined) => (p ? `--- ${p.name} ---\n${p.output().slice(-3000)}` : '');
const pluginLog = () => {
  const f = join(logs, 'plugin.jsonl');
  return existsSync(f) ? `--- plugin log ---\n${readFileSync(f, 'utf8').slice(-4000)}` : '';
};
const detail = () => [tail(vigil), lab?.detail() ?? '', pluginLog()].join('\n');
const row = async (id: string) =>
  (await http<Row[]>('GET', `${vigilUrl}/sessions`)).data.find((r: Row) => r.session === id);
const messages = async (id: string) => (await http<OcMessage[]>('GET', `${ocUrl}/session/${id}/message`)).data;

async function session(title: string, first: string): Promise<string> {
  const s = await http<{ id: string }>('POST', `${ocUrl}/session`, { title });
  expect(s.status).toBe(200);
  const r = await http(
    'POST',
    `${ocUrl}/session/${s.data.id}/message`,
    { parts: [{ type: 'text', text: first }] },
    120_000,
  );
  expect(r.status, detail()).toBe(200);
  return s.data.id;
}

beforeAll(async () => {
  lab = await startOpencode({
    script: SCRIPT,
    async beforeStart(dirs) {
      logs = dirs.logs;
      execFileSync(
        process.execPath,
        ['sensors/opencode/plugin/install.mjs', '--dest', join(dirs.xdg, 'config', 'opencode', 'plugin')],
        {
          cwd: join(import.meta.dirname, '..'),
          encoding: 'utf8',
        },
      );
      const port = await freePort();
      vigilUrl = `http://127.0.0.1:${port}`;
      const file = join(dirs.tmp, 'vigil.yaml');
      writeFileSync(file, CONFIG);
      vigil = startProc(
        'vigil',
        process.execPath,
        ['bin/vigil.mjs', 'serve', '--port', String(port), '--config', file],
        {
          cwd: join(import.meta.dirname, '..'),
          env: cleanEnv(),
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
    env: (dirs) => ({
      VIGIL_URL: vigilUrl,
      VIGIL_POLL_MS: '500',
      VIGIL_STATS_MS: '1000',
      VIGIL_PLUGIN_LOG: join(dirs.logs, 'plugin.jsonl'),
    }),
  });
  ocUrl = lab.url;
}, 180_000);

afterAll(async () => {
  if (vigil) await stopProc(vigil);
  await lab?.stop();
}, 60_000);

describe.runIf(HAVE_OPENCODE)('session hygiene against opencode 1.18.33', () => {
  it('a resumed session whose model answers raises nothing', async () => {
    const id = await session('resume-ok', 'RESUME-OK: first question');
    const r = await http(
      'POST',
      `${ocUrl}/session/${id}/message`,
      { parts: [{ type: 'text', text: 'a second question' }] },
      120_000,
    );
    expect(r.status).toBe(200);
    expect((await messages(id)).at(-1)?.parts.some((p) => p.text === 'Second answer.')).toBe(true);
    // both turns reached the judge (the second as a resume), and the watch ended with the answer
    const panel = await until(
      'both turns judged and the resume watch over',
      async () => {
        const panels = (await http<any[]>('GET', `${vigilUrl}/panels`)).data;
        const rows = panels.find((p) => p.detector === 'session-hygiene' && /watch number/.test(p.title))?.rows ?? [];
        const mine = rows.find((x: { session: string }) => x.session === id);
        return mine && mine.turns === 2 && mine.resume_pending === false ? mine : undefined;
      },
      { timeoutMs: 30_000, detail },
    );
    expect(panel).toMatchObject({ level: 'ok', rule: null, model: 'fake/loop-model' });
    const report = (await http<string>('GET', `${vigilUrl}/sessions/${id}/report`)).data;
    expect(report).toContain('Resumes in the last 24h: 1');
    const ok = await row(id);
    expect(ok).toMatchObject({ verdict: 'ok', hygiene_level: 'ok' });
  }, 180_000);

  it('a model that stops answering after a resume: restore stall within first_token_timeout plus a tick, session aborted', async () => {
    const id = await session('stall', 'STALL-AFTER-RESUME: first question');
    const before = await messages(id);
    expect(before.at(-1)?.info.role).toBe('assistant');
    const pa = await http('POST', `${ocUrl}/session/${id}/prompt_async`, { parts: [{ type: 'text', text: 'again' }] });
    expect(pa.status).toBe(204);

    const stalled = await until(
      'the restore stall',
      async () => {
        const x = await row(id);
        return x?.hygiene_rule === 'restore_stall' ? x : undefined;
      },
      { timeoutMs: 60_000, detail },
    );
    expect(stalled).toMatchObject({ verdict: 'looping', hygiene_level: 'critical' });
    // the times the service recorded: the resume (the user message's creation) and the finding
    const report = (await http<string>('GET', `${vigilUrl}/sessions/${id}/report`)).data;
    const since = Date.parse(/critical +restore_stall since (\S+):/.exec(report)?.[1] ?? '');
    const resumeAt = Date.parse(/Resume pending since (\S+),/.exec(report)?.[1] ?? '');
    const resumeMsg = (await messages(id)).find((m) => m.info.role === 'user' && m.info.time.created === resumeAt);
    expect(resumeMsg, 'the resume time is the user message creation time').toBeDefined();
    const latency = since - resumeAt;
    console.log(`restore stall detected ${latency} ms after the resume (timeout ${FIRST_TOKEN_TIMEOUT}, tick ${TICK})`);
    expect(latency).toBeGreaterThanOrEqual(FIRST_TOKEN_TIMEOUT);
    // at the first tick past the timeout (timer scheduling on a busy machine allowed for)
    expect(latency).toBeLessThan(FIRST_TOKEN_TIMEOUT + TICK + 2_000);
    expect(report).toMatch(/stalled on restore: resumed \d+s ago, no first token/);

    // acting mode: the plugin aborted the stalled turn
    const aborted = await until(
      'the stalled turn aborted',
      async () => {
        const ms = await messages(id);
        const last = ms.at(-1);
        return last?.info.role === 'assistant' && last.info.error?.name === 'MessageAbortedError' ? ms : undefined;
      },
      { timeoutMs: 60_000, detail },
    );
    expect(aborted.length).toBe(before.length + 2);
    // abort and fresh carried out and acknowledged (the fresh one shows the brief in a toast)
    await until(
      'the directives acknowledged',
      async () => {
        const t = (await http<{ directives: { type: string }[] }>('GET', `${vigilUrl}/trees/${id}`)).data;
        return t.directives.length === 0 ? t : undefined;
      },
      { timeoutMs: 30_000, detail },
    );
    const log = readFileSync(join(logs, 'plugin.jsonl'), 'utf8');
    expect(log).toMatch(/"type":"abort".*"outcome":"done"/);
    expect(log).toMatch(/"type":"fresh".*"outcome":"done"/);
  }, 180_000);
});
