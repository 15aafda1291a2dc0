import type { ToolEvent } from '../../../core/wire.ts';
import type { NoProgressKnobs } from '../knobs.ts';
import {
  FLAG_DUP,
  FLAG_FAIL,
  FLAG_NOVEL,
  FLAG_OLD,
  FP_SET_MASK,
  FP_W,
  FP_WAYS,
  HASH_MASK,
  nameOf,
  RING_W,
  type SessionState,
  TG_SET_MASK,
  TG_SLOTS,
  TG_W,
  TG_WAYS,
  U16,
} from './state.ts';

// The rolling window and the session tables: the hot path of every tool call (no allocation).

export const readOnlySets = new WeakMap<NoProgressKnobs, Set<string>>();
export function setAgent(s: SessionState, agent: string, k: NoProgressKnobs): void {
  s.agent = agent;
  let set = readOnlySets.get(k);
  if (set === undefined) {
    set = new Set(k.read_only_agents.map((a) => a.toLowerCase()));
    readOnlySets.set(k, set);
  }
  s.readOnly = set.has(agent.toLowerCase());
  s.tabExact = 0; // the failure streaks that count depend on it
}

export function resetSinceLanded(s: SessionState): void {
  s.reqSince = 0;
  s.toolsSince = 0;
  s.usdSince = 0;
  s.tokSince = 0;
  s.contSince = 0;
}

/**
 * An effective landing of the session or of a descendant (before resetSinceLanded): the
 * stretch since the previous one is the tree's rhythm (its longest stretch so far, in
 * own calls and in descendants' turns), and cycles and monologues end.
 */
export function noteLanding(s: SessionState): void {
  const own = s.calls - s.callsAtLand;
  const ownTurns = s.sawRequest ? s.requests - s.reqAtLand : own;
  const child = (s.sawRequest ? s.reqSince : s.toolsSince) - ownTurns;
  if (own > s.ownGapMax) s.ownGapMax = own;
  if (child > s.childGapMax) s.childGapMax = child;
  s.callsAtLand = s.calls;
  s.reqAtLand = s.requests;
  s.per2 = 0;
  s.per3 = 0;
  s.per4 = 0;
  s.monoRun = 0;
}

/** A model step that only talked (its text fingerprint): the monologue run goes on or restarts. */
export function pushText(s: SessionState, textFp: string): void {
  const hi = hex8(textFp, 0);
  const lo = hex8(textFp, 8);
  if (s.monoRun > 0 && hi === s.monoHi && lo === s.monoLo) {
    if (s.monoRun < 0xffff) s.monoRun++;
  } else {
    s.monoRun = 1;
    s.monoHi = hi;
    s.monoLo = lo;
  }
}

/**
 * After a compaction: the calls in the window become OLD. They keep their own duplicate
 * flags until they age out, but a new call never counts as a duplicate of an OLD one
 * (the agent lost them with its context), and the top repeat restarts.
 */
export function compactWindow(s: SessionState): void {
  const buf = s.buf;
  for (let i = 0, n = s.len * RING_W; i < n; i += RING_W) buf[i + 2] = (buf[i + 2] | (FLAG_OLD << 28)) >>> 0;
  s.winTop = 0;
  s.winTopHi = 0;
  s.winTopLo = 0;
  s.topDirty = false;
  s.topTool = undefined;
  s.topTarget = undefined;
  // the agent lost its context: re-doing the call once is legitimate, so the run, the
  // cycles and the monologue restart
  s.runLen = 0;
  s.per2 = 0;
  s.per3 = 0;
  s.per4 = 0;
  s.monoRun = 0;
}

/**
 * Lookups: their result depends on the files only, so an unbroken repeat with nothing
 * between returns the same thing. Anything else may observe the world (a poll).
 */
export function isLookup(tool: string): boolean {
  switch (tool) {
    case 'read':
    case 'view':
    case 'grep':
    case 'glob':
    case 'list':
    case 'ls':
    case 'todoread':
      return true;
    default:
      return false;
  }
}

/** Shell landings (a commit, a test passing after failing) prove a new state by themselves. */
const isShell = (tool: string) => tool === 'bash' || tool === 'shell';

/** The first 8 hex chars at `at` as an unsigned 32-bit number (input validated upstream). */
export function hex8(h: string, at: number): number {
  let v = 0;
  for (let i = at; i < at + 8; i++) {
    const c = h.charCodeAt(i);
    v = (v << 4) | (c <= 57 ? c - 48 : (c | 32) - 87);
  }
  return v >>> 0;
}

