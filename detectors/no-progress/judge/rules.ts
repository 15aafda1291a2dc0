import { VERDICT_RULES, type Verdict, type VerdictRule, type VerdictSignals } from '../../../core/wire.ts';
import type { NoProgressKnobs } from '../knobs.ts';
import { reasonOf, round } from './reason.ts';
import {
  FP_SLOTS,
  FP_W,
  LEVEL_LOOPING,
  LEVEL_OK,
  LEVEL_STALLING,
  LEVELS,
  type LevelCode,
  label,
  type SessionState,
  TG_SLOTS,
  TG_W,
  U16,
} from './state.ts';
import { isLookup, recountTop } from './window.ts';

// The verdict rules over the window and session signals.

// ---------------------------------------------------------------------------
// verdicts

// Module scratch for the signals of the latest assessment: the hot path fills it
// without allocating; verdictOf copies it out.
export const sig = {
  turns: 0,
  usd: 0,
  dup: 0,
  fail: 0,
  top: 0,
  rep: 0,
  cont: 0,
  novel: -1,
  /** current run of one write fingerprint landing (0 once the run is older than the window) */
  land: 0,
  /** current unbroken run of one identical call */
  run: 0,
  /** an orchestrator whose tree keeps landing at the rhythm it has shown: its window and session repeats are routine */
  rhythm: false,
  /** repetitions of the current short cycle (0: none) and its period */
  cycle: 0,
  period: 0,
  /** model steps in a row with one text and no tool call */
  mono: 0,
  rule: -1,
};
/** The wire's rule names, in the order of the R_* codes below. */
export const RULES: readonly VerdictRule[] = VERDICT_RULES;
export const R_DUP = 0;
export const R_FAIL = 1;
export const R_TOP = 2;
export const R_REP = 3;
export const R_CONT = 4;
export const R_NOVEL = 5;
export const R_CEIL = 6;
export const R_LAND = 7;
export const R_RUN = 8;
export const R_CYCLE = 9;
export const R_MONO = 10;

/** The identical-run threshold of the current run at one level: lookups or not, results compared or not. */
function runThreshold(s: SessionState, k: NoProgressKnobs, loop: boolean): number {
  const lookup = isLookup(s.runTool ?? '');
  if (s.runRes) {
    if (lookup) return loop ? k.result_lookup_run_loop : k.result_lookup_run_warn;
    return loop ? k.result_run_loop : k.result_run_warn;
  }
  if (lookup) return loop ? k.lookup_run_loop : k.lookup_run_warn;
  return loop ? k.run_loop : k.run_warn;
}

/**
 * The rules that need no stall precondition: the evidence is the run itself. A write
 * landing over and over, one call repeated with nothing between, a short cycle of calls
 * going round and round, or the same text said again and again with no tool call, is
 * not work whatever the counters since the last landed change say.
 */
function runRule(s: SessionState, k: NoProgressKnobs, loop: boolean): number {
  if (sig.run >= 2 && sig.run >= runThreshold(s, k, loop)) return R_RUN;
  if (sig.land >= (loop ? k.landed_repeat_loop : k.landed_repeat_warn)) return R_LAND;
  if (sig.cycle >= (loop ? k.cycle_loop : k.cycle_warn)) return R_CYCLE;
  if (sig.mono >= (loop ? k.monologue_loop : k.monologue_warn)) return R_MONO;
  return -1;
}

/**
 * The current short cycle into sig.cycle, sig.period: for each period p (2 to 4) whose
 * streak covers at least two rounds, the rounds so far; the most rounds win (the
 * shortest period on a tie). A span that is one call over and over is an identical run,
 * not a cycle.
 */
function cycleSignal(s: SessionState): void {
  let best = 0;
  let period = 0;
  for (let p = 2; p <= 4; p++) {
    const streak = p === 2 ? s.per2 : p === 3 ? s.per3 : s.per4;
    if (streak < p || s.runLen >= streak + p) continue;
    const rounds = Math.floor(streak / p) + 1;
    if (rounds > best) {
      best = rounds;
      period = p;
    }
  }
  sig.cycle = best;
  sig.period = period;
}

/**
 * The first repeat rule a writing agent's signals (in `sig`) reach at one level's
 * thresholds; the order is the rules' priority. `rhythm`: an orchestrator whose tree
 * keeps landing at the rhythm it has shown, whose routine repeats (the duplicate share,
 * the window's top repeat, the whole-session repeats) do not count.
 */
function repeatRule(rhythm: boolean, dup: number, fail: number, top: number, rep: number, cont: number): number {
  if (!rhythm && sig.dup >= dup) return R_DUP;
  if (sig.fail >= fail) return R_FAIL;
  if (!rhythm && sig.top >= top) return R_TOP;
  if (!rhythm && sig.rep >= rep) return R_REP;
  if (sig.cont >= cont) return R_CONT;
  return -1;
}

