import { describe, expect, it } from 'vitest';
import { runReplay } from '../detectors/no-progress/replay/replay.ts';
import { geminiReader } from '../sensors/gemini/replay.ts';
import { resumeTree, rowOf, serviceFor } from './helpers/agent-e2e.ts';
import { GEMINI_VERSION, type GeminiLab, geminiLab, needsGemini } from './helpers/gemini.ts';

// The Gemini CLI sensor end to end: the real `gemini -p` (0.61.0) driven by the scripted
// fake Gemini API, Vigil's hooks installed by `vigil install gemini` into an isolated
// HOME, an in-process Vigil service as the judge.

const HAVE = needsGemini(import.meta.filename);

const READ = (f = 'src/app.js') => ({ tool: 'read_file', args: { file_path: `{{workdir}}/${f}` } });
const SH = (command: string) => ({ tool: 'run_shell_command', args: { command, description: 'run it' } });
const HEALTHY = [
  READ('src/util.js'),
  {
    tool: 'replace',
    args: {
      file_path: '{{workdir}}/src/app.js',
      instruction: 'fix add',
      old_string: 'return a - b;',
      new_string: 'return a + b;',
    },
  },
  SH('sh ok.sh'),
  { text: 'Fixed add() and the check passes.' },
];

const vigilDenials = (lab: GeminiLab) =>
  lab.results().filter((t) => t.status === 'error' && String(t.error?.message ?? t.output ?? '').includes('Vigil:'));
/** `vigil replay` over the lab's chat files: the verdict per session. */
const replayed = async (lab: GeminiLab) =>
  new Map(
    (await runReplay(`${lab.home}/.gemini/tmp`, { readers: [geminiReader] })).sessions.map((x) => [x.session, x]),
  );

