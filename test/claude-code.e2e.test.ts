import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { sensors } from '../builtins.ts';
import type { Vigil } from '../core/vigil.ts';
import { runReplay } from '../detectors/no-progress/replay/replay.ts';
import { loadClaudeTranscripts } from '../sensors/claude-code/transcripts.ts';
import { identityOf } from '../service/router.ts';
import { agentService, resumeTree, rowOf, serviceFor } from './helpers/agent-e2e.ts';
import { CC_VERSION, type ClaudeLab, claudeLab, needsClaudeCode } from './helpers/claude-code.ts';

// The Claude Code sensor end to end: the real `claude -p` (2.1.328) driven by the
// scripted fake Anthropic API, Vigil's hooks installed by `vigil install claude-code`
// into an isolated HOME, an in-process Vigil service as the judge. Each test is one
// lab (project, HOME, fake API) and one scripted conversation.

const HAVE = needsClaudeCode(import.meta.filename);

const READ = (f = 'src/app.js') => ({ tool: 'Read', input: { file_path: `{{cwd}}/${f}` } });
const BASH = (command: string) => ({ tool: 'Bash', input: { command, description: 'run it' } });
const HEALTHY = [
  READ('src/util.js'),
  {
    tool: 'Edit',
    input: { file_path: '{{cwd}}/src/app.js', old_string: 'return a - b;', new_string: 'return a + b;' },
  },
  BASH('sh ok.sh'),
  { text: 'Fixed add() and the check passes.' },
];

const vigilDenials = (lab: ClaudeLab) => lab.toolResults().filter((t) => t.is_error && t.text.includes('Vigil:'));
/** The gate identity of a model request Claude Code sent (its real headers, from the fake API's log). */
const gateIdentity = (q: Record<string, any>) => identityOf({ headers: q.headers, body: {} } as never, sensors);
/**
 * `vigil replay` over the transcripts the run left in HOME gives every session the
 * verdict the live run gave it (the live Sessions readout), by the same mapping.
 */
async function expectReplayAgrees(lab: ClaudeLab, v: Vigil, root: string): Promise<void> {
  const r = await runReplay(loadClaudeTranscripts(join(lab.home, '.claude', 'projects')));
  const replayed = Object.fromEntries(r.sessions.map((x) => [x.session, x.verdict]));
  const live = Object.fromEntries(
    (await v.engine.sessionRows()).filter((x) => x.root === root).map((x) => [x.session, x.verdict]),
  );
  expect(Object.keys(replayed).length).toBeGreaterThan(0);
  expect(replayed).toEqual(live);
}