/**
 * An orchestrator (its tree has landed tree_min_landings times) in rhythm: since the
 * latest landing (at most tree_grace_turns turns ago) neither its own calls nor its
 * descendants' turns have gone past tree_rhythm_factor times the longest such stretch
 * its tree has shown (at least tree_rhythm_min). A parent that stops spawning runs past
 * the first, a child that stops landing past the second: from there it is judged as any
 * session.
 */
function inRhythm(s: SessionState, k: NoProgressKnobs, turns: number): boolean {
  if (turns >= k.tree_grace_turns) return false;
  const own = s.calls - s.callsAtLand;
  if (own >= Math.max(k.tree_rhythm_min, k.tree_rhythm_factor * s.ownGapMax)) return false;
  const child = turns - (s.sawRequest ? s.requests - s.reqAtLand : own);
  return child < Math.max(k.tree_rhythm_min, k.tree_rhythm_factor * s.childGapMax);
}

export function tableSignals(s: SessionState): void {
  const buf = s.buf;
  const recent = s.calls - s.cap;
  let fail = 0;
  let rep = 0;
  // the latest call seq of a slot holding the maximum (the earliest when tied): the
  // maximum stands until that slot leaves the recent window
  let repSeq = 0;
  let failSeq = 0;
  for (let i = s.fpBase, end = i + FP_SLOTS * FP_W; i < end; i += FP_W) {
    const w = buf[i + 2];
    const seq = buf[i + 4];
    if ((w & U16) === 0 || seq <= recent) continue;
    const lb = (w & U16) - (w >>> 16);
    if (lb > rep || (lb === rep && seq < repSeq)) {
      rep = lb;
      repSeq = seq;
    }
    const streak = buf[i + 3] & U16;
    if (streak > fail || (streak === fail && seq < failSeq)) {
      fail = streak;
      failSeq = seq;
    }
  }
  if (s.readOnly) {
    // read-only agents: a failure streak on one target too (the same deleted file at other offsets)
    for (let i = s.tgBase, end = i + TG_SLOTS * TG_W; i < end; i += TG_W) {
      const seq = buf[i + 3];
      if ((buf[i + 1] & U16) === 0 || seq <= recent) continue;
      if (buf[i + 2] > fail || (buf[i + 2] === fail && seq < failSeq)) {
        fail = buf[i + 2];
        failSeq = seq;
      }
    }
  }
  sig.fail = fail;
  sig.rep = rep;
  s.failUB = fail;
  s.repUB = rep;
  // a zero maximum cannot fall; otherwise it stands while its slot is in the window
  const until = Math.min(rep > 0 ? repSeq + s.cap : TAB_NEVER, fail > 0 ? failSeq + s.cap : TAB_NEVER);
  s.tabExact = until;
}

/** tabExact when neither maximum can leave the window (both zero): exact until an update says otherwise. */
const TAB_NEVER = 0x3fffffff;

/**
 * The table signals and the window top, exact when they can decide the verdict (their
 * upper bounds reach a threshold) or when `full`; otherwise the bounds, all below.
 */
export function repeatSignals(s: SessionState, k: NoProgressKnobs, full: boolean): void {
  const topMin = s.readOnly ? k.top_ro_warn : k.top_warn;
  if (full || s.failUB >= k.fail_warn || s.repUB >= k.session_repeat_warn) {
    if (s.calls < s.tabExact) {
      sig.fail = s.failUB;
      sig.rep = s.repUB;
    } else tableSignals(s);
  } else {
    sig.fail = s.failUB;
    sig.rep = s.repUB;
  }
  if (s.topDirty && (full || s.winTop >= topMin)) recountTop(s);
  sig.top = s.winTop;
}

/**
 * The level for the current state; fills `sig` (and sig.rule with the deciding rule).
 * `full` computes every signal even when the verdict is decided early (for verdictOf).
 */