describe.runIf(HAVE)(`Gemini CLI ${GEMINI_VERSION} through the sensor contract`, () => {
  describe('warn', () => {
    const s = serviceFor('warn');

    it('one file read 40 times is flagged; warn lets it finish', async () => {
      const lab = await geminiLab({
        vigilUrl: s.url,
        script: { steps: [{ ...READ(), repeat: 40 }, { text: 'done' }] },
      });
      try {
        const r = await lab.run('read it');
        expect(r.exit, r.stderr.slice(-500)).toBe(0);
        expect(vigilDenials(lab)).toEqual([]);
        const sid = r.sessionId as string;
        const row = await rowOf(s.vigil, sid);
        expect(row.verdict).toBe('looping');
        expect(row.top_target).toBe('read src/app.js');
        expect(row.sensor).toBe('gemini');
        expect(row.cannot_act).toBe('toast none');
        // vigil replay over the chat file gives the live verdict
        expect((await replayed(lab)).get(sid)?.verdict).toBe('looping');
      } finally {
        await lab.stop();
      }
    }, 300_000);

    it('a failing `sh check.sh` alternated with one read is flagged', async () => {
      const steps = [...Array.from({ length: 10 }, () => [SH('sh check.sh'), READ()]).flat(), { text: 'done' }];
      const lab = await geminiLab({ vigilUrl: s.url, script: { steps } });
      try {
        const r = await lab.run('check it');
        expect(r.exit).toBe(0);
        const row = await rowOf(s.vigil, r.sessionId as string);
        expect(row.verdict).toBe('looping');
        expect(row.reason).toMatch(/sh check\.sh|read src\/app\.js/);
        expect((await replayed(lab)).get(r.sessionId as string)?.verdict).toBe('looping');
      } finally {
        await lab.stop();
      }
    }, 300_000);

    it("a subagent's loop is the child's (the calls inside its invoke_agent), its incident the parent's tree", async () => {
      const lab = await geminiLab({
        vigilUrl: s.url,
        script: {
          steps: [
            { tool: 'invoke_agent', args: { agent_name: 'generalist', prompt: 'SUBAGENT: read src/app.js' } },
            { text: 'The subagent reported back.' },
          ],
          scripts: [
            {
              match: '^SUBAGENT',
              steps: [
                { ...READ(), repeat: 40 },
                { tool: 'complete_task', args: { result: { response: 'add() subtracts.' } } },
              ],
            },
          ],
        },
      });
      try {
        const r = await lab.run('delegate');
        expect(r.exit).toBe(0);
        const sid = r.sessionId as string;
        const rows = (await s.vigil.engine.sessionRows()).filter((x) => x.root === sid);
        const child = rows.find((x) => x.session !== sid);
        expect(child, JSON.stringify(rows)).toBeDefined();
        expect(child?.session).toBe(`${sid}.generalist-1`);
        expect(child?.parent).toBe(sid);
        expect(child?.verdict).toBe('looping');
        expect(rows.find((x) => x.session === sid)?.top_target ?? null).not.toBe('read src/app.js');
      } finally {
        await lab.stop();
      }
    }, 300_000);

    it('a healthy script (distinct reads, an edit that lands, a passing check) triggers nothing', async () => {
      const lab = await geminiLab({
        vigilUrl: s.url,
        script: { steps: [READ('src/app.js'), READ('check.sh'), ...HEALTHY] },
      });
      try {
        const r = await lab.run('fix it');
        expect(r.exit).toBe(0);
        const row = await rowOf(s.vigil, r.sessionId as string);
        expect(row.verdict).toBe('ok');
        expect(row.landed).toBeGreaterThanOrEqual(1);
        expect(vigilDenials(lab)).toEqual([]);
        expect((await replayed(lab)).get(r.sessionId as string)?.verdict).toBe('ok');
      } finally {
        await lab.stop();
      }
    }, 300_000);

    it("Gemini's own loop detection on: its nudge and its stop are reported, the calls it refused are not counted", async () => {
      const lab = await geminiLab({
        vigilUrl: s.url,
        loopDetection: true,
        script: { steps: [{ ...READ(), repeat: 12 }, { text: 'done' }] },
      });
      try {
        const r = await lab.run('read it');
        expect(r.exit).toBe(0);
        const sid = r.sessionId as string;
        // Gemini let 4 identical calls run, refused the 5th (a nudge) and the 6th (the stop)
        expect(r.stream.some((l) => l.type === 'error' && /Loop detected/.test(String(l.message)))).toBe(true);
        const ran = lab.results().filter((t) => t.status === 'success').length;
        expect(ran).toBe(4);
        const row = (await rowOf(s.vigil, sid)) as Record<string, unknown>;
        expect(row.calls).toBe(ran);
        expect(row).toMatchObject({ agent_loop_nudges: 1, agent_loop_stopped: true });
      } finally {
        await lab.stop();
      }
    }, 300_000);

    it('Vigil stopped: the looping script runs to its end (fail open)', async () => {
      const lab = await geminiLab({
        vigilUrl: 'http://127.0.0.1:9',
        script: { steps: [{ ...READ(), repeat: 12 }, { text: 'done' }] },
      });
      try {
        const r = await lab.run('read it');
        expect(r.exit).toBe(0);
        expect(lab.results().filter((t) => t.status === 'success').length).toBe(12);
      } finally {
        await lab.stop();
      }
    }, 300_000);
  });

  describe('auto_recover', () => {
    const s = serviceFor('auto_recover');

    it('denies the next call with the report, nudges a renewed loop at AfterAgent, then stops the run (continue: false); Resume lets it go on', async () => {
      const steps = [
        // flagged at the 4th same-result read: the 5th call is denied (stage 1); the renewed
        // loop is flagged at its 4th read as the turn ends: the AfterAgent nudge (stage 2);
        // flagged again after the nudge: the run is stopped (stage 3) before the reads end.
        // A resumed run plays what is left: a read or two, then healthy work.
        { ...READ(), repeat: 5 },
        { ...READ(), repeat: 4 },
        { text: 'I think I am done.' },
        { ...READ(), repeat: 6 },
        ...HEALTHY,
      ];
      const lab = await geminiLab({ vigilUrl: s.url, script: { steps } });
      try {
        const r = await lab.run('read it');
        expect(r.exit).toBe(0);
        const sid = r.sessionId as string;
        const denials = vigilDenials(lab);
        expect(denials.length, JSON.stringify(lab.results().slice(-3))).toBeGreaterThanOrEqual(1);
        expect(JSON.stringify(denials[0])).toContain('Vigil: this loop was stopped');
        // stage 2: the nudge reached the model as a new user text
        const nudged = r.stream.some(
          (l) =>
            l.type === 'error' && String(l.message).includes('Agent execution blocked: Vigil: this loop was stopped'),
        );
        expect(nudged, JSON.stringify(r.stream.filter((l) => l.type === 'error'))).toBe(true);
        // stage 3: the run stopped by the hook, nothing healthy ran
        expect((await s.vigil.engine.treeState(sid))?.stage).toBe(3);
        expect(lab.results().some((t) => t.error?.type === 'stop_execution')).toBe(true);
        expect((await rowOf(s.vigil, sid)).landed).toBe(0);

        // Going on without a Resume (the same session, resumed): no call runs.
        const ran = () => lab.results().filter((t) => t.status === 'success').length;
        const before = ran();
        const held = await lab.run('go on', { resume: 'latest' });
        expect(held.exit).toBe(0);
        expect(held.sessionId).toBe(sid);
        expect(ran()).toBe(before);
        expect((await s.vigil.engine.treeState(sid))?.stage).toBe(3);

        // An admin Resume: the next run's calls run, the edit lands, nothing is refused.
        expect(await resumeTree(s, sid)).toBe(200);
        expect((await s.vigil.engine.treeState(sid))?.stage).toBe(0);
        const n = lab.results().length;
        const on = await lab.run('go on', { resume: 'latest' });
        expect(on.exit, on.stderr.slice(-500)).toBe(0);
        const after = lab.results().slice(n);
        expect(after.filter((t) => t.status === 'success').length, JSON.stringify(after)).toBeGreaterThanOrEqual(3);
        expect(after.filter((t) => t.status === 'error')).toEqual([]);
        expect((await rowOf(s.vigil, sid)).landed).toBeGreaterThanOrEqual(1);
        expect((await s.vigil.engine.treeState(sid))?.stage).toBe(0);
      } finally {
        await lab.stop();
      }
    }, 400_000);
  });
});
