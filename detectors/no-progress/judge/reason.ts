import type { VerdictRule, VerdictSignals } from '../../../core/wire.ts';
import type { NoProgressKnobs } from '../knobs.ts';
import {
  FP_SLOTS,
  FP_W,
  HASH_MASK,
  LEVEL_OK,
  LEVELS,
  type LevelCode,
  label,
  nameOf,
  RING_W,
  type SessionState,
  U16,
} from './state.ts';

// One-line reasons and named targets for verdicts and reports (ASCII, no content).

export const round = (x: number, d: number) => Math.round(x * 10 ** d) / 10 ** d;
export const usdText = (x: number) => `$${x.toFixed(2)}`;
export const short = (s: string) => (s.length > 80 ? `${s.slice(0, 38)}...${s.slice(-39)}` : s);

export function reasonOf(
  s: SessionState,
  k: NoProgressKnobs,
  level: LevelCode,
  rule: VerdictRule | null,
  g: VerdictSignals,
): string {
  const since = `${g.turns_since_landed} turns (${usdText(g.usd_since_landed)}) without a landed change`;
  if (level === LEVEL_OK) {
    // A resolve quotes this: say what is true (a landed change, or only a quiet window).
    if (s.readOnly && s.landed === 0) return `ok: read-only, ${g.calls} calls`;
    if (s.landed === 0) return `ok: ${since}, below the thresholds`;
    const n = g.turns_since_landed;
    return `ok: a change landed ${n} turn${n === 1 ? '' : 's'} ago (${usdText(g.usd_since_landed)} since)`;
  }
  let what: string;
  switch (rule) {
    case 'duplicates':
      what = `${Math.round(g.dup_share * 100)}% duplicate calls in the last ${s.len}`;
      break;
    case 'fail_streak':
      what = `${g.fail_streak} failures in a row (last: ${short(label(s.failTool, s.failTarget))})`;
      break;
    case 'top_repeat':
      what = `${short(g.top_target ?? '(unnamed target)')} x${g.top_count} in the last ${s.len} calls`;
      break;
    case 'session_repeat':
      what = `one exact call repeated ${g.session_repeat} times this session`;
      break;
    case 'continuation':
      what = `${g.continuation_turns} continuation turns since the last landed change`;
      break;
    case 'landed_repeat':
      what = `the same ${s.landTool ?? 'write'} landed ${g.landed_repeat} times: a repeat, not progress (${short(label(s.landTool, s.landTarget))})`;
      break;
    case 'identical_run':
      what = `${short(label(s.runTool, s.runTarget))} x${g.identical_run} in a row, the same ${g.identical_results ? 'result' : 'exit'} each time`;
      break;
    case 'cycle':
      what = `a cycle of ${g.cycle_period} calls (${short(cycleLabel(s, g.cycle_period))}) ${g.cycle_repeats} times round${s.sawResult ? ', the same results' : ''}`;
      break;
    case 'monologue':
      what = `the same assistant text ${g.monologue_run} times in a row, no tool call`;
      break;
    case 'novelty':
      what = `${Math.round((g.novelty ?? 0) * Math.min(k.novelty_window, s.cap))} new calls in the last ${Math.min(k.novelty_window, s.cap)}`;
      break;
    default:
      what = 'turn/spend ceiling reached';
  }
  const who = s.readOnly ? `read-only ${s.agent ?? 'agent'}, ${g.calls} calls` : since;
  return `${LEVELS[level]}: ${who}; ${what}`.replace(/[^\x20-\x7e]/g, '?').slice(0, 300);
}

/** The calls of the current cycle, oldest first, named by their targets (`read a.js, bash npm test`). */
export function cycleLabel(s: SessionState, period: number): string {
  const names: string[] = [];
  for (let j = period; j >= 1; j--) {
    const at = ((s.head - j + s.cap) % s.cap) * RING_W;
    const name = nameOf(s, s.buf[at + 2] & HASH_MASK);
    names.push(name === undefined ? '(unnamed target)' : label(name[0], name[1]));
  }
  return names.join(', ');
}

/**
 * The session's most repeated calls (lower-bound counts >= 2), named by their target and
 * merged per name (`read navbar.js` at one offset and at another add up), most first.
 */
export function topTargets(s: SessionState, n = 3): { label: string; count: number }[] {
  const by = new Map<string, number>();
  const fb = s.fpBase;
  for (let i = 0; i < FP_SLOTS; i++) {
    const w = s.buf[fb + i * FP_W + 2];
    const lb = (w & U16) - (w >>> 16);
    if ((w & U16) === 0 || lb < 2) continue;
    const name = nameOf(s, s.buf[fb + i * FP_W + 5]);
    const l = name === undefined ? '(unnamed target)' : label(name[0], name[1]);
    by.set(l, (by.get(l) ?? 0) + lb);
  }
  return [...by]
    .sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1))
    .slice(0, n)
    .map(([l, count]) => ({ label: l, count }));
}
