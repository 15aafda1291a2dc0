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
  /** an orchestrator whose tree landed recently: its whole-session repeats are routine */
  tree: false,
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

/**
 * The rules that need no stall precondition: the evidence is the run itself. A write
 * landing over and over, or one call repeated with nothing between, is not work
 * whatever the counters since the last landed change say.
 */
function runRule(s: SessionState, k: NoProgressKnobs, loop: boolean): number {
  const lookup = isLookup(s.runTool ?? '');
  if (sig.run >= (lookup ? (loop ? k.lookup_run_loop : k.lookup_run_warn) : loop ? k.run_loop : k.run_warn)) {
    return R_RUN;
  }
  if (sig.land >= (loop ? k.landed_repeat_loop : k.landed_repeat_warn)) return R_LAND;
  return -1;
}

/** Scan the session tables: failure streak and repeat lower bound of calls still recurring. */
/**
 * The first repeat rule a writing agent's signals (in `sig`) reach at one level's
 * thresholds; the order is the rules' priority. `own`: its whole-session repeats count
 * (not an orchestrator whose tree keeps landing).
 */
function repeatRule(own: boolean, dup: number, fail: number, top: number, rep: number, cont: number): number {
  if (sig.dup >= dup) return R_DUP;
  if (sig.fail >= fail) return R_FAIL;
  if (sig.top >= top) return R_TOP;
  if (own && sig.rep >= rep) return R_REP;
  if (sig.cont >= cont) return R_CONT;
  return -1;
}

export function tableSignals(s: SessionState): void {
  const buf = s.buf;
  const recent = s.calls - s.cap;
  let fail = 0;
  let rep = 0;
  for (let i = s.fpBase, end = i + FP_SLOTS * FP_W; i < end; i += FP_W) {
    const w = buf[i + 2];
    if ((w & U16) === 0 || buf[i + 4] <= recent) continue;
    const lb = (w & U16) - (w >>> 16);
    if (lb > rep) rep = lb;
    if (buf[i + 3] > fail) fail = buf[i + 3];
  }
  if (s.readOnly) {
    // read-only agents: a failure streak on one target too (the same deleted file at other offsets)
    for (let i = s.tgBase, end = i + TG_SLOTS * TG_W; i < end; i += TG_W) {
      if ((buf[i + 1] & U16) === 0 || buf[i + 3] <= recent) continue;
      if (buf[i + 2] > fail) fail = buf[i + 2];
    }
  }
  sig.fail = fail;
  sig.rep = rep;
  s.failUB = fail;
  s.repUB = rep;
}

/**
 * The table signals and the window top, exact when they can decide the verdict (their
 * upper bounds reach a threshold) or when `full`; otherwise the bounds, all below.
 */
export function repeatSignals(s: SessionState, k: NoProgressKnobs, full: boolean): void {
  const topMin = s.readOnly ? k.top_ro_warn : k.top_warn;
  if (full || s.failUB >= k.fail_warn || s.repUB >= k.session_repeat_warn) tableSignals(s);
  else {
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
  // An orchestrator whose tree keeps landing: its session-long repeats are routine.
  sig.tree = s.treeLandings >= k.tree_min_landings && turns < k.tree_grace_turns;
  const ceiling = turns >= k.ceiling_turns || usd >= k.ceiling_usd;
  const loopPre = turns >= k.loop_turns || usd >= k.loop_usd;
  const nw = Math.min(k.novelty_window, s.cap);
  sig.novel = s.readOnly && s.len >= nw ? s.novelRecent / nw : -1;
  // the run's tool is classified only once the run is long enough for either threshold
  const runs =
    sig.land >= k.landed_repeat_warn ||
    ((sig.run >= k.lookup_run_warn || sig.run >= k.run_warn) &&
      sig.run >= (isLookup(s.runTool ?? '') ? k.lookup_run_warn : k.run_warn));

  if (!s.readOnly) {
    const stallPre = turns >= k.stall_turns || usd >= k.stall_usd;
    if (!stallPre && !ceiling && !runs && !full) {
      sig.fail = sig.rep = sig.top = 0;
      return LEVEL_OK;
    }
    repeatSignals(s, k, full);
    // the whole-session count is the one an orchestrator's routine inflates over hours
    const own = !sig.tree;
    let r = runs ? runRule(s, k, true) : -1;
    if (r < 0 && loopPre) {
      r = repeatRule(own, k.dup_loop, k.fail_loop, k.top_loop, k.session_repeat_loop, k.continuation_loop);
    }
    if (r >= 0) {
      sig.rule = r;
      return LEVEL_LOOPING;
    }
    r = runs ? runRule(s, k, false) : -1;
    if (r < 0 && stallPre) {
      r = repeatRule(own, k.dup_warn, k.fail_warn, k.top_warn, k.session_repeat_warn, k.continuation_warn);
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
    continuation_turns: sig.cont,
    novelty: sig.novel >= 0 ? round(sig.novel, 4) : null,
    read_only: s.readOnly,
    calls: s.calls,
    landed: s.landed,
  };
  return { level: LEVELS[level], rule, reason: reasonOf(s, k, level, rule, signals), signals };
}
