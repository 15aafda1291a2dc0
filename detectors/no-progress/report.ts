import { cycleLabel, type SessionState, topTargets, verdictOf } from './judge.ts';
import type { NoProgressKnobs } from './knobs.ts';

// The incident report: deterministic text built from the judge's state (counts,
// fingerprint-derived targets, exit codes, spend), never from content, so it is free
// and cannot hallucinate. It goes into alerts (`details`) and into the compaction
// prompt of auto_recover. ASCII only.

export interface ReportSubject {
  session_id: string;
  /** Set when the report is shown to the parent (the root of the tree). */
  child_of?: string;
  /**
   * A worse verdict from outside the judge (the watchdog): it leads the report by its
   * source and level only. Its free-text reason came from outside and the report joins
   * a model's compaction prompt, so the reason stays with people (alert summary,
   * readouts, toasts) and never enters the report.
   */
  external?: { level: 'stalling' | 'looping'; source: string; agent?: string };
}

export type AvoidCause =
  | 'duplicates'
  | 'failures'
  | 'context'
  | 'continuation'
  | 'ceiling'
  | 'repeat_landing'
  | 'identical_run'
  | 'cycle'
  | 'monologue';

// The "Avoid:" line per dominant signal.
const AVOID: Record<AvoidCause, string> = {
  duplicates:
    'Avoid: re-reading whole files, since reads repeat without edits. Give the\n' +
    'worker the exact edit to make, and require an on-disk diff or commit before it\n' +
    'reports done.',
  failures:
    'Avoid: retrying a call that keeps failing. Check that the file or command still\n' +
    'exists and that the sandbox works, then change the approach instead of retrying.',
  context:
    'Avoid: carrying a large context into every turn. Compact, then continue from a\n' +
    'short summary that names the exact next change.',
  continuation:
    'Avoid: re-deriving state on every continuation turn. Check whether the plan is\n' +
    'already complete and stop if it is; otherwise name the next change and make it.',
  ceiling:
    'Avoid: open-ended work without a deliverable. Name the next concrete change and\n' +
    'require an on-disk diff or commit before continuing.',
  repeat_landing:
    'Avoid: re-applying an edit that already landed. Check the file on disk (git diff)\n' +
    'before editing it again; if the change is there, move on to the next step.',
  identical_run:
    'Avoid: repeating a call whose result does not change. Use what the last call\n' +
    'returned, or change the call; to wait for something, say what ends the wait.',
  cycle:
    'Avoid: going round the same few calls. Their results did not change and nothing\n' +
    'landed; say what the cycle is waiting for, then change one step or stop.',
  monologue:
    'Avoid: answering with the same text again. Nothing ran and nothing landed since;\n' +
    'if the work is done, stop; otherwise name the next change and make it.',
};

/**
 * The dominant signal. A repeat landing or an identical run that decided the verdict
 * speaks first (it names the loop exactly); otherwise each candidate's value over its
 * warn threshold, the largest wins (ties in the order duplicates, failures, context).
 * Continuation and the ceiling only speak when nothing else is over its threshold.
 */
export function dominantCause(s: SessionState, k: NoProgressKnobs): AvoidCause {
  const verdict = verdictOf(s, k);
  if (verdict.rule === 'landed_repeat') return 'repeat_landing';
  if (verdict.rule === 'identical_run') return 'identical_run';
  if (verdict.rule === 'cycle') return 'cycle';
  if (verdict.rule === 'monologue') return 'monologue';
  const v = verdict.signals;
  const topWarn = s.readOnly ? k.top_ro_warn : k.top_warn;
  const dup = Math.max(v.dup_share / k.dup_warn, v.top_count / topWarn, v.session_repeat / k.session_repeat_warn);
  const fail = v.fail_streak / k.fail_warn;
  const ctx = v.context_tokens / k.context_high_tokens;
  const best = Math.max(dup, fail, ctx);
  if (best >= 1) return best === dup ? 'duplicates' : best === fail ? 'failures' : 'context';
  if (v.continuation_turns >= k.continuation_warn) return 'continuation';
  if (best > 0 && best === ctx && ctx >= 0.5) return 'context';
  return best === dup && dup > 0.5 ? 'duplicates' : 'ceiling';
}

export function formatTokens(n: number): string {
  if (n >= 1e6) return `${(n / 1e6).toFixed(n >= 1e7 ? 0 : 1)}M`;
  if (n >= 1e3) return `${Math.round(n / 1e3)}k`;
  return String(Math.round(n));
}