/** FNV-1a over tool, NUL, target; 28 bits (the ring keeps 4 flag bits beside it). */
export function targetHash(tool: string, target: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < tool.length; i++) h = Math.imul(h ^ tool.charCodeAt(i), 0x01000193);
  h = Math.imul(h, 0x01000193);
  for (let i = 0; i < target.length; i++) h = Math.imul(h ^ target.charCodeAt(i), 0x01000193);
  return (h ^ (h >>> 28)) & HASH_MASK;
}

export function pushTool(s: SessionState, ev: ToolEvent, k: NoProgressKnobs): void {
  const buf = s.buf;
  const cap = s.cap;
  const fp = ev.fingerprint;
  const hi = hex8(fp, 0);
  const lo = hex8(fp, 8);
  // With a result fingerprint, the window, the runs and the cycles key on the call AND
  // its result (the call's low word mixed with the result's first word): the same call
  // with a changed result is not a repeat. The session table keys on the call (failure
  // streaks, names) and keeps a 16-bit tag of its latest result; landings key on the call.
  const res = ev.result_fingerprint;
  const rw = res === undefined ? 0 : hex8(res, 0);
  const klo = (lo ^ rw) >>> 0;
  const tag = res === undefined ? 0 : rw >>> 16;
  if (res !== undefined) s.sawResult = true;
  const th = targetHash(ev.tool, ev.target);
  const failed = ev.exit !== undefined && ev.exit !== null && ev.exit !== 0;
  const seq = ++s.calls;
  if (s.monoRun !== 0) s.monoRun = 0;

  // The call leaving the window (when full), then one pass over the ring for copies of
  // the new call made since the latest compaction.
  const full = s.len === cap;
  const ev0 = s.head * RING_W;
  if (full) {
    const f = buf[ev0 + 2] >>> 28;
    if (f & FLAG_DUP) s.dups--;
    // only a copy of the recorded top call can lower the top count
    if (!(f & FLAG_OLD) && buf[ev0] === s.winTopHi && buf[ev0 + 1] === s.winTopLo) s.topDirty = true;
    buf[ev0 + 2] = (buf[ev0 + 2] | (FLAG_OLD << 28)) >>> 0; // not a copy of the new call
  }
  let sameFp = 0;
  for (let i = 0, n = s.len * RING_W; i < n; i += RING_W) {
    if (buf[i] === hi && buf[i + 1] === klo && buf[i + 2] >>> 31 === 0) sameFp++;
  }
  if (sameFp > 0) s.dups++;

  // Whole-session fingerprint table (Space-Saving within the call's set).
  const fb = s.fpBase + (lo & FP_SET_MASK) * FP_WAYS * FP_W;
  let slot = -1;
  let minAt = fb;
  let minCount = 0x7fffffff;
  for (let i = fb, end = fb + FP_WAYS * FP_W; i < end; i += FP_W) {
    const c = buf[i + 2] & U16;
    if (c === 0) {
      if (minCount > 0) {
        minCount = 0;
        minAt = i;
      }
      continue;
    }
    if (buf[i] === hi && buf[i + 1] === lo) {
      slot = i;
      break;
    }
    if (c < minCount) {
      minCount = c;
      minAt = i;
    }
  }
  let novel = false;
  if (slot >= 0) {
    const w = buf[slot + 2];
    const c = w & U16;
    const w3 = buf[slot + 3];
    // a repeat of the call counts when its result is unchanged since its latest run
    // (without result fingerprints every tag is 0: every repeat counts)
    if (w3 >>> 16 === tag) buf[slot + 2] = (w & 0xffff0000) | (c < U16 ? c + 1 : c);
    const streak = failed ? Math.min((w3 & U16) + 1, U16) : 0;
    buf[slot + 3] = ((tag << 16) | streak) >>> 0;
    buf[slot + 4] = seq;
    buf[slot + 5] = th;
    const lb = (buf[slot + 2] & U16) - (w >>> 16);
    if (lb > s.repUB) s.repUB = lb;
    if (streak > s.failUB) s.failUB = streak;
    else if (streak === 0 && (w3 & U16) !== 0 && (w3 & U16) >= s.failUB) s.tabExact = 0; // the longest streak may have ended
  } else {
    novel = sameFp === 0;
    if (minCount > 0 && s.tabExact !== 0) {
      // the slot replaced may have held a maximum
      const w = buf[minAt + 2];
      const lb = (w & U16) - (w >>> 16);
      const streak = buf[minAt + 3] & U16;
      if ((lb > 0 && lb >= s.repUB) || (streak > 0 && streak >= s.failUB)) s.tabExact = 0;
    }
    buf[minAt] = hi;
    buf[minAt + 1] = lo;
    buf[minAt + 2] = (((minCount < U16 ? minCount : U16 - 1) << 16) | Math.min(minCount + 1, U16)) >>> 0;
    buf[minAt + 3] = ((tag << 16) | (failed ? 1 : 0)) >>> 0;
    buf[minAt + 4] = seq;
    buf[minAt + 5] = th;
    if (s.repUB < 1) s.repUB = 1;
    if (failed && s.failUB < 1) s.failUB = 1;
  }

  // Whole-session target table (Space-Saving within the set), with names for repeated targets.
  const tb = s.tgBase;
  const tset = tb + (th & TG_SET_MASK) * TG_WAYS * TG_W;
  let tslot = -1;
  let tminAt = tset;
  let tmin = 0x7fffffff;
  for (let i = tset, end = tset + TG_WAYS * TG_W; i < end; i += TG_W) {
    const c = buf[i + 1] & U16;
    if (c === 0) {
      if (tmin > 0) {
        tmin = 0;
        tminAt = i;
      }
      continue;
    }
    if (buf[i] === th) {
      tslot = i;
      break;
    }
    if (c < tmin) {
      tmin = c;
      tminAt = i;
    }
  }
  if (tslot >= 0) {
    const w = buf[tslot + 1];
    const c = w & U16;
    const was = buf[tslot + 2];
    buf[tslot + 1] = (w & 0xffff0000) | (c < U16 ? c + 1 : c);
    buf[tslot + 2] = failed ? was + 1 : 0;
    buf[tslot + 3] = seq;
    if (buf[tslot + 2] > s.failUB) {
      s.failUB = buf[tslot + 2];
      // target streaks count for read-only agents only: for others the bound is now above the exact value
      if (!s.readOnly) s.tabExact = 0;
    } else if (!failed && was !== 0 && was >= s.failUB && s.readOnly) s.tabExact = 0;
    const ni = ((tslot - tb) / TG_W) * 2;
    if (s.names === undefined) s.names = new Array(TG_SLOTS * 2).fill(undefined);
    if (s.names[ni] === undefined) {
      s.names[ni] = ev.tool;
      s.names[ni + 1] = ev.target;
    }
  } else {
    if (tmin > 0 && s.readOnly && buf[tminAt + 2] !== 0 && buf[tminAt + 2] >= s.failUB) s.tabExact = 0;
    buf[tminAt] = th;
    buf[tminAt + 1] = (((tmin < U16 ? tmin : U16 - 1) << 16) | Math.min(tmin + 1, U16)) >>> 0;
    buf[tminAt + 2] = failed ? 1 : 0;
    buf[tminAt + 3] = seq;
    if (s.names !== undefined) {
      const ni = ((tminAt - tb) / TG_W) * 2;
      s.names[ni] = undefined;
      s.names[ni + 1] = undefined;
    }
  }

  // Novelty over the last novelty_window calls: drop the flag of the call leaving it.
  const nw = Math.min(k.novelty_window, cap);
  if (s.len >= nw) {
    const leave = ((s.head - nw + cap) % cap) * RING_W;
    if ((buf[leave + 2] >>> 28) & FLAG_NOVEL) s.novelRecent--;
  }
  if (novel) s.novelRecent++;

  // Cycles: the new call against the ones 2, 3 and 4 calls back; a call with no copy in
  // the window (most calls) ends every streak without a look.
  if (sameFp > 0 && s.len >= 2) pushCycles(s, hi, klo, failed ? FLAG_FAIL : 0);
  else if ((s.per2 | s.per3 | s.per4) !== 0) {
    s.per2 = 0;
    s.per3 = 0;
    s.per4 = 0;
  }

  // Write the call into the ring.
  buf[ev0] = hi;
  buf[ev0 + 1] = klo;
  buf[ev0 + 2] =
    (th | (((failed ? FLAG_FAIL : 0) | (novel ? FLAG_NOVEL : 0) | (sameFp > 0 ? FLAG_DUP : 0)) << 28)) >>> 0;
  s.head = s.head + 1 === cap ? 0 : s.head + 1;
  if (!full) s.len++;

  // Window top call: exact unless an eviction may have lowered it (then recounted
  // lazily). A count that reaches the old top is the top again, exactly.
  const c = sameFp + 1;
  if (c >= s.winTop) {
    if (hi !== s.winTopHi || klo !== s.winTopLo || s.topTool === undefined) {
      s.topTool = ev.tool;
      s.topTarget = ev.target;
    }
    s.winTop = c;
    s.winTopHi = hi;
    s.winTopLo = klo;
    s.topDirty = false;
  }

  if (failed) {
    s.failTool = ev.tool;
    s.failTarget = ev.target;
  }

  // Unbroken run of one call with one exit, and one result when the event carries it
  // (without, "identical" is as far as the call and its exit show).
  const nullExit = ev.exit === null;
  const exit = (ev.exit ?? 0) >>> 0;
  if (s.runLen > 0 && hi === s.runHi && klo === s.runLo && exit === s.runExit && nullExit === s.runNull) {
    // named once it is a run (most calls start one; the run knobs are at least 2)
    if (++s.runLen === 2) {
      s.runTool = ev.tool;
      s.runTarget = ev.target;
    }
  } else {
    s.runLen = 1;
    s.runHi = hi;
    s.runLo = klo;
    s.runExit = exit;
    s.runNull = nullExit;
    s.runRes = res !== undefined;
  }

  s.toolsSince++;
  let effective = false;
  if (ev.landed) {
    // a cycle is of calls that change nothing: one that lands (a repeat landing too,
    // which the landed_repeat rule judges) ends it
    s.per2 = 0;
    s.per3 = 0;
    s.per4 = 0;
    // the previous landed call again, within the window: a repeat, not progress
    if (s.landRun > 0 && hi === s.landHi && lo === s.landLo && seq - s.landSeq <= cap && !isShell(ev.tool)) {
      s.landRun++;
      s.landRepeats++;
    } else {
      s.landRun = 1;
      s.landHi = hi;
      s.landLo = lo;
      s.landTool = ev.tool;
      s.landTarget = ev.target;
      s.landed++;
      noteLanding(s);
      resetSinceLanded(s);
      effective = true;
    }
    s.landSeq = seq;
  }
  s.landedNow = effective;
}

