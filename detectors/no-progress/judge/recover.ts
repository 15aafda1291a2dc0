import type { NoProgressKnobs } from '../knobs.ts';
import { evaluate } from './rules.ts';
import { FP_SLOTS, FP_W, type LevelCode, type SessionState, TG_SLOTS, TG_W, U16 } from './state.ts';
import { resetSinceLanded } from './window.ts';

// A recovery (auto_recover aborted the tree and compacted its root with the incident
// report) is the point the session is judged afresh from. Without it a loop that
// resumes after the recovery never leaves `looping`, so no transition fires and the
// mode never escalates.

/**
 * Judges the session afresh from a recovery at `at` (epoch ms): the level goes back to
 * what the state says once every loop counter restarts (ok), so a renewed loop is a new
 * transition. Restarted: the window (duplicates, top repeat, novelty), failure streaks,
 * identical and landing runs, turns/spend/continuations since the last landed change,
 * and the whole-session repeat counts the rule reads. Kept: totals (calls, landed,
 * requests, compactions), the tree's landings, the context size, and the whole-session
 * table's slots and names.
 *
 * Cycles and the monologue restart with the runs; an orchestrator's rhythm (the longest
 * stretches its tree has shown) is kept.
 *
 * Why the whole-session counts restart: after a recovery the agent re-reads what it
 * lost, often the very call it looped on. Kept counts would then re-flag a recovered
 * session as soon as its turn precondition returns (the calibration case "recovered,
 * then a long exploration"), and each false flag costs a stage; a resumed loop is
 * still caught by the window rules within about loop_turns turns (the case "the loop
 * resumes after a recovery"). The mode remembers that it is the same loop: its stage.
 */
export function rebase(s: SessionState, k: NoProgressKnobs, at: number): LevelCode {
  // the window: empty, as after a fresh start
  s.len = 0;
  s.head = 0;
  s.dups = 0;
  s.novelRecent = 0;
  s.winTop = 0;
  s.winTopHi = 0;
  s.winTopLo = 0;
  s.topDirty = false;
  s.topTool = undefined;
  s.topTarget = undefined;
  // whole-session table: each count becomes its own overestimate (lower bound 0), so
  // only repeats after the recovery count; failure streaks end
  const buf = s.buf;
  for (let i = s.fpBase, end = i + FP_SLOTS * FP_W; i < end; i += FP_W) {
    const c = buf[i + 2] & U16;
    if (c === 0) continue;
    buf[i + 2] = ((c << 16) | c) >>> 0;
    buf[i + 3] &= 0xffff0000; // the streak ends, the result tag stays
  }
  for (let i = s.tgBase, end = i + TG_SLOTS * TG_W; i < end; i += TG_W) buf[i + 2] = 0;
  s.repUB = 0;
  s.failUB = 0;
  s.tabExact = 0;
  // runs
  s.runLen = 0;
  s.runNull = false;
  s.runTool = undefined;
  s.runTarget = undefined;
  s.runRes = false;
  s.landRun = 0;
  s.landedNow = false;
  s.per2 = 0;
  s.per3 = 0;
  s.per4 = 0;
  s.monoRun = 0;
  resetSinceLanded(s);
  // the stretch since the latest landing restarts too (the tree's rhythm is kept)
  s.callsAtLand = s.calls;
  s.reqAtLand = s.requests;
  s.recoveries++;
  if (at > s.recoveredAt) s.recoveredAt = at;
  s.level = evaluate(s, k);
  return s.level;
}