describe.runIf(HAVE)(`Claude Code ${CC_VERSION} through the sensor contract`, () => {
  describe('warn', () => {
    const s = serviceFor('warn');

    it('one file read 40 times is flagged; warn only warns, so the script runs to its end', async () => {
      const lab = await claudeLab({
        vigilUrl: s.url,
        script: { steps: [{ ...READ(), repeat: 40 }, { text: 'done' }] },
      });
      try {
        const r = await lab.run('read it');
        expect(r.result?.subtype, r.stderr).toBe('success');
        expect(vigilDenials(lab)).toEqual([]);
        const sid = r.sessionId as string;
        const row = await rowOf(s.vigil, sid);
        expect(row.verdict).toBe('looping');
        expect(row.top_target).toBe('read src/app.js');
        expect(row.sensor).toBe('claude-code');
        // warn asks for toasts: this agent has no window for them, and the readout says so
        expect(row.cannot_act).toBe('toast none');
        expect((await s.vigil.notifier.openAlerts()).some((a) => a.dedup_key.includes(sid))).toBe(true);
        await expectReplayAgrees(lab, s.vigil, sid);
      } finally {
        await lab.stop();
      }
    }, 240_000);

    it('a failing `sh check.sh` alternated with one read is flagged', async () => {
      const steps = [...Array.from({ length: 10 }, () => [BASH('sh check.sh'), READ()]).flat(), { text: 'done' }];
      const lab = await claudeLab({ vigilUrl: s.url, script: { steps } });
      try {
        const r = await lab.run('check it');
        expect(r.result?.subtype, r.stderr).toBe('success');
        const row = await rowOf(s.vigil, r.sessionId as string);
        expect(row.verdict).toBe('looping');
        expect(row.reason).toMatch(/sh check\.sh|read src\/app\.js/);
        await expectReplayAgrees(lab, s.vigil, r.sessionId as string);
      } finally {
        await lab.stop();
      }
    }, 240_000);

    it("a subagent's loop is the child's, and its incident is its parent's tree", async () => {
      const lab = await claudeLab({
        vigilUrl: s.url,
        script: {
          steps: [
            {
              tool: 'Task',
              input: {
                description: 'look around',
                prompt: 'SUBAGENT: read src/app.js',
                subagent_type: 'general-purpose',
                run_in_background: false,
              },
            },
            { text: 'the subagent is done' },
          ],
          scripts: [{ match: 'SUBAGENT:', steps: [{ ...READ(), repeat: 12 }, { text: 'child done' }] }],
        },
      });
      try {
        const r = await lab.run('delegate');
        expect(r.result?.subtype, r.stderr).toBe('success');
        const sid = r.sessionId as string;
        const rows = (await s.vigil.engine.sessionRows()).filter((x) => x.root === sid);
        const child = rows.find((x) => x.session !== sid);
        expect(child, JSON.stringify(rows)).toBeDefined();
        expect(child?.session).toMatch(new RegExp(`^${sid}\\.[0-9a-f]+$`));
        expect(child?.parent).toBe(sid);
        expect(child?.agent).toBe('general-purpose');
        expect(child?.verdict).toBe('looping');
        // a router in front would see the same child: its requests carry the agent id header
        const ids = lab.requests().map(gateIdentity);
        expect(ids).toContainEqual({ conversation: child?.session, parent: sid });
        expect(ids).toContainEqual({ conversation: sid });
        // the parent's own calls were one Task: it is not the one looping
        expect(rows.find((x) => x.session === sid)?.top_target ?? null).not.toBe('read src/app.js');
        // the incident is the tree's (keyed by its root), and names the child
        const inc = (await s.vigil.notifier.openAlerts()).find((a) => a.dedup_key.startsWith(sid));
        expect(inc?.title).toContain(child?.session as string);
        await expectReplayAgrees(lab, s.vigil, sid);
      } finally {
        await lab.stop();
      }
    }, 240_000);

    it('a healthy script (distinct reads, an edit that lands, a passing check) triggers nothing', async () => {
      const lab = await claudeLab({
        vigilUrl: s.url,
        script: { steps: [READ('src/app.js'), READ('check.sh'), ...HEALTHY] },
      });
      try {
        const r = await lab.run('fix it');
        expect(r.result?.subtype, r.stderr).toBe('success');
        const row = await rowOf(s.vigil, r.sessionId as string);
        expect(row.verdict).toBe('ok');
        expect(row.landed).toBeGreaterThanOrEqual(1);
        expect(vigilDenials(lab)).toEqual([]);
        expect((await s.vigil.notifier.openAlerts()).some((a) => a.dedup_key.includes(r.sessionId as string))).toBe(
          false,
        );
        await expectReplayAgrees(lab, s.vigil, r.sessionId as string);
      } finally {
        await lab.stop();
      }
    }, 240_000);
  });

  it('with Vigil stopped the same looping script runs to completion: the hooks have no opinion', async () => {
    // a port that was just free: nothing listens there
    const dead = await agentService('auto_recover');
    await dead.close();
    const lab = await claudeLab({
      vigilUrl: dead.url,
      script: { steps: [{ ...READ(), repeat: 40 }, { text: 'done' }] },
    });
    try {
      const r = await lab.run('read it');
      expect(r.result?.subtype, r.stderr).toBe('success');
      expect(r.result?.terminal_reason).not.toBe('hook_stopped');
      const results = lab.toolResults();
      expect(results.length).toBe(40);
      expect(results.filter((t) => t.is_error)).toEqual([]);
    } finally {
      await lab.stop();
    }
  }, 240_000);

  describe('auto_recover', () => {
    const s = serviceFor('auto_recover');

    it('denies the next call with the report, nudges a renewed loop at Stop, then hard-stops; Resume lets it go on', async () => {
      // loop (stage 1: the next call is denied), loop again ending its turn (stage 2: the
      // Stop hook's nudge), loop a third time (the hard stop: the next call is denied and
      // the run ends there), then healthy work.
      const steps = [
        { ...READ(), repeat: 5 },
        { ...READ(), repeat: 4 },
        { text: 'I think I am done.' },
        { ...READ(), repeat: 4 },
        READ('src/util.js'),
        ...HEALTHY,
      ];
      const lab = await claudeLab({ vigilUrl: s.url, script: { steps } });
      try {
        const r = await lab.run('read it');
        const sid = r.sessionId as string;
        const denials = vigilDenials(lab);
        // stage 1: the report reached the model as the denied call's error
        expect(denials.length, JSON.stringify(lab.toolResults())).toBeGreaterThanOrEqual(1);
        expect(denials[0].text).toContain('PreToolUse:Read hook error: Vigil: this loop was stopped');
        expect(denials[0].text).toContain('read src/app.js');
        // stage 2: the nudge, a Stop-hook block with the report, reached the model as a user text
        const nudged = lab
          .requests()
          .some((q) => JSON.stringify(q.tail ?? []).includes('Stop hook feedback:\\nVigil: this loop was stopped'));
        expect(nudged).toBe(true);
        // stage 3: the run ended by the hook, the tree stopped
        expect(r.result?.terminal_reason, JSON.stringify(r.result)).toBe('hook_stopped');
        expect(r.exit).toBe(0);
        const root = await s.vigil.engine.treeState(sid);
        expect(root?.stage).toBe(3);
        expect((await rowOf(s.vigil, sid)).refused).toBe(true);
        // the hard stop is critical
        const inc = (await s.vigil.notifier.openAlerts()).find((a) => a.dedup_key === `${sid}:recovery`);
        expect(inc?.severity).toBe('critical');

        // A router in front scopes its refusal to this conversation, by Claude Code's own header.
        const q = gateIdentity(lab.requests()[0]);
        expect(q?.conversation).toBe(sid);
        expect((await s.vigil.gate(q as never)).action).toBe('refuse');
        expect((await s.vigil.gate({ conversation: 'another-conversation' })).action).toBe('allow');

        // Going on without a Resume: the prompt is refused before any model request.
        const before = lab.requests().length;
        const held = await lab.run('go on', { resume: sid });
        expect(held.exit).toBe(0);
        expect(lab.requests().length).toBe(before);

        // Resume: the next run goes on and its calls run.
        expect(await resumeTree(s, sid)).toBe(200);
        const n = lab.toolResults().length;
        const on = await lab.run('go on', { resume: sid });
        expect(on.result?.subtype, on.stderr).toBe('success');
        expect(on.result?.terminal_reason).not.toBe('hook_stopped');
        const after = lab.toolResults().slice(n);
        expect(after.length).toBeGreaterThanOrEqual(2);
        expect(
          after.filter((t) => t.is_error),
          JSON.stringify(after),
        ).toEqual([]);
        expect((await s.vigil.engine.treeState(sid))?.stage).toBe(0);
        expect((await s.vigil.gate(q as never)).action).toBe('allow');
      } finally {
        await lab.stop();
      }
    }, 300_000);
  });
});