/**
 * The cycle streaks: whether the new call (key hi, klo; failure bit) equals the call 2,
 * 3 and 4 calls back (same key, same failure flag, both since the latest compaction).
 * Called before the new call is written into the ring (s.head is its slot).
 */
function pushCycles(s: SessionState, hi: number, klo: number, fbit: number): void {
  const buf = s.buf;
  // ring slots 2, 3, 4 back (no division: this runs per call)
  let at = s.head - 2;
  if (at < 0) at += s.cap;
  s.per2 = sameAt(buf, at, hi, klo, fbit) ? s.per2 + 1 : 0;
  if (s.len < 3) return;
  if (--at < 0) at += s.cap;
  s.per3 = sameAt(buf, at, hi, klo, fbit) ? s.per3 + 1 : 0;
  if (s.len < 4) return;
  if (--at < 0) at += s.cap;
  s.per4 = sameAt(buf, at, hi, klo, fbit) ? s.per4 + 1 : 0;
}

function sameAt(buf: Uint32Array, slot: number, hi: number, klo: number, fbit: number): boolean {
  const at = slot * RING_W;
  const f = buf[at + 2] >>> 28;
  return buf[at] === hi && buf[at + 1] === klo && (f & FLAG_OLD) === 0 && (f & FLAG_FAIL) === fbit;
}

