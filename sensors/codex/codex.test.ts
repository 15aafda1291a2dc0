import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { Directive } from '../../core/wire.ts';
import { newLandedTracker } from '../shared/landed.ts';
import { answer } from './answer.ts';
import { codexInstaller, HOOK_EVENTS, trustEntries, trustedHashes, withoutTrust, withTrust } from './installer.ts';
import { canonicalCall, exitInText, outputBody, readRollout, toolEvent } from './map.ts';

// Shapes as Codex CLI 0.169.0 sends and writes them (docs/codex.md).
const SID = '01a23305-14f7-7470-b868-ffedb5e06a4b';
const CHILD = '01a23306-8fbb-7ec3-8045-3140400f7a22';
const CHECK_OUT =
  'Chunk ID: f23ffe\nWall time: 0.0000 seconds\nProcess exited with code 1\nOriginal token count: 7\nOutput:\nFAIL: add(1, 2) should be 3\n';

const directive = (o: Partial<Directive>): Directive =>
  ({
    id: 'd1',
    root_id: SID,
    session_id: SID,
    type: 'block',
    scope: 'session',
    reason: 'looping',
    created_at: 1,
    ...o,
  }) as Directive;

describe('Codex mapping', () => {
  it('reads the exit code out of the output text and keeps nothing of the text', () => {
    expect(exitInText(CHECK_OUT)).toBe(1);
    expect(exitInText('Exit code: 0\nWall time: 0 seconds\nOutput:\nSuccess.\n')).toBe(0);
    expect(exitInText('FAIL: add(1, 2) should be 3\n')).toBeUndefined();
    expect(outputBody(CHECK_OUT)).toBe('FAIL: add(1, 2) should be 3\n');
    const { event } = toolEvent(
      { ids: { session_id: SID }, name: 'Bash', input: { command: 'sh check.sh' }, call_id: 'c1', output: CHECK_OUT },
      newLandedTracker(),
      1,
    );
    expect(event.exit).toBe(1);
    expect(event.target).toBe('sh check.sh');
    expect(JSON.stringify(event)).not.toContain('FAIL');
  });

  it('the same command from the hook (Bash {command}) and from the rollout (exec_command {cmd}) has one fingerprint', () => {
    const a = toolEvent(
      { ids: { session_id: SID }, name: 'Bash', input: { command: 'cat src/app.js' }, call_id: 'a' },
      newLandedTracker(),
      1,
    );
    const b = toolEvent(
      { ids: { session_id: SID }, name: 'exec_command', input: { cmd: 'cat src/app.js' }, call_id: 'b' },
      newLandedTracker(),
      1,
    );
    expect(a.event.fingerprint).toBe(b.event.fingerprint);
    expect(canonicalCall('apply_patch', { command: '*** Begin Patch' }).tool).toBe('patch');
  });

  it('an apply_patch that changed lines lands; a subagent is its own thread, child of the session', () => {
    const patch =
      '*** Begin Patch\n*** Update File: src/app.js\n@@\n-  return a - b;\n+  return a + b;\n*** End Patch\n';
    const { event } = toolEvent(
      {
        ids: { session_id: SID, agent_id: CHILD, agent_type: 'default' },
        name: 'apply_patch',
        input: { command: patch },
        call_id: 'p',
        output: 'Exit code: 0\nWall time: 0 seconds\nOutput:\nSuccess. Updated the following files:\nM src/app.js\n',
      },
      newLandedTracker(),
      1,
    );
    expect(event).toMatchObject({ tool: 'patch', target: 'src/app.js', landed: true, exit: 0 });
    expect(event).toMatchObject({ session_id: CHILD, parent_session_id: SID, agent: 'default' });
  });

  it('a rollout gives the calls with their exit codes and one model call per token_usage_record', () => {
    const lines = [
      { type: 'session_meta', payload: { id: SID, session_id: SID, cwd: '/w/project' } },
      { type: 'turn_context', payload: { model: 'gpt-5.5' } },
      {
        type: 'response_item',
        payload: { type: 'function_call', name: 'exec_command', arguments: '{"cmd":"sh check.sh"}', call_id: 'c1' },
      },
      {
        type: 'token_usage_record',
        payload: { response_id: 'resp_1', usage: { input_tokens: 100, cached_input_tokens: 40, output_tokens: 10 } },
      },
      { type: 'response_item', payload: { type: 'function_call_output', call_id: 'c1', output: CHECK_OUT } },
      {
        type: 'event_msg',
        payload: { type: 'item_completed', item: { type: 'CommandExecution', id: 'c1', exit_code: 1 } },
      },
      {
        type: 'response_item',
        payload: { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'Done.' }] },
      },
      {
        type: 'token_usage_record',
        payload: { response_id: 'resp_2', usage: { input_tokens: 120, output_tokens: 5 } },
      },
    ].map((l) => JSON.stringify({ timestamp: '2026-12-01T19:11:41.261Z', ...l }));
    const r = readRollout(`cut line\n${lines.join('\n')}\n`, undefined, 0);
    expect(r.thread).toBe(SID);
    expect(r.calls).toMatchObject([{ call_id: 'c1', exit: 1 }]);
    expect(
      r.models.map((m) => [m.call_id, m.input_tokens, m.cache_read_tokens, m.finish, !!m.text_fingerprint]),
    ).toEqual([
      ['resp_1', 60, 40, 'tool_calls', false],
      ['resp_2', 120, 0, 'stop', true],
    ]);
    expect(r.models[0].model).toBe('openai/gpt-5.5');
  });
});