export function assess(s: SessionState, k: NoProgressKnobs, full: boolean): LevelCode {
  const turns = s.sawRequest ? s.reqSince : s.toolsSince;
  const usd = s.usdSince;
  sig.turns = turns;
  sig.usd = usd;
  sig.cont = s.contSince;
  sig.dup = s.len >= k.dup_min_events ? s.dups / s.len : 0;
  sig.rule = -1;
  sig.run = s.runLen;
  sig.land = s.calls - s.landSeq <= s.cap ? s.landRun : 0;
  sig.mono = s.monoRun;
  if (s.per2 >= 2 || s.per3 >= 3 || s.per4 >= 4) cycleSignal(s);
  else {
    sig.cycle = 0;
    sig.period = 0;
  }
  // An orchestrator whose tree keeps landing: its repeats are routine.
  sig.rhythm = s.treeLandings >= k.tree_min_landings && inRhythm(s, k, turns);
  const ceiling = turns >= k.ceiling_turns || usd >= k.ceiling_usd;
  const loopPre = turns >= k.loop_turns || usd >= k.loop_usd;
  const nw = Math.min(k.novelty_window, s.cap);
  sig.novel = s.readOnly && s.len >= nw ? s.novelRecent / nw : -1;
  // the run's tool is classified only once the run is long enough for any threshold
  const runs =
    sig.land >= k.landed_repeat_warn ||
    sig.cycle >= k.cycle_warn ||
    sig.mono >= k.monologue_warn ||
    (sig.run >= 2 &&
      sig.run >=
        (s.runRes ? Math.min(k.result_lookup_run_warn, k.result_run_warn) : Math.min(k.lookup_run_warn, k.run_warn)) &&
      sig.run >= runThreshold(s, k, false));

  if (!s.readOnly) {
    const stallPre = turns >= k.stall_turns || usd >= k.stall_usd;
    if (!stallPre && !ceiling && !runs && !full) {
      sig.fail = sig.rep = sig.top = 0;
      return LEVEL_OK;
    }
    repeatSignals(s, k, full);
    const rhythm = sig.rhythm;
    let r = runs ? runRule(s, k, true) : -1;
    if (r < 0 && loopPre) {
      r = repeatRule(rhythm, k.dup_loop, k.fail_loop, k.top_loop, k.session_repeat_loop, k.continuation_loop);
    }
    if (r >= 0) {
      sig.rule = r;
      return LEVEL_LOOPING;
    }
    r = runs ? runRule(s, k, false) : -1;
    if (r < 0 && stallPre) {
      r = repeatRule(rhythm, k.dup_warn, k.fail_warn, k.top_warn, k.session_repeat_warn, k.continuation_warn);
    }
    if (r >= 0) {
      sig.rule = r;
      return LEVEL_STALLING;
    }
    if (ceiling) {
      sig.rule = R_CEIL;
      return LEVEL_STALLING;
    }
    return LEVEL_OK;
  }

  // Read-only agents never land by design: repeats of one target, a failure streak on
  // one target and low novelty are the signals; no landed-change precondition.
  repeatSignals(s, k, full);
  let lr = runs ? runRule(s, k, true) : -1;
  if (lr < 0 && loopPre) {
    lr =
      sig.fail >= k.fail_loop
        ? R_FAIL
        : sig.top >= k.top_ro_loop
          ? R_TOP
          : sig.rep >= k.session_repeat_loop
            ? R_REP
            : -1;
  }
  if (lr >= 0) {
    sig.rule = lr;
    return LEVEL_LOOPING;
  }
  let r = runs ? runRule(s, k, false) : -1;
  if (r < 0) {
    r =
      sig.fail >= k.fail_warn
        ? R_FAIL
        : sig.top >= k.top_ro_warn
          ? R_TOP
          : sig.rep >= k.session_repeat_warn
            ? R_REP
            : sig.novel >= 0 && sig.novel < k.novelty_min
              ? R_NOVEL
              : -1;
  }
  if (r >= 0) {
    sig.rule = r;
    return LEVEL_STALLING;
  }
  if (ceiling) {
    sig.rule = R_CEIL;
    return LEVEL_STALLING;
  }
  return LEVEL_OK;
}

export function evaluate(s: SessionState, k: NoProgressKnobs): LevelCode {
  return assess(s, k, false);
}

/** The full verdict for the current state (allocates; call it on a change, not per event). */
export function verdictOf(s: SessionState, k: NoProgressKnobs): Verdict {
  const level = assess(s, k, true);
  const rule = sig.rule >= 0 ? RULES[sig.rule] : null;
  const top = s.winTop >= 2 ? label(s.topTool, s.topTarget) : null;
  const signals: VerdictSignals = {
    turns_since_landed: sig.turns,
    usd_since_landed: round(sig.usd, 6),
    prompt_tokens_since_landed: s.tokSince,
    dup_share: round(sig.dup, 4),
    fail_streak: sig.fail,
    context_tokens: s.contextTokens,
    top_target: top === null ? null : top.slice(0, 256),
    top_count: s.winTop,
    session_repeat: sig.rep,
    landed_repeat: sig.land,
    identical_run: sig.run,
    identical_results: s.runRes && sig.run > 0,
    cycle_repeats: sig.cycle,
    cycle_period: sig.period,
    monologue_run: sig.mono,
    tree_rhythm: sig.rhythm,
    continuation_turns: sig.cont,
    novelty: sig.novel >= 0 ? round(sig.novel, 4) : null,
    read_only: s.readOnly,
    calls: s.calls,
    landed: s.landed,
  };
  return { level: LEVELS[level], rule, reason: reasonOf(s, k, level, rule, signals), signals };
}
