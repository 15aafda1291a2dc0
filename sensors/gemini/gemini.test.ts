import { appendFileSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { Directive } from '../../core/wire.ts';
import { hookHarness } from '../../test/helpers/hooks.ts';
import { newLandedTracker } from '../shared/landed.ts';
import { answer } from './answer.ts';
import { geminiBridge } from './bridge.ts';
import { geminiInstaller, HOOK_EVENTS } from './installer.ts';
import { exitOf, loopNudges, type ToolPayload, toolEvent } from './map.ts';

// Shapes as Gemini CLI 0.61.0 sends them (docs/gemini.md).
const SID = '88dd9dcc-deaa-4776-86e6-47c862839651';
const afterTool = (tool_name: string, tool_input: unknown, tool_response: unknown): ToolPayload => ({
  session_id: SID,
  hook_event_name: 'AfterTool',
  cwd: '/w/project',
  tool_name,
  tool_input,
  tool_response,
});
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

describe('Gemini mapping', () => {
  it('a shell exit 1 has no error: the code is read from the result text, which is not kept', () => {
    const p = afterTool(
      'run_shell_command',
      { command: 'sh check.sh' },
      {
        llmContent:
          '<untrusted_context>\nOutput: FAIL: add(1, 2) should be 3\nExit Code: 1\nProcess Group PGID: 6152\n</untrusted_context>',
        returnDisplay: 'FAIL: add(1, 2) should be 3',
      },
    );
    const { event } = toolEvent(p, { session_id: SID }, 'g1', newLandedTracker(), 1);
    expect(event).toMatchObject({ tool: 'bash', exit: 1, target: 'sh check.sh' });
    expect(JSON.stringify(event)).not.toContain('FAIL');
    expect(exitOf('read', { llmContent: 'x', error: { type: 'file_not_found' } })).toBe(1);
  });

  it('a replace with changed lines lands; a read of the same file twice has one fingerprint', () => {
    const edit = toolEvent(
      afterTool(
        'replace',
        { file_path: '/w/project/src/app.js' },
        {
          llmContent: 'Successfully modified file',
          returnDisplay: { diffStat: { model_added_lines: 1, model_removed_lines: 1 } },
        },
      ),
      { session_id: SID },
      'g2',
      newLandedTracker(),
      1,
    );
    expect(edit.event).toMatchObject({ tool: 'edit', target: 'src/app.js', landed: true });
    const r = (id: string) =>
      toolEvent(
        afterTool('read_file', { file_path: '/w/project/src/app.js' }, { llmContent: 'x', returnDisplay: '' }),
        { session_id: SID },
        id,
        newLandedTracker(),
        1,
      ).event;
    expect(r('a').fingerprint).toBe(r('b').fingerprint);
    expect(r('a').target).toBe('src/app.js');
  });
});

describe('Gemini answers', () => {
  it("a refused session's BeforeTool is a deny; a stopped tree's is continue:false; a report at AfterAgent is a block", () => {
    expect(answer({ event: 'BeforeTool', session: SID }, [directive({})], 1).output).toMatchObject({
      decision: 'deny',
    });
    expect(answer({ event: 'BeforeTool', session: SID }, [directive({ scope: 'tree' })], 1).output).toEqual({
      continue: false,
      stopReason: expect.stringContaining('Vigil: stopped'),
    });
    const a = answer({ event: 'AfterAgent', session: SID }, [directive({ type: 'compact', report: 'R' })], 1);
    expect(a.output).toMatchObject({ decision: 'block', reason: expect.stringContaining('R') });
  });
});

describe('vigil install gemini', () => {
  it("merges beside the user's settings and hooks, twice is unchanged, uninstall leaves the file as it was", async () => {
    const home = mkdtempSync(join(tmpdir(), 'vigil-gemini-home-'));
    mkdirSync(join(home, '.gemini'));
    const file = join(home, '.gemini', 'settings.json');
    const own = {
      security: { auth: { selectedType: 'gemini-api-key' } },
      hooks: {
        BeforeTool: [{ matcher: 'run_shell_command', hooks: [{ type: 'command', command: 'node /opt/mine.mjs' }] }],
      },
      ui: { theme: 'dark' },
    };
    const original = `${JSON.stringify(own, null, 2)}\n`;
    writeFileSync(file, original);
    const ctx = { env: { HOME: home }, home };
    expect((await geminiInstaller.install({}, ctx)).action).toBe('installed');
    const merged = JSON.parse(readFileSync(file, 'utf8'));
    for (const e of HOOK_EVENTS) {
      const cmd = merged.hooks[e].at(-1).hooks[0].command as string;
      expect(cmd).toMatch(/^curl .*'http:\/\/127\.0\.0\.1:7411\/hooks\/gemini' 2>\/dev\/null \|\| true$/);
      // the key is read from a file of the user's, never written into the command line
      expect(cmd).toContain(`-H @'${join(home, '.local', 'state', 'vigil', 'hook-key.header')}'`);
    }
    expect(merged.hooks.BeforeTool[0]).toEqual(own.hooks.BeforeTool[0]);
    expect(Object.keys(merged)).toEqual(['security', 'hooks', 'ui']);
    expect((await geminiInstaller.status?.({}, ctx))?.wired).toBe(true);
    expect((await geminiInstaller.install({}, ctx)).action).toBe('unchanged');
    expect((await geminiInstaller.uninstall({}, ctx)).action).toBe('removed');
    expect(readFileSync(file, 'utf8')).toBe(original);
    expect((await geminiInstaller.uninstall({}, ctx)).action).toBe('absent');
  });

  it('status says when hooksConfig.enabled turns every hook off', async () => {
    const home = mkdtempSync(join(tmpdir(), 'vigil-gemini-home-'));
    mkdirSync(join(home, '.gemini'));
    writeFileSync(join(home, '.gemini', 'settings.json'), '{"hooksConfig":{"enabled":false}}\n');
    const ctx = { env: { HOME: home }, home };
    await geminiInstaller.install({}, ctx);
    expect((await geminiInstaller.status?.({}, ctx))?.problem).toMatch(/hooksConfig.enabled is false/);
    expect((await geminiInstaller.status?.({}, ctx))?.via).toBe('command hooks (curl)');
  });
});

describe("Gemini CLI's own loop detection", () => {
  // The chat file lines of out/default-like run: a call record, then the nudge record.
  const call = JSON.stringify({ id: 'g-1', type: 'gemini', content: '', toolCalls: [{ name: 'read_file' }] });
  const nudge = (id: string) =>
    JSON.stringify({
      id,
      timestamp: '2026-12-01T19:11:11.156Z',
      type: 'user',
      content: [{ text: 'System: Potential loop detected. Details: Repeated tool call: read_file with arguments {}.' }],
    });

  it('finds the nudge records by id, in a tail that starts mid-line; the text is not kept', () => {
    const text = `ed line"}\n${call}\n${nudge('n-1')}\n{"$set":{"lastUpdated":"x"}}\n${nudge('n-1')}\n`;
    expect(loopNudges(text)).toEqual(['n-1']);
    // a user who types the words is not the detection
    expect(
      loopNudges(JSON.stringify({ id: 'u', type: 'user', content: [{ text: 'Potential loop detected?' }] })),
    ).toEqual([]);
  });

  it('reports a nudge once and the stop (SessionEnd without AfterAgent) as agent_loop markers', async () => {
    const h = hookHarness([geminiBridge], { now: () => 1000 });
    const dir = mkdtempSync(join(tmpdir(), 'vigil-gemini-loop-'));
    const chat = join(dir, 'session.jsonl');
    writeFileSync(chat, `${call}\n`);
    const hook = (hook_event_name: string, extra: Record<string, unknown> = {}) =>
      h.call('gemini', { session_id: SID, transcript_path: chat, hook_event_name, ...extra });
    const loops = () => h.posted().filter((e) => e.kind === 'agent_loop');
    await hook('BeforeAgent', { prompt: 'x' });
    await hook('BeforeTool', { tool_name: 'read_file', tool_input: {} });
    expect(loops()).toEqual([]);
    appendFileSync(chat, `${nudge('n-1')}\n`);
    await hook('BeforeTool', { tool_name: 'glob', tool_input: {} });
    await hook('BeforeTool', { tool_name: 'glob', tool_input: {} });
    expect(loops()).toEqual([{ kind: 'agent_loop', session_id: SID, call_id: 'n-1', landed: false, ts: 1000 }]);
    await hook('SessionEnd', { reason: 'exit' });
    expect(loops().slice(1)).toEqual([
      { kind: 'agent_loop', session_id: SID, call_id: 'stop-t1', landed: false, stopped: true, ts: 1000 },
    ]);
    // a turn that ends as usual (AfterAgent) is no stop, nudged or not
    await hook('BeforeAgent', { prompt: 'y' });
    appendFileSync(chat, `${nudge('n-2')}\n`);
    await hook('AfterAgent', { prompt: 'y', prompt_response: 'z' });
    await hook('SessionEnd', { reason: 'exit' });
    expect(loops().map((e) => e.call_id)).toEqual(['n-1', 'stop-t1', 'n-2']);
  });
});
