import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { hookKey, loadSensorSecret, sensorSecretFile } from '../../core/session-key.ts';
import { type Directive, ProgressEventSchema } from '../../core/wire.ts';
import { newLandedTracker, toolPartToEvent } from '../opencode/convert.ts';
import { answer } from './answer.ts';
import { claudeCodeInstaller, HOOK_EVENTS } from './installer.ts';
import { type ToolPayload, ToolPayloadSchema, toolEvent } from './map.ts';

// The adapter on the hook payloads a real Claude Code 2.1.328 sent (captured in
// test/fixtures/claude-code/hooks-2.1.328.jsonl; strings there are cut at a few hundred
// chars, paths are placeholders).

const FIXTURE = join(import.meta.dirname, '..', '..', 'test', 'fixtures', 'claude-code', 'hooks-2.1.328.jsonl');
const payloads = readFileSync(FIXTURE, 'utf8')
  .split('\n')
  .filter(Boolean)
  .map((l) => JSON.parse(l) as Record<string, any>);

const find = (f: (p: Record<string, any>) => boolean): ToolPayload => {
  const p = payloads.find(f);
  if (!p) throw new Error('no such payload in the fixture');
  return ToolPayloadSchema.parse(p);
};

describe('claude-code: hook payloads -> progress events', () => {
  it('a failed Bash call has the exit code from "Exit code N"; the fingerprint is the one opencode computes for the same call', () => {
    const p = find((x) => x.hook_event_name === 'PostToolUseFailure' && x.tool_input?.command === 'sh check.sh');
    const ev = toolEvent(p, newLandedTracker(), 1000)?.event;
    expect(ev).toMatchObject({ kind: 'tool', tool: 'bash', exit: 1, landed: false, target: 'sh check.sh' });
    expect(ProgressEventSchema.parse(ev)).toBeTruthy();
    // The same command through opencode's converter: one normalisation, one fingerprint.
    const oc = toolPartToEvent(
      {
        type: 'tool',
        tool: 'bash',
        callID: 'c1',
        state: { status: 'completed', input: { command: 'sh check.sh' }, metadata: { exit: 1 }, output: 'x' },
      } as never,
      { session_id: 's', cwd: p.cwd },
      newLandedTracker(),
      1000,
    );
    expect(oc?.event.fingerprint).toBe(ev?.fingerprint);
    expect(oc?.event.target).toBe(ev?.target);
  });

  it('a timeout keeps its exit (143); a missing file is exit 1', () => {
    const t = find((x) => x.hook_event_name === 'PostToolUseFailure' && x.tool_input?.command === 'sleep 5');
    expect(toolEvent(t, newLandedTracker(), 1)?.event.exit).toBe(143);
    const m = find((x) => x.hook_event_name === 'PostToolUseFailure' && x.tool_name === 'Read');
    expect(toolEvent(m, newLandedTracker(), 1)?.event).toMatchObject({ tool: 'read', exit: 1 });
  });

  it('an Edit with a non-empty structuredPatch landed; an identical one with an empty patch did not; reads never land', () => {
    const e = find((x) => x.hook_event_name === 'PostToolUse' && x.tool_name === 'Edit');
    expect(toolEvent(e, newLandedTracker(), 1)?.event.landed).toBe(true);
    const none = { ...e, tool_response: { ...(e.tool_response as object), structuredPatch: [] } };
    expect(toolEvent(none, newLandedTracker(), 1)?.event.landed).toBe(false);
    const r = find((x) => x.hook_event_name === 'PostToolUse' && x.tool_name === 'Read');
    expect(toolEvent(r, newLandedTracker(), 1)?.event).toMatchObject({ tool: 'read', landed: false, exit: 0 });
  });

  it("a subagent's call is its own session, child of the payload's session, with its agent type", () => {
    const p = find((x) => x.hook_event_name === 'PostToolUse' && typeof x.agent_id === 'string');
    const ev = toolEvent(p, newLandedTracker(), 1)?.event;
    expect(ev?.session_id).toBe(`${p.session_id}.${p.agent_id}`);
    expect(ev?.parent_session_id).toBe(p.session_id);
    expect(ev?.agent).toBe('general-purpose');
  });

  it('no argument, output or error text survives the mapping', () => {
    const out = payloads
      .filter((x) => x.hook_event_name === 'PostToolUse' || x.hook_event_name === 'PostToolUseFailure')
      .map((x) => JSON.stringify(toolEvent(ToolPayloadSchema.parse(x), newLandedTracker(), 1)?.event));
    expect(out.length).toBeGreaterThan(10);
    for (const s of out) {
      // (a command's first two tokens are its coarse target by the shared rule: `echo out-line`)
      expect(s).not.toMatch(/return a|FAIL:|err-line|SUBAGENT|Run the check|old_string|add\(/);
    }
  });
});

const dir = (over: Partial<Directive>): Directive => ({
  id: `d${Math.random().toString(16).slice(2, 10)}`,
  type: 'toast',
  session_id: 'root',
  root_id: 'root',
  created_at: 1,
  ...over,
});

describe('claude-code: answers from the pending directives', () => {
  it('a session block denies its tool calls with the reason and report, and stays pending (no ack)', () => {
    const b = dir({ type: 'block', session_id: 'root.a1', reason: 'recovering: looping', report: 'REPORT' });
    const a = answer({ event: 'PreToolUse', session: 'root.a1', parent: 'root' }, [b], 5);
    const out = a.output?.hookSpecificOutput as Record<string, string>;
    expect(out.permissionDecision).toBe('deny');
    expect(out.permissionDecisionReason).toContain('recovering: looping');
    expect(out.permissionDecisionReason).toContain('REPORT');
    expect(a.acks).toEqual([]);
    // another session of the tree is not blocked
    expect(answer({ event: 'PreToolUse', session: 'root' }, [b], 5).output).toBeUndefined();
  });

  it('the recovery report is delivered once: a denied call mid-turn, acknowledged with its aborts, reported as done', () => {
    const c = dir({ type: 'compact', session_id: 'root', report: 'REPORT', reason: 'looping' });
    const ab = dir({ type: 'abort', session_id: 'root' });
    const a = answer({ event: 'PreToolUse', session: 'root' }, [ab, c], 7);
    expect(JSON.stringify(a.output)).toContain('REPORT');
    expect(a.acks.map((x) => x.id).sort()).toEqual([ab.id, c.id].sort());
    expect(a.markers).toEqual([
      { kind: 'compaction_done', session_id: 'root', call_id: `inject-${c.id}`, landed: false, ts: 7 },
    ]);
  });

  it('at the end of a turn the report is the nudge: Stop is blocked with it', () => {
    const c = dir({ type: 'compact', session_id: 'root', report: 'REPORT' });
    const a = answer({ event: 'Stop', session: 'root' }, [c], 1);
    expect(a.output).toMatchObject({ decision: 'block' });
    expect(String(a.output?.reason)).toContain('REPORT');
    expect(answer({ event: 'Stop', session: 'root' }, [], 1).output).toBeUndefined();
  });

  it('the hard stop denies every call of the tree and ends the run; prompts and finished calls end it too', () => {
    const s = dir({ type: 'block', scope: 'tree', session_id: 'root', reason: 'hard stop', report: 'R' });
    const pre = answer({ event: 'PreToolUse', session: 'root.a1', parent: 'root' }, [s], 1).output;
    expect(pre).toMatchObject({ continue: false, hookSpecificOutput: { permissionDecision: 'deny' } });
    for (const event of ['PostToolUse', 'PostToolUseFailure', 'UserPromptSubmit']) {
      expect(answer({ event, session: 'root' }, [s], 1).output).toMatchObject({ continue: false });
    }
    // Resume: the lift took the block out of the queue; the lift itself is acknowledged
    const l = dir({ type: 'lift', scope: 'tree', session_id: 'root' });
    const after = answer({ event: 'PreToolUse', session: 'root' }, [l], 1);
    expect(after.output).toBeUndefined();
    expect(after.acks.map((x) => x.id)).toEqual([l.id]);
  });

  it('a toast it cannot show is acknowledged without an answer', () => {
    const t = dir({ type: 'toast', toast: { title: 't', message: 'm', variant: 'info' } });
    const a = answer({ event: 'PostToolUse', session: 'root' }, [t], 1);
    expect(a.output).toBeUndefined();
    expect(a.acks.map((x) => x.id)).toEqual([t.id]);
  });
});

describe('vigil install claude-code', () => {
  const own = {
    model: 'sonnet',
    hooks: {
      PreToolUse: [{ matcher: 'Bash', hooks: [{ type: 'command', command: 'my-guard.sh', timeout: 3 }] }],
      Notification: [{ hooks: [{ type: 'command', command: 'notify-me' }] }],
    },
    permissions: { allow: ['Read'] },
  };

  it("merges beside the user's own hooks, twice is unchanged, uninstall leaves the file as it was", async () => {
    const home = mkdtempSync(join(tmpdir(), 'vigil-cc-home-'));
    mkdirSync(join(home, '.claude'));
    const file = join(home, '.claude', 'settings.json');
    const original = `${JSON.stringify(own, null, 2)}\n`;
    writeFileSync(file, original);
    const ctx = { env: { HOME: home }, home };

    chmodSync(file, 0o644);
    const first = await claudeCodeInstaller.install({}, ctx);
    expect(first.action).toBe('installed');
    const merged = JSON.parse(readFileSync(file, 'utf8'));
    const key = hookKey(loadSensorSecret(sensorSecretFile(ctx.env)));
    for (const e of HOOK_EVENTS)
      expect(merged.hooks[e].at(-1)).toEqual({
        hooks: [
          {
            type: 'http',
            url: 'http://127.0.0.1:7411/hooks/claude-code',
            timeout: 5,
            headers: { 'x-vigil-hook-key': key },
          },
        ],
      });
    // the file now holds the hook key: readable by the user alone
    expect(statSync(file).mode & 0o777).toBe(0o600);
    // the user's hook is still first on PreToolUse, with its matcher
    expect(merged.hooks.PreToolUse[0]).toEqual(own.hooks.PreToolUse[0]);
    expect(merged.hooks.Notification).toEqual(own.hooks.Notification);
    expect(merged.model).toBe('sonnet');
    expect((await claudeCodeInstaller.status?.({}, ctx))?.wired).toBe(true);

    const second = await claudeCodeInstaller.install({}, ctx);
    expect(second.action).toBe('unchanged');
    expect(JSON.parse(readFileSync(file, 'utf8'))).toEqual(merged);

    expect((await claudeCodeInstaller.uninstall({}, ctx)).action).toBe('removed');
    expect(readFileSync(file, 'utf8')).toBe(original);
    expect(statSync(file).mode & 0o777).toBe(0o644);
    expect(existsSync(join(home, '.claude', 'vigil'))).toBe(false);
    expect((await claudeCodeInstaller.status?.({}, ctx))?.wired).toBe(false);
    expect((await claudeCodeInstaller.uninstall({}, ctx)).action).toBe('absent');
  });

  it('uninstall gives back the exact bytes the user had (their formatting), and no file where there was none', async () => {
    const home = mkdtempSync(join(tmpdir(), 'vigil-cc-home-'));
    mkdirSync(join(home, '.claude'));
    const file = join(home, '.claude', 'settings.json');
    const theirs =
      '{\n    "model": "opus",   "hooks": {"Stop": [{"hooks": [{"type": "command", "command": "say done"}]}]}\n}';
    writeFileSync(file, theirs);
    const ctx = { env: { HOME: home }, home };
    await claudeCodeInstaller.install({}, ctx);
    await claudeCodeInstaller.install({ url: 'http://127.0.0.1:7499' }, ctx); // another port: replaced
    expect(JSON.parse(readFileSync(file, 'utf8')).hooks.Stop.at(-1).hooks[0].url).toBe(
      'http://127.0.0.1:7499/hooks/claude-code',
    );
    await claudeCodeInstaller.uninstall({}, ctx);
    expect(readFileSync(file, 'utf8')).toBe(theirs);

    const bare = mkdtempSync(join(tmpdir(), 'vigil-cc-home-'));
    const bctx = { env: { HOME: bare }, home: bare };
    await claudeCodeInstaller.install({}, bctx);
    expect(existsSync(join(bare, '.claude', 'settings.json'))).toBe(true);
    await claudeCodeInstaller.uninstall({}, bctx);
    expect(existsSync(join(bare, '.claude', 'settings.json'))).toBe(false);
  });

  it("an upgrade replaces the older command hooks (and their bundle); uninstall then leaves the user's own", async () => {
    const home = mkdtempSync(join(tmpdir(), 'vigil-cc-home-'));
    const dir = join(home, '.claude');
    mkdirSync(join(dir, 'vigil'), { recursive: true });
    const bundle = join(dir, 'vigil', 'vigil-claude-code-hook.mjs');
    writeFileSync(bundle, '// vigil-claude-code 0.1.0+abcd1234: the bundle\n');
    const old = (e: string) => ({ type: 'command', command: `node ${JSON.stringify(bundle)} ${e}`, timeout: 10 });
    const before = {
      ...own,
      hooks: {
        ...own.hooks,
        PreToolUse: [...own.hooks.PreToolUse, { hooks: [old('PreToolUse')] }],
        Stop: [{ hooks: [old('Stop')] }],
      },
    };
    const file = join(dir, 'settings.json');
    writeFileSync(file, `${JSON.stringify(before, null, 2)}\n`);
    const ctx = { env: { HOME: home }, home };
    expect((await claudeCodeInstaller.status?.({}, ctx))?.problem).toMatch(/older command hooks/);
    const r = await claudeCodeInstaller.install({}, ctx);
    expect(r.action).toBe('replaced');
    expect(existsSync(bundle)).toBe(false);
    const after = JSON.parse(readFileSync(file, 'utf8'));
    expect(JSON.stringify(after)).not.toContain('vigil-claude-code-hook.mjs');
    expect(after.hooks.PreToolUse[0]).toEqual(own.hooks.PreToolUse[0]);
    expect(after.hooks.PreToolUse).toHaveLength(2);
    const st = await claudeCodeInstaller.status?.({}, ctx);
    expect(st).toMatchObject({ wired: true, via: 'http hooks', endpoint: 'http://127.0.0.1:7411/hooks/claude-code' });
    expect(st?.problem).toBeUndefined();
    await claudeCodeInstaller.uninstall({}, ctx);
    expect(readFileSync(file, 'utf8')).toBe(`${JSON.stringify(own, null, 2)}\n`);
  });

  it('--url must be on this machine: hooks post raw payloads to it', () => {
    const bad = claudeCodeInstaller.options.safeParse({ url: 'http://vigil.example.com:7411' });
    expect(bad.success).toBe(false);
    expect(JSON.stringify(bad.error?.issues)).toMatch(/on this machine/);
    expect(claudeCodeInstaller.options.safeParse({ url: 'http://127.0.0.1:8080/vigil' }).success).toBe(true);
  });

  it('--project writes DIR/.claude/settings.json; a broken settings file is named and left alone', async () => {
    const proj = mkdtempSync(join(tmpdir(), 'vigil-cc-proj-'));
    const ctx = { env: {}, home: mkdtempSync(join(tmpdir(), 'vigil-cc-home-')) };
    const r = await claudeCodeInstaller.install({ project: proj }, ctx);
    expect(r.path).toBe(join(proj, '.claude', 'settings.json'));
    writeFileSync(r.path, '{ broken');
    await expect(claudeCodeInstaller.install({ project: proj }, ctx)).rejects.toThrow(/settings\.json: not valid JSON/);
    expect(readFileSync(r.path, 'utf8')).toBe('{ broken');
    expect(claudeCodeInstaller.options.safeParse({ user: true, project: proj }).success).toBe(false);
  });
});
