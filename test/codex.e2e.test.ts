import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { runReplay } from '../detectors/no-progress/replay/replay.ts';
import { codexInstaller } from '../sensors/codex/installer.ts';
import { codexReader } from '../sensors/codex/replay.ts';
import { HOOK_STATE_DIR, resumeTree, rowOf, serviceFor } from './helpers/agent-e2e.ts';
import { CODEX_VERSION, type CodexLab, codexLab, needsCodex } from './helpers/codex.ts';

// The Codex sensor end to end: the real `codex exec` (0.169.0) driven by the scripted
// fake Responses API, Vigil's hooks installed by `vigil install codex` into an isolated
// CODEX_HOME (trusted through config.toml, no bypass flag), an in-process Vigil service
// as the judge. Each test is one lab (project, CODEX_HOME, fake API) and one script.

const HAVE = needsCodex(import.meta.filename);

const READ = (f = 'src/app.js') => ({ exec: `cat ${f}` });
const PATCH = {
  patch:
    '*** Begin Patch\n*** Update File: src/app.js\n@@\n export function add(a, b) {\n-  return a - b;\n+  return a + b;\n }\n*** End Patch\n',
};
const HEALTHY = [READ('src/util.js'), PATCH, { exec: 'sh ok.sh' }, { text: 'Fixed add() and the check passes.' }];

const vigilDenials = (lab: CodexLab) =>
  lab.outputs().filter((t) => t.text.startsWith('Command blocked by PreToolUse hook: Vigil:'));
/** `vigil replay` over the lab's CODEX_HOME/sessions: the verdict per session. */
const replayed = async (lab: CodexLab) =>
  new Map(
    (await runReplay(`${lab.codexHome}/sessions`, { readers: [codexReader] })).sessions.map((x) => [x.session, x]),
  );