export const scratch = new Float64Array(1024);

/**
 * Exact recount of the window's most repeated call: sort the fingerprints (hi * 2^21 +
 * the top 21 bits of lo, exact in a double: 53 of the 64 kept bits) and count runs.
 */
export function recountTop(s: SessionState): void {
  const n = s.len;
  const buf = s.buf;
  const all = n <= scratch.length ? scratch : new Float64Array(n);
  let m = 0;
  for (let i = 0; i < n; i++) {
    const at = i * RING_W;
    if (buf[at + 2] >>> 31 === 0) all[m++] = buf[at] * 2097152 + (buf[at + 1] >>> 11);
  }
  const t = all.subarray(0, m);
  t.sort();
  let best = 0;
  let bestKey = -1;
  let run = 0;
  for (let i = 0; i < m; i++) {
    run = i > 0 && t[i] === t[i - 1] ? run + 1 : 1;
    if (run > best) {
      best = run;
      bestKey = t[i];
    }
  }
  for (let i = 0; i < n; i++) {
    const at = i * RING_W;
    if (buf[at + 2] >>> 31 !== 0 || buf[at] * 2097152 + (buf[at + 1] >>> 11) !== bestKey) continue;
    if (buf[at] !== s.winTopHi || buf[at + 1] !== s.winTopLo) {
      const name = nameOf(s, buf[at + 2] & HASH_MASK);
      s.topTool = name?.[0];
      s.topTarget = name?.[1];
      s.winTopHi = buf[at];
      s.winTopLo = buf[at + 1];
    }
    break;
  }
  s.winTop = best;
  s.topDirty = false;
}
