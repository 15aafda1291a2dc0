import { describe, expect, it } from 'vitest';
import type { ToolEvent } from '../../core/wire.ts';
import { generateCalibration } from '../../test/fixtures/calibration.ts';
import { sha256Hex } from './fixtures/inputs.ts';
import { newSessionState, onProgress, onRequest, type SessionState, Tracker } from './judge.ts';
import { defaultKnobs } from './knobs.ts';
import { buildReport, dominantCause, formatTokens, summaryLine } from './report.ts';

const k = defaultKnobs();
let n = 0;
const ev = (call: string, target: string, o: Partial<ToolEvent> = {}): ToolEvent => ({
  kind: 'tool',
  session_id: 'ses_w',
  parent_session_id: 'ses_root',
  agent: 'sisyphus-junior',
  tool: 'read',
  call_id: `c${n++}`,
  fingerprint: sha256Hex(call),
  target,
  exit: 0,
  landed: false,
  ts: n,
  ...o,
});

function stuckWorker(): SessionState {
  const s = newSessionState(k);
  for (let i = 0; i < 40; i++) {
    onRequest(
      s,
      {
        session_id: 'ses_w',
        request_id: `r${i}`,
        model: 'p/m',
        prompt_tokens: 150_000 + i * 1000,
        cost_usd: 0.005,
        ts: i,
      },
      k,
    );
    const call =
      i % 2 === 0
        ? ev('nav', 'admin/frontend/navbar.js')
        : i % 4 === 1
          ? ev('test', 'tests/test_nav.py')
          : ev(`d${i}`, `src/x${i}.js`);
    onProgress(s, call, k);
  }
  return s;
}

describe('incident report', () => {
  it('reads like the spec example, deterministically', () => {
    const text = buildReport({ session_id: 'ses_w' }, stuckWorker(), k);
    expect(text).toBe(
      [
        '[vigil] A sub-agent stalled without landing a change (stalling).',
        '  session: ses_w (sisyphus-junior), child of ses_root',
        '  40 tool calls, 0 landed changes (no edit with a diff, no commit)',
        '  most repeated: read admin/frontend/navbar.js x20, read tests/test_nav.py x10',
        '  spend since last landed change: $0.20, 6.8M prompt tokens (context 189k)',
        '  why: stalling: 40 turns ($0.20) without a landed change; 70% duplicate calls in the last 40',
        'Avoid: re-reading whole files, since reads repeat without edits. Give the',
        'worker the exact edit to make, and require an on-disk diff or commit before it',
        'reports done.',
      ].join('\n'),
    );
    expect(buildReport({ session_id: 'ses_w' }, stuckWorker(), k)).toBe(text);
  });

  it('picks the Avoid line from the dominant signal', () => {
    const failing = newSessionState(k);
    for (let i = 0; i < 30; i++)
      onProgress(failing, ev(i < 20 ? `d${i}` : 'npm test', 'npm test', { tool: 'bash', exit: 1 }), k);
    expect(dominantCause(failing, k)).toBe('failures');
    expect(buildReport({ session_id: 'f' }, failing, k)).toContain('Avoid: retrying a call that keeps failing.');

    const big = newSessionState(k);
    for (let i = 0; i < 25; i++) {
      onRequest(big, { session_id: 'b', request_id: `r${i}`, model: 'p/m', prompt_tokens: 600_000, ts: i }, k);
      onProgress(big, ev(`d${i}`, `src/f${i}.js`), k);
    }
    expect(dominantCause(big, k)).toBe('context');

    const cont = newSessionState(k);
    for (let i = 0; i < 25; i++) onProgress(cont, ev(`d${i}`, `src/f${i}.js`), k);
    for (let i = 0; i < 3; i++) onProgress(cont, { kind: 'continuation', session_id: 'c', landed: false, ts: i }, k);
    expect(dominantCause(cont, k)).toBe('continuation');
    expect(buildReport({ session_id: 'c' }, cont, k)).toContain('continuation turns: 3');
  });

  it('is ASCII and never contains arguments or output, for every calibration session', () => {
    const t = new Tracker(k);
    for (const i of generateCalibration().inputs) t.apply(i);
    for (const [id, s] of t.states) {
      const text = buildReport({ session_id: id }, s, k);
      expect(text).toMatch(/^[\x20-\x7e\n]+$/);
      expect(text).not.toMatch(/oldString|newString|import json|do it/);
      expect(summaryLine({ session_id: id }, s, k)).toMatch(/^[\x20-\x7e]+$/);
    }
    const deleted = buildReport({ session_id: 'x' }, t.state('ses_cal_explore_deleted') as SessionState, k);
    expect(deleted).toContain('read-only agent');
    expect(deleted).toContain('most repeated: read deploy/opencode-plugin/router-outcome.js x20');
    expect(deleted).toContain('failing: 20 in a row, last read deploy/opencode-plugin/router-outcome.js');
  });

  it('says ok without an Avoid line for a healthy session', () => {
    const s = newSessionState(k);
    onProgress(s, ev('e', 'src/a.js', { tool: 'edit', landed: true }), k);
    const text = buildReport({ session_id: 'ok' }, s, k);
    expect(text).toContain('(ok)');
    expect(text).toContain('1 landed change\n');
    expect(text).not.toContain('Avoid:');
  });

  it('names a loop that lands: the repeat count, the rule in the why line, its own Avoid line', () => {
    const s = newSessionState(k);
    onProgress(s, ev('e0', 'src/a.js', { tool: 'edit', landed: true }), k);
    for (let i = 0; i < 12; i++) {
      onProgress(s, ev('edit nav', 'admin/frontend/navbar.js', { tool: 'edit', landed: true }), k);
      onProgress(s, ev(`read nav ${i}`, 'admin/frontend/navbar.js'), k);
    }
    expect(dominantCause(s, k)).toBe('repeat_landing');
    const text = buildReport({ session_id: 'ses_w' }, s, k);
    expect(text).toContain('  25 tool calls, 2 landed changes\n');
    expect(text).toContain(
      '  repeat landings: 11 (the previous landed call again: a repeat, not progress; latest run x12, edit admin/frontend/navbar.js)',
    );
    expect(text).toMatch(/ {2}why: stalling: .*; the same edit landed 12 times: a repeat, not progress \(edit admin/);
    expect(text).toContain('Avoid: re-applying an edit that already landed.');
    expect(summaryLine({ session_id: 'ses_w' }, s, k)).toMatch(
      /^sisyphus-junior: stalling: .*the same edit landed 12 times: a repeat, not progress/,
    );
  });

  it('names an unbroken identical run and its Avoid line', () => {
    const s = newSessionState(k);
    for (let i = 0; i < 4; i++) onProgress(s, ev(`d${i}`, `src/x${i}.js`), k);
    for (let i = 0; i < 25; i++) onProgress(s, ev('settings', 'admin/frontend/settings.js'), k);
    expect(dominantCause(s, k)).toBe('identical_run');
    const text = buildReport({ session_id: 'ses_w' }, s, k);
    expect(text).toContain('  in a row: read admin/frontend/settings.js x25, the same exit each time\n');
    expect(text).toContain('why: looping: ');
    expect(text).toContain('Avoid: repeating a call whose result does not change.');
  });

  it('formats token counts', () => {
    expect([formatTokens(950), formatTokens(189_400), formatTokens(6_800_000), formatTokens(70_400_000)]).toEqual([
      '950',
      '189k',
      '6.8M',
      '70M',
    ]);
  });
});