describe.runIf(HAVE)(`Codex CLI ${CODEX_VERSION} through the sensor contract`, () => {
  describe('warn', () => {
    const s = serviceFor('warn');

    it('the installed hooks run without the bypass flag: one file read 40 times is flagged, warn lets it finish', async () => {
      const lab = await codexLab({ vigilUrl: s.url, script: { steps: [{ ...READ(), repeat: 40 }, { text: 'done' }] } });
      try {
        const st = await codexInstaller.status?.({}, { env: { CODEX_HOME: lab.codexHome }, home: lab.home });
        expect(st?.wired).toBe(true);
        expect(st?.problem).toBeUndefined();
        const r = await lab.run('read it');
        expect(r.exit, r.stderr).toBe(0);
        expect(vigilDenials(lab)).toEqual([]);
        const sid = r.threadId as string;
        const row = await rowOf(s.vigil, sid);
        expect(row.verdict).toBe('looping');
        expect(row.top_target).toBe('bash src/app.js');
        expect(row.sensor).toBe('codex');
        expect(row.cannot_act).toBe('toast none');
        expect((await s.vigil.notifier.openAlerts()).some((a) => a.dedup_key.includes(sid))).toBe(true);
        // vigil replay over the rollout gives the live verdict
        expect((await replayed(lab)).get(sid)?.verdict).toBe('looping');
      } finally {
        await lab.stop();
      }
    }, 240_000);

    it('a failing `sh check.sh` alternated with one read is flagged; the exit code comes from the rollout', async () => {
      const steps = [...Array.from({ length: 10 }, () => [{ exec: 'sh check.sh' }, READ()]).flat(), { text: 'done' }];
      const lab = await codexLab({ vigilUrl: s.url, script: { steps } });
      try {
        const r = await lab.run('check it');
        expect(r.exit, r.stderr).toBe(0);
        const row = await rowOf(s.vigil, r.threadId as string);
        expect(row.verdict).toBe('looping');
        expect(row.reason).toMatch(/sh check\.sh|bash src\/app\.js/);
        // the check's failures were seen as failures (exit 1) by the landed rules
        const state = JSON.parse(
          readFileSync(
            join(HOOK_STATE_DIR, 'codex', `${(r.threadId as string).replace(/[^A-Za-z0-9_-]/g, '_')}.json`),
            'utf8',
          ),
        );
        expect(state.trackers[r.threadId as string].failing.length).toBe(1);
        expect((await replayed(lab)).get(r.threadId as string)?.verdict).toBe('looping');
      } finally {
        await lab.stop();
      }
    }, 240_000);

    it("a subagent's loop is the child's (its own thread), and its incident is its parent's tree", async () => {
      const lab = await codexLab({
        vigilUrl: s.url,
        model: 'fake-model',
        script: {
          steps: [
            { tool: 'spawn_agent', args: { message: 'SUBAGENT: read src/app.js and report' } },
            { tool: 'wait_agent', args: { targets: ['{{agent_id}}'], timeout_ms: 60000 } },
            { text: 'the subagent is done' },
          ],
          scripts: [{ match: '^SUBAGENT', steps: [{ ...READ(), repeat: 40 }, { text: 'child done' }] }],
        },
      });
      try {
        const r = await lab.run('delegate');
        expect(r.exit, r.stderr).toBe(0);
        const sid = r.threadId as string;
        const rows = (await s.vigil.engine.sessionRows()).filter((x) => x.root === sid);
        const child = rows.find((x) => x.session !== sid);
        expect(child, JSON.stringify(rows)).toBeDefined();
        // the child is its own thread: the id of its rollout and its thread-id header
        const childRollout = lab.rollouts().find((f) => !f.includes(sid));
        expect(childRollout).toContain(child?.session as string);
        expect(child?.parent).toBe(sid);
        expect(child?.agent).toBe('default');
        expect(child?.verdict).toBe('looping');
        expect(rows.find((x) => x.session === sid)?.top_target ?? null).not.toBe('bash src/app.js');
        const inc = (await s.vigil.notifier.openAlerts()).find((a) => a.dedup_key.startsWith(sid));
        expect(inc?.title).toContain(child?.session as string);
        // the router's view of the same ids: the child's requests name it and its parent
        const childReq = lab.requests().find((q) => q.headers?.['x-codex-parent-thread-id'] === sid);
        expect(childReq?.headers['thread-id']).toBe(child?.session);
        // replayed from the two rollouts: the child loops, under its parent
        const rep = await replayed(lab);
        expect(rep.get(child?.session as string)).toMatchObject({ verdict: 'looping', parent: sid });
      } finally {
        await lab.stop();
      }
    }, 240_000);

    it('a healthy script (distinct reads, a patch that lands, a passing check) triggers nothing', async () => {
      const lab = await codexLab({
        vigilUrl: s.url,
        script: { steps: [READ('src/app.js'), READ('check.sh'), ...HEALTHY] },
      });
      try {
        const r = await lab.run('fix it');
        expect(r.exit, r.stderr).toBe(0);
        const row = await rowOf(s.vigil, r.threadId as string);
        expect(row.verdict).toBe('ok');
        expect(row.landed).toBeGreaterThanOrEqual(1);
        expect(vigilDenials(lab)).toEqual([]);
        expect((await s.vigil.notifier.openAlerts()).some((a) => a.dedup_key.includes(r.threadId as string))).toBe(
          false,
        );
        expect((await replayed(lab)).get(r.threadId as string)?.verdict).toBe('ok');
      } finally {
        await lab.stop();
      }
    }, 240_000);

    it('Vigil stopped: the looping script runs to its end (fail open)', async () => {
      const lab = await codexLab({
        vigilUrl: 'http://127.0.0.1:9',
        script: { steps: [{ ...READ(), repeat: 12 }, { text: 'done' }] },
      });
      try {
        const r = await lab.run('read it');
        expect(r.exit, r.stderr).toBe(0);
        expect(lab.outputs().length).toBe(12);
        expect(vigilDenials(lab)).toEqual([]);
      } finally {
        await lab.stop();
      }
    }, 240_000);
  });

  describe('auto_recover', () => {
    const s = serviceFor('auto_recover');

    it('denies the next call with the report, nudges a renewed loop at Stop, then denies everything; Resume lets it go on', async () => {
      const steps = [
        // flagged at the 8th same-result read: the 9th call is denied (stage 1); the renewed
        // loop is flagged at its 8th read, just before the turn ends: the Stop hook's nudge
        // (stage 2); the loop after the nudge is flagged again: the hard stop (stage 3)
        { ...READ(), repeat: 9 },
        { ...READ(), repeat: 8 },
        { text: 'I think I am done.' },
        { ...READ(), repeat: 10 },
        { text: 'I am blocked.' },
        ...HEALTHY,
      ];
      const lab = await codexLab({ vigilUrl: s.url, script: { steps } });
      try {
        const r = await lab.run('read it');
        expect(r.exit, r.stderr).toBe(0);
        const sid = r.threadId as string;
        const denials = vigilDenials(lab);
        // stage 1: the report reached the model as the blocked call's output
        expect(denials.length, JSON.stringify(lab.outputs())).toBeGreaterThanOrEqual(1);
        expect(denials[0].text).toContain('Vigil: this loop was stopped');
        expect(denials[0].text).toContain('bash src/app.js');
        // stage 2: the nudge, a Stop-hook block with the report, came back as a hook prompt
        const nudged = lab
          .requests()
          .some((q) => /<hook_prompt[^>]*>Vigil: this loop was stopped/.test(JSON.stringify(q.fresh ?? [])));
        expect(nudged).toBe(true);
        // stage 3: the tree stopped; its calls were refused
        expect((await s.vigil.engine.treeState(sid))?.stage).toBe(3);
        expect((await rowOf(s.vigil, sid)).refused).toBe(true);
        expect(denials.some((d) => d.text.includes('Vigil: stopped, waiting for Resume'))).toBe(true);
        const inc = (await s.vigil.notifier.openAlerts()).find((a) => a.dedup_key === `${sid}:recovery`);
        expect(inc?.severity).toBe('critical');

        // Going on without a Resume: the prompt is refused before any model request.
        const before = lab.requests().length;
        const held = await lab.run('go on', { resume: true });
        expect(held.exit).toBe(0);
        expect(lab.requests().length).toBe(before);

        // Resume: the next run goes on and its calls run.
        expect(await resumeTree(s, sid)).toBe(200);
        const n = lab.outputs().length;
        const on = await lab.run('go on', { resume: true });
        expect(on.exit, on.stderr).toBe(0);
        const after = lab.outputs().slice(n);
        expect(after.length).toBeGreaterThanOrEqual(2);
        expect(after.filter((t) => t.text.startsWith('Command blocked'))).toEqual([]);
        expect((await s.vigil.engine.treeState(sid))?.stage).toBe(0);
      } finally {
        await lab.stop();
      }
    }, 300_000);
  });
});