describe('Codex answers', () => {
  it('a stopped tree denies PreToolUse without continue:false (Codex runs the tool when it gets one)', () => {
    const a = answer({ event: 'PreToolUse', session: SID }, [directive({ scope: 'tree' })], 1);
    expect(a.output).not.toHaveProperty('continue');
    expect(a.output).toMatchObject({ hookSpecificOutput: { permissionDecision: 'deny' } });
    expect(answer({ event: 'PostToolUse', session: SID }, [directive({ scope: 'tree' })], 1).output).toBeUndefined();
    expect(answer({ event: 'UserPromptSubmit', session: SID }, [directive({ scope: 'tree' })], 1).output).toMatchObject(
      {
        continue: false,
      },
    );
  });

  it("a pending report is the Stop hook's block (the turn goes on with it)", () => {
    const a = answer({ event: 'Stop', session: SID }, [directive({ type: 'compact', report: 'R' })], 1);
    expect(a.output).toMatchObject({ decision: 'block' });
    expect(String(a.output?.reason)).toContain('R');
    expect(a.markers).toHaveLength(1);
  });
});

describe('vigil install codex', () => {
  const own = {
    hooks: {
      PreToolUse: [{ matcher: '^Bash$', hooks: [{ type: 'command', command: 'node /opt/mine.mjs', timeout: 30 }] }],
      SessionStart: [{ hooks: [{ type: 'command', command: 'echo hi' }] }],
    },
  };

  it("merges beside the user's hooks, trusts them in config.toml, twice is unchanged, uninstall restores both files", async () => {
    const home = mkdtempSync(join(tmpdir(), 'vigil-codex-home-'));
    const ch = join(home, '.codex');
    mkdirSync(ch);
    const hooksFile = join(ch, 'hooks.json');
    const config = join(ch, 'config.toml');
    const original = `${JSON.stringify(own, null, 2)}\n`;
    const toml = 'model = "gpt-5.5"\n\n[projects."/w"]\ntrust_level = "trusted"\n';
    writeFileSync(hooksFile, original);
    writeFileSync(config, toml);
    const ctx = { env: { HOME: home }, home };

    expect((await codexInstaller.install({}, ctx)).action).toBe('installed');
    const merged = JSON.parse(readFileSync(hooksFile, 'utf8'));
    for (const e of HOOK_EVENTS) expect(merged.hooks[e].at(-1).hooks[0].command).toContain("/hooks/codex'");
    // only SubagentStop (an observation) runs without holding Codex; no PostToolUse hook at all
    expect(merged.hooks.SubagentStop.at(-1).hooks[0].async).toBe(true);
    expect(merged.hooks.PreToolUse.at(-1).hooks[0].async).toBeUndefined();
    expect(merged.hooks.PostToolUse).toBeUndefined();
    expect(merged.hooks.PreToolUse[0]).toEqual(own.hooks.PreToolUse[0]);
    expect(merged.hooks.SessionStart).toEqual(own.hooks.SessionStart);
    // trust keyed by position: Vigil's PreToolUse group is the second
    const trusted = trustedHashes(readFileSync(config, 'utf8'));
    expect([...trusted.keys()]).toContain(`${hooksFile}:pre_tool_use:1:0`);
    expect(trusted.size).toBe(HOOK_EVENTS.length);
    expect(readFileSync(config, 'utf8').startsWith(toml)).toBe(true);
    const st = await codexInstaller.status?.({}, ctx);
    expect(st?.wired).toBe(true);
    expect(st?.problem).toBeUndefined();

    expect((await codexInstaller.install({}, ctx)).action).toBe('unchanged');

    // the user adds a group before Vigil's: its trust no longer matches, status says so
    merged.hooks.PreToolUse.unshift({ hooks: [{ type: 'command', command: 'true' }] });
    writeFileSync(hooksFile, `${JSON.stringify(merged, null, 2)}\n`);
    expect((await codexInstaller.status?.({}, ctx))?.problem).toMatch(/1 of its 4 hooks are not trusted/);
    await codexInstaller.install({}, ctx);
    expect((await codexInstaller.status?.({}, ctx))?.problem).toBeUndefined();
    merged.hooks.PreToolUse.shift();
    writeFileSync(hooksFile, `${JSON.stringify(merged, null, 2)}\n`);

    expect((await codexInstaller.uninstall({}, ctx)).action).toBe('removed');
    expect(readFileSync(hooksFile, 'utf8')).toBe(original);
    expect(readFileSync(config, 'utf8')).toBe(toml);
    expect((await codexInstaller.status?.({}, ctx))?.wired).toBe(false);
    expect((await codexInstaller.uninstall({}, ctx)).action).toBe('absent');
  });

  it("the trust hash is Codex's: sorted-key JSON of event, hook and matcher", () => {
    const file = {
      hooks: { Stop: [{ hooks: [{ type: 'command', command: 'node /x/vigil-codex-hook.mjs Stop', timeout: 10 }] }] }, // an older install's
    };
    const [e] = trustEntries(file, '/h/hooks.json');
    expect(e.key).toBe('/h/hooks.json:stop:0:0');
    expect(e.hash).toMatch(/^sha256:[0-9a-f]{64}$/);
    // a table the user already holds for the key is left alone (no duplicate TOML table)
    const theirs = `[hooks.state."/h/hooks.json:stop:0:0"]\ntrusted_hash = "sha256:abc"\n`;
    expect(withTrust(theirs, [e])).toBe(theirs);
    expect(withoutTrust(withTrust('a = 1\n', [e]))).toBe('a = 1\n');
  });
});