/** The report text. Example:
 * ```
 * [vigil] A sub-agent stalled without landing a change (stalling).
 *   session: ses_123 (sisyphus-junior), child of ses_root
 *   423 tool calls, 0 landed changes (no edit with a diff, no commit)
 *   most repeated: read admin/frontend/navbar.js x61, read tests/test_nav.py x16
 *   spend since last landed change: $1.84, 70M prompt tokens (context 180k)
 *   why: stalling: 120 turns ($1.84) without a landed change; 30% duplicate calls in the last 60
 * Avoid: re-reading whole files, ...
 * ```
 */
export function buildReport(subject: ReportSubject, s: SessionState, k: NoProgressKnobs): string {
  const v = verdictOf(s, k);
  const ext = subject.external;
  const agent = s.agent ?? ext?.agent;
  const who = agent ? ` (${agent})` : '';
  const parent = subject.child_of ?? s.parent;
  const kind = parent ? 'A sub-agent' : 'A session';
  const head = ext
    ? `[vigil] ${kind} was flagged by the ${ext.source} (${ext.level}).`
    : v.level === 'ok'
      ? `[vigil] ${kind} shows no stall or loop in its current window (ok).`
      : s.readOnly
        ? `[vigil] ${kind} is repeating itself (${v.level}).`
        : `[vigil] ${kind} stalled without landing a change (${v.level}).`;
  const lines = [head, `  session: ${subject.session_id}${who}${parent ? `, child of ${parent}` : ''}`];
  lines.push(
    s.readOnly
      ? `  ${s.calls} tool calls, read-only agent (never lands a change by design)`
      : `  ${s.calls} tool calls, ${s.landed} landed change${s.landed === 1 ? '' : 's'}${s.landed === 0 ? ' (no edit with a diff, no commit)' : ''}`,
  );
  if (s.landRepeats > 0) {
    lines.push(
      `  repeat landings: ${s.landRepeats} (the previous landed call again: a repeat, not progress; latest run x${s.landRun}, ${clip(label2(s.landTool, s.landTarget))})`,
    );
  }
  if (v.signals.identical_run >= 3) {
    lines.push(
      `  in a row: ${clip(label2(s.runTool, s.runTarget))} x${v.signals.identical_run}, the same ${v.signals.identical_results ? 'result' : 'exit'} each time`,
    );
  }
  if (v.signals.cycle_repeats >= 2) {
    lines.push(
      `  in a cycle: ${clip(cycleLabel(s, v.signals.cycle_period))}, ${v.signals.cycle_repeats} times round, nothing landed`,
    );
  }
  if (v.signals.monologue_run >= 2) {
    lines.push(`  repeated text: the same assistant text x${v.signals.monologue_run}, no tool call between`);
  }
  if (v.signals.tree_rhythm) {
    lines.push('  tree rhythm: its children land at the rate they have shown, so its routine repeats do not count');
  }
  const top = topTargets(s, 3);
  if (top.length) lines.push(`  most repeated: ${top.map((t) => `${clip(t.label)} x${t.count}`).join(', ')}`);
  if (v.signals.fail_streak >= 2) {
    lines.push(`  failing: ${v.signals.fail_streak} in a row, last ${clip(label2(s.failTool, s.failTarget))}`);
  }
  if (s.continuations) lines.push(`  continuation turns: ${v.signals.continuation_turns} since the last landed change`);
  const ctx = s.contextTokens ? ` (context ${formatTokens(s.contextTokens)})` : '';
  lines.push(
    `  spend since last landed change: $${s.usdSince.toFixed(2)}, ${formatTokens(s.tokSince)} prompt tokens${ctx}`,
  );
  lines.push(`  why: ${ext ? `${ext.source} judged it ${ext.level}; this judge: ${v.reason}` : v.reason}`);
  if (v.level !== 'ok' || ext) lines.push(AVOID[dominantCause(s, k)]);
  return ascii(lines.join('\n'));
}

/** The one-line summary for an alert or a toast: `<agent>: <reason>`. */
export function summaryLine(subject: ReportSubject, s: SessionState, k: NoProgressKnobs): string {
  return ascii(`${s.agent ?? subject.session_id}: ${verdictOf(s, k).reason}`).slice(0, 300);
}

const label2 = (tool?: string, target?: string) =>
  tool === undefined ? '(unknown)' : target ? `${tool} ${target}` : tool;
const clip = (s: string) => (s.length > 100 ? `${s.slice(0, 48)}...${s.slice(-49)}` : s);
const ascii = (s: string) => s.replace(/[^\x20-\x7e\n]/g, '?');
