import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { replayReaders } from '../builtins.ts';
import { replay as replayCommand } from '../cli/replay.ts';
import { detectKind, loadInput } from '../detectors/no-progress/replay/inputs.ts';
import { runReplay } from '../detectors/no-progress/replay/replay.ts';
import { loadClaudeTranscripts } from '../sensors/claude-code/transcripts.ts';
import { tempDir } from './helpers/index.ts';

// The composition of the replay with the sensors' readers (builtins.ts replayReaders):
// each agent's files, in its own layout and line format, go to its own reader, and the
// replay judges what that reader maps, the same as the reader alone.

const dir = tempDir('vigil-replay-readers');
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const iso = (t: number) => new Date(t).toISOString();
const jsonl = (lines: unknown[]) => `${lines.map((l) => JSON.stringify(l)).join('\n')}\n`;
const put = (rel: string, text: string) => {
  const f = join(dir, rel);
  mkdirSync(dirname(f), { recursive: true });
  writeFileSync(f, text);
  return f;
};
const T = Date.parse('2026-11-30T10:00:00Z');
const N = 30;

const claude = (session: string) =>
  jsonl(
    Array.from({ length: N }, (_, i) => {
      const base = { sessionId: session, userType: 'external', cwd: '/w/p', version: '2.1.328' };
      return [
        {
          ...base,
          type: 'assistant',
          timestamp: iso(T + i * 1000),
          message: {
            id: `msg_${i}`,
            role: 'assistant',
            content: [{ type: 'tool_use', id: `toolu_${i}`, name: 'Read', input: { file_path: '/w/p/docs/spec.md' } }],
            usage: { input_tokens: 100, output_tokens: 10 },
          },
        },
        {
          ...base,
          type: 'user',
          timestamp: iso(T + i * 1000 + 500),
          message: { role: 'user', content: [{ type: 'tool_result', tool_use_id: `toolu_${i}`, content: 'text' }] },
          toolUseResult: { type: 'text', file: { filePath: '/w/p/docs/spec.md', content: 'text' } },
        },
      ];
    }).flat(),
  );

const rollout = (thread: string) =>
  jsonl([
    { timestamp: iso(T), type: 'session_meta', payload: { id: thread, session_id: thread, cwd: '/w/p' } },
    ...Array.from({ length: N }, (_, i) => [
      {
        timestamp: iso(T + i * 1000 + 1),
        type: 'response_item',
        payload: {
          type: 'function_call',
          name: 'exec_command',
          arguments: '{"cmd":"cat docs/spec.md"}',
          call_id: `c${i}`,
        },
      },
      {
        timestamp: iso(T + i * 1000 + 1),
        type: 'response_item',
        payload: { type: 'function_call_output', call_id: `c${i}`, output: 'Exit code: 0\nOutput:\ntext\n' },
      },
    ]).flat(),
  ]);

const chat = (session: string) =>
  jsonl([
    { sessionId: session, projectHash: 'abc', startTime: iso(T), directories: ['/w/p'] },
    ...Array.from({ length: N }, (_, i) => ({
      id: `m${i}`,
      type: 'gemini',
      timestamp: iso(T + i * 1000),
      content: '',
      model: 'gemini-2.5-pro',
      tokens: { input: 100, output: 10 },
      toolCalls: [
        {
          id: `read_file-${i}`,
          name: 'read_file',
          args: { file_path: 'docs/spec.md' },
          result: [{ functionResponse: { response: { output: 'text' } } }],
          status: 'success',
          timestamp: iso(T + i * 1000 + 500),
        },
      ],
    })),
  ]);

const CC = '11111111-1111-4111-8111-111111111111';
const CX = '44444444-4444-4444-8444-444444444444';
const GM = '55555555-5555-4555-8555-555555555555';
const ccFile = put(`claude/-w-p/${CC}.jsonl`, claude(CC));
const cxFile = put(`codex/2026/11/30/rollout-2026-11-30T10-00-00-${CX}.jsonl`, rollout(CX));
const gmFile = put('gemini/proj/chats/session-2026-11-30T10-00-55555555.jsonl', chat(GM));
mkdirSync(join(dir, 'empty'));

describe('vigil replay through the sensors readers', () => {
  it('hands each agent file and folder to its own reader, an unknown folder to the opencode export reader', () => {
    expect(detectKind(ccFile, replayReaders)).toBe('claude-code');
    expect(detectKind(join(dir, 'claude'), replayReaders)).toBe('claude-code');
    expect(detectKind(cxFile, replayReaders)).toBe('codex');
    expect(detectKind(join(dir, 'codex'), replayReaders)).toBe('codex');
    expect(detectKind(gmFile, replayReaders)).toBe('gemini');
    expect(detectKind(join(dir, 'gemini'), replayReaders)).toBe('gemini');
    expect(detectKind(join(dir, 'empty'), replayReaders)).toBe('folder');
  });

  it.each([
    ['claude-code', ccFile, CC],
    ['codex', cxFile, CX],
    ['gemini', gmFile, GM],
  ])('judges a looping %s session from its file', async (kind, file, session) => {
    const r = await runReplay(file, { readers: replayReaders });
    expect(r).toMatchObject({ kind, rejected: 0 });
    expect(r.sessions).toEqual([expect.objectContaining({ session, verdict: 'looping', events: expect.any(Number) })]);
    expect(r.sessions[0].events).toBeGreaterThanOrEqual(N);
  });

  it('replays what the reader alone loads', async () => {
    const loaded = await loadInput(join(dir, 'claude'), { readers: replayReaders });
    expect(loaded.inputs).toEqual(loadClaudeTranscripts(join(dir, 'claude')).inputs);
  });

  it('the CLI names a folder nobody reads by the export file it misses, as before', async () => {
    let err = '';
    const code = await replayCommand(
      { input: join(dir, 'empty'), json: true },
      { stdout: { write: () => true }, stderr: { write: (s: string) => (err += s) } },
    );
    expect(code).toBe(1);
    expect(err).toBe('replay: session.json: (file): missing: expected the GET /session list\n');
  });

  it('--ledger reads Claude Code transcripts through their reader too', async () => {
    let out = '';
    let err = '';
    const code = await replayCommand(
      { input: ccFile, ledger: true, json: true, mode: ['warn'] },
      { stdout: { write: (s: string) => (out += s) }, stderr: { write: (s: string) => (err += s) } },
    );
    expect(err).toBe('');
    expect(code).toBe(0);
    expect(JSON.parse(out.split('\n')[0]).summary.loops).toBeGreaterThan(0);
  });
});
