import type {
  ProgressEvent,
  RequestRecord,
  ToolEvent,
  Verdict,
  VerdictLevel,
  VerdictRule,
  VerdictSignals,
} from '../../core/events/schema.ts';
import type { NoProgressKnobs } from './knobs.ts';

// The no-progress judge: a pure function of (session state, input, knobs) -> (state,
// verdict). No I/O, no clock, no logger: the service, the watchdog and replay all run
// this code. The state is owned by the caller and updated IN PLACE (it is returned for
// convenience); copy it with decodeState(encodeState(s)) to keep an old one.
//
// Performance (bench/judge.ts): events arrive pre-fingerprinted, so an update costs a
// few scans over small typed arrays and no allocation. Per session state:
// - ring: the last `window` tool calls, 3 x uint32 each: fingerprint (its first 64
//   bits as hi, lo), target hash (28 bits) | flags (failed, novel, dup, old) << 28;
// - fingerprint table: 64 Space-Saving slots over the whole session (16 sets of 4 ways,
//   so a lookup scans 4 slots), 6 x uint32 each: hi, lo, count | overestimate << 16,
//   failure streak, last call seq, target hash. The lower bound count - overestimate
//   drives the whole-session repeat rule, so the sketch cannot cause a false positive;
// - target table: 16 Space-Saving slots (4 sets of 4 ways), 4 x uint32 each: target
//   hash, count | overestimate << 16, failure streak, last call seq. The `tool target`
//   names are kept (references to an event's strings, no copy) for targets seen twice.
// One Uint32Array holds all three: 628 words (2512 bytes) at window 60, plus 2 words
// for the window's top call, and a Float64Array view of 5 doubles on the same buffer.
//
// "Repeats" are exact repeats of a normalised call (one fingerprint): the window's top
// repeat and the whole-session repeat. Targets are coarse (`git log` covers every file's
// log), so they only name things, and carry the read-only failure streak (the same
// deleted file read at several offsets).
//
// turns_since_landed counts LLM requests since the last landed event, self plus
// children (roll-up). A session that has never seen a request record (plugin-only, no
// router) falls back to counting tool calls, self plus children.
//
// dup_share is the share of calls in the window that repeated a call still in the
// window when they were made (a flag per ring slot, so leaving the window costs O(1)).
//
// compaction_done resets the window signals without erasing evidence: the calls made
// before it are marked OLD. After a compaction the agent legitimately re-reads what it
// lost, so a new call never counts as a duplicate of an OLD one, and the window's top
// repeat restarts; OLD calls keep their own duplicate flags until they age out. Turns
// and spend since the last landed change, continuation turns, failure streaks and the
// whole-session table stay: a compaction lands nothing, and a loop that survives it is
// still the same loop.

export const LEVEL_OK = 0;
export const LEVEL_STALLING = 1;
export const LEVEL_LOOPING = 2;
export type LevelCode = 0 | 1 | 2;
export const LEVELS: readonly VerdictLevel[] = ['ok', 'stalling', 'looping'];

const RING_W = 3;
const FP_SLOTS = 64;
const FP_W = 6;
/** set-associative: 16 sets of 4 ways, so a lookup scans 4 slots, not 64 */
const FP_WAYS = 4;
const FP_SET_MASK = FP_SLOTS / FP_WAYS - 1;
const TG_SLOTS = 16;
const TG_W = 4;
const TG_WAYS = 4;
const TG_SET_MASK = TG_SLOTS / TG_WAYS - 1;
const FLAG_FAIL = 1;
const FLAG_NOVEL = 2;
/** repeated a call still in the window when it was made */
const FLAG_DUP = 4;
/** made before the latest compaction: later calls do not count as its duplicates */
const FLAG_OLD = 8;
const HASH_MASK = 0x0fffffff;
const NUM_N = 5;
const U16 = 0xffff;

/** A child's contribution to its ancestors: requests and spend count, a landed change resets. */
export interface RollUp {
  landed: boolean;
  requests: number;
  tools: number;
  usd: number;
  tokens: number;
}

export type JudgeInput =
  | { type: 'progress'; event: ProgressEvent }
  | { type: 'request'; record: RequestRecord }
  | { type: 'rollup'; rollup: RollUp };

export class SessionState {
  /** Window capacity, fixed at creation (knobs.window then). */
  readonly cap: number;
  /** ring | fingerprint table | target table, see the header. */
  readonly buf: Uint32Array;
  /** Next ring slot to write; when the ring is full, also the oldest. */
  head = 0;
  len = 0;
  /** Calls in the ring flagged as duplicates. */
  dups = 0;
  /** Count of the most repeated call (fingerprint) in the ring: an upper bound, exact unless topDirty. */
  winTop = 0;
  topDirty = false;
  /** Novel calls among the last novelty_window calls. */
  novelRecent = 0;
  /**
   * Upper bounds of the whole-session repeat and of the failure streak (max ever set by
   * an update, tightened by each table scan): while below their thresholds the judge
   * skips the table scan, so healthy sessions never pay for it.
   */
  repUB = 0;
  failUB = 0;

  calls = 0;
  landed = 0;
  requests = 0;
  continuations = 0;
  compactions = 0;
  reqSince = 0;
  toolsSince = 0;
  contSince = 0;
  contextTokens = 0;
  sawRequest = false;
  readOnly = false;
  level: LevelCode = 0;

  agent: string | undefined = undefined;
  parent: string | undefined = undefined;
  /** tool, target of the window's most repeated call (references to an event's strings). */
  topTool: string | undefined = undefined;
  topTarget: string | undefined = undefined;
  /** tool, target of the latest failed call. */
  failTool: string | undefined = undefined;
  failTarget: string | undefined = undefined;
  /** 2 per target-table slot (tool, target), allocated when a target first repeats. */
  names: (string | undefined)[] | undefined = undefined;

  /**
   * Numbers that outgrow a small integer (uint32 fingerprint words, dollars, epoch ms)
   * live in typed arrays, not in fields: a field that starts as a small integer and later
   * holds a double changes its representation, which deprecates the object's hidden
   * class and makes every judge call site polymorphic.
   */
  readonly num: Float64Array;
  /** index in buf of the 2 words after the tables: the window's top call (hi, lo) */
  private readonly topAt: number;

  constructor(cap: number) {
    this.cap = cap;
    const words = cap * RING_W + FP_SLOTS * FP_W + TG_SLOTS * TG_W;
    // one allocation: the tables, 2 words for the top call, then 5 doubles (8-byte aligned)
    const numAt = Math.ceil(((words + 2) * 4) / 8) * 8;
    const ab = new ArrayBuffer(numAt + NUM_N * 8);
    this.buf = new Uint32Array(ab, 0, words + 2);
    this.topAt = words;
    this.num = new Float64Array(ab, numAt, NUM_N);
  }

  /** Fingerprint of the window's most repeated call (hi, lo words). */
  get winTopHi(): number {
    return this.buf[this.topAt];
  }
  set winTopHi(v: number) {
    this.buf[this.topAt] = v;
  }
  get winTopLo(): number {
    return this.buf[this.topAt + 1];
  }
  set winTopLo(v: number) {
    this.buf[this.topAt + 1] = v;
  }
  /** Dollars billed since the last landed change (self plus children). */
  get usdSince(): number {
    return this.num[0];
  }
  set usdSince(v: number) {
    this.num[0] = v;
  }
  /** Prompt tokens since the last landed change (self plus children). */
  get tokSince(): number {
    return this.num[1];
  }
  set tokSince(v: number) {
    this.num[1] = v;
  }
  get usdTotal(): number {
    return this.num[2];
  }
  set usdTotal(v: number) {
    this.num[2] = v;
  }
  /** Latest input time seen (epoch ms). */
  get lastTs(): number {
    return this.num[3];
  }
  set lastTs(v: number) {
    this.num[3] = v;
  }
  /** Tracker bookkeeping: update stamp for least-recently-updated eviction. */
  get touched(): number {
    return this.num[4];
  }
  set touched(v: number) {
    this.num[4] = v;
  }

  get fpBase(): number {
    return this.cap * RING_W;
  }
  get tgBase(): number {
    return this.cap * RING_W + FP_SLOTS * FP_W;
  }
}

export function newSessionState(k: NoProgressKnobs): SessionState {
  return new SessionState(k.window);
}

// ---------------------------------------------------------------------------
// updates (hot path: no allocation)

/** Pure judge step: applies one input and returns the state (same object) and the verdict. */
export function judge(
  s: SessionState,
  input: JudgeInput,
  k: NoProgressKnobs,
): { state: SessionState; verdict: Verdict } {
  if (input.type === 'progress') onProgress(s, input.event, k);
  else if (input.type === 'request') onRequest(s, input.record, k);
  else onRollup(s, input.rollup, k);
  return { state: s, verdict: verdictOf(s, k) };
}

/** Applies a progress event; returns the new level. */
export function onProgress(s: SessionState, ev: ProgressEvent, k: NoProgressKnobs): LevelCode {
  if (s.agent === undefined && ev.agent !== undefined) setAgent(s, ev.agent, k);
  if (s.parent === undefined && ev.parent_session_id) s.parent = ev.parent_session_id;
  if (ev.ts > s.lastTs) s.lastTs = ev.ts;
  if (ev.kind === 'tool') pushTool(s, ev, k);
  else if (ev.kind === 'continuation') {
    s.continuations++;
    s.contSince++;
  } else {
    s.compactions++;
    compactWindow(s);
  }
  s.level = evaluate(s, k);
  return s.level;
}

/** Applies a request record; returns the new level. */
export function onRequest(s: SessionState, r: RequestRecord, k: NoProgressKnobs): LevelCode {
  if (s.agent === undefined && r.agent !== undefined) setAgent(s, r.agent, k);
  if (s.parent === undefined && r.parent_session_id) s.parent = r.parent_session_id;
  if (r.ts > s.lastTs) s.lastTs = r.ts;
  const usd = r.cost_usd ?? 0;
  s.requests++;
  s.sawRequest = true;
  s.reqSince++;
  s.usdSince += usd;
  s.usdTotal += usd;
  s.tokSince += r.prompt_tokens;
  s.contextTokens = r.prompt_tokens;
  s.level = evaluate(s, k);
  return s.level;
}

/** Applies a child's roll-up to an ancestor; returns the new level. */
export function onRollup(s: SessionState, r: RollUp, k: NoProgressKnobs): LevelCode {
  if (r.requests > 0) s.sawRequest = true;
  s.reqSince += r.requests;
  s.toolsSince += r.tools;
  s.usdSince += r.usd;
  s.tokSince += r.tokens;
  if (r.landed) resetSinceLanded(s);
  s.level = evaluate(s, k);
  return s.level;
}

/** What a session's input contributes to each of its ancestors (null: nothing). */
export function rollUpOf(input: JudgeInput): RollUp | null {
  if (input.type === 'rollup') return input.rollup;
  if (input.type === 'request') {
    const r = input.record;
    return { landed: false, requests: 1, tools: 0, usd: r.cost_usd ?? 0, tokens: r.prompt_tokens };
  }
  const e = input.event;
  if (e.kind !== 'tool') return null;
  return { landed: e.landed, requests: 0, tools: 1, usd: 0, tokens: 0 };
}

/** The ancestors of a session, nearest first; stops at a cycle or after maxDepth. */
export function ancestorsOf(id: string, parentOf: (id: string) => string | undefined, maxDepth = 16): string[] {
  const out: string[] = [];
  let cur = parentOf(id);
  while (cur !== undefined && out.length < maxDepth && cur !== id && !out.includes(cur)) {
    out.push(cur);
    cur = parentOf(cur);
  }
  return out;
}

const readOnlySets = new WeakMap<NoProgressKnobs, Set<string>>();
function setAgent(s: SessionState, agent: string, k: NoProgressKnobs): void {
  s.agent = agent;
  let set = readOnlySets.get(k);
  if (set === undefined) {
    set = new Set(k.read_only_agents.map((a) => a.toLowerCase()));
    readOnlySets.set(k, set);
  }
  s.readOnly = set.has(agent.toLowerCase());
}

function resetSinceLanded(s: SessionState): void {
  s.reqSince = 0;
  s.toolsSince = 0;
  s.usdSince = 0;
  s.tokSince = 0;
  s.contSince = 0;
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
}

/** The first 8 hex chars at `at` as an unsigned 32-bit number (input validated upstream). */
function hex8(h: string, at: number): number {
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

function pushTool(s: SessionState, ev: ToolEvent, k: NoProgressKnobs): void {
  const buf = s.buf;
  const cap = s.cap;
  const fp = ev.fingerprint;
  const hi = hex8(fp, 0);
  const lo = hex8(fp, 8);
  const th = targetHash(ev.tool, ev.target);
  const failed = ev.exit !== undefined && ev.exit !== null && ev.exit !== 0;
  const seq = ++s.calls;

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
    if (buf[i] === hi && buf[i + 1] === lo && buf[i + 2] >>> 31 === 0) sameFp++;
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
    buf[slot + 2] = (w & 0xffff0000) | (c < U16 ? c + 1 : c);
    buf[slot + 3] = failed ? buf[slot + 3] + 1 : 0;
    buf[slot + 4] = seq;
    buf[slot + 5] = th;
    const lb = (buf[slot + 2] & U16) - (w >>> 16);
    if (lb > s.repUB) s.repUB = lb;
    if (buf[slot + 3] > s.failUB) s.failUB = buf[slot + 3];
  } else {
    novel = sameFp === 0;
    buf[minAt] = hi;
    buf[minAt + 1] = lo;
    buf[minAt + 2] = (((minCount < U16 ? minCount : U16 - 1) << 16) | Math.min(minCount + 1, U16)) >>> 0;
    buf[minAt + 3] = failed ? 1 : 0;
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
    buf[tslot + 1] = (w & 0xffff0000) | (c < U16 ? c + 1 : c);
    buf[tslot + 2] = failed ? buf[tslot + 2] + 1 : 0;
    buf[tslot + 3] = seq;
    if (buf[tslot + 2] > s.failUB) s.failUB = buf[tslot + 2];
    const ni = ((tslot - tb) / TG_W) * 2;
    if (s.names === undefined) s.names = new Array(TG_SLOTS * 2).fill(undefined);
    if (s.names[ni] === undefined) {
      s.names[ni] = ev.tool;
      s.names[ni + 1] = ev.target;
    }
  } else {
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

  // Write the call into the ring.
  buf[ev0] = hi;
  buf[ev0 + 1] = lo;
  buf[ev0 + 2] =
    (th | (((failed ? FLAG_FAIL : 0) | (novel ? FLAG_NOVEL : 0) | (sameFp > 0 ? FLAG_DUP : 0)) << 28)) >>> 0;
  s.head = s.head + 1 === cap ? 0 : s.head + 1;
  if (!full) s.len++;

  // Window top call: exact unless an eviction may have lowered it (then recounted
  // lazily). A count that reaches the old top is the top again, exactly.
  const c = sameFp + 1;
  if (c >= s.winTop) {
    if (hi !== s.winTopHi || lo !== s.winTopLo || s.topTool === undefined) {
      s.topTool = ev.tool;
      s.topTarget = ev.target;
    }
    s.winTop = c;
    s.winTopHi = hi;
    s.winTopLo = lo;
    s.topDirty = false;
  }

  if (failed) {
    s.failTool = ev.tool;
    s.failTarget = ev.target;
  }
  s.toolsSince++;
  if (ev.landed) {
    s.landed++;
    resetSinceLanded(s);
  }
}

const scratch = new Float64Array(1024);

/**
 * Exact recount of the window's most repeated call: sort the fingerprints (hi * 2^21 +
 * the top 21 bits of lo, exact in a double: 53 of the 64 kept bits) and count runs.
 */
function recountTop(s: SessionState): void {
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

function nameOf(s: SessionState, hash: number): [string, string] | undefined {
  if (s.names === undefined) return undefined;
  const tb = s.tgBase;
  for (let i = 0; i < TG_SLOTS; i++) {
    const at = tb + i * TG_W;
    if ((s.buf[at + 1] & U16) !== 0 && s.buf[at] === hash) {
      const tool = s.names[i * 2];
      return tool === undefined ? undefined : [tool, s.names[i * 2 + 1] ?? ''];
    }
  }
  return undefined;
}

// ---------------------------------------------------------------------------
// verdicts

// Module scratch for the signals of the latest assessment: the hot path fills it
// without allocating; verdictOf copies it out.
const sig = {
  turns: 0,
  usd: 0,
  dup: 0,
  fail: 0,
  top: 0,
  rep: 0,
  cont: 0,
  novel: -1,
  rule: -1,
};
const RULES: readonly VerdictRule[] = [
  'duplicates',
  'fail_streak',
  'top_repeat',
  'session_repeat',
  'continuation',
  'novelty',
  'ceiling',
];
const R_DUP = 0;
const R_FAIL = 1;
const R_TOP = 2;
const R_REP = 3;
const R_CONT = 4;
const R_NOVEL = 5;
const R_CEIL = 6;

/** Scan the session tables: failure streak and repeat lower bound of calls still recurring. */
function tableSignals(s: SessionState): void {
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
function repeatSignals(s: SessionState, k: NoProgressKnobs, full: boolean): void {
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
function assess(s: SessionState, k: NoProgressKnobs, full: boolean): LevelCode {
  const turns = s.sawRequest ? s.reqSince : s.toolsSince;
  const usd = s.usdSince;
  sig.turns = turns;
  sig.usd = usd;
  sig.cont = s.contSince;
  sig.dup = s.len >= k.dup_min_events ? s.dups / s.len : 0;
  sig.rule = -1;
  const ceiling = turns >= k.ceiling_turns || usd >= k.ceiling_usd;
  const loopPre = turns >= k.loop_turns || usd >= k.loop_usd;
  const nw = Math.min(k.novelty_window, s.cap);
  sig.novel = s.readOnly && s.len >= nw ? s.novelRecent / nw : -1;

  if (!s.readOnly) {
    const stallPre = turns >= k.stall_turns || usd >= k.stall_usd;
    if (!stallPre && !ceiling && !full) {
      sig.fail = sig.rep = sig.top = 0;
      return LEVEL_OK;
    }
    repeatSignals(s, k, full);
    if (loopPre) {
      const r =
        sig.dup >= k.dup_loop
          ? R_DUP
          : sig.fail >= k.fail_loop
            ? R_FAIL
            : sig.top >= k.top_loop
              ? R_TOP
              : sig.rep >= k.session_repeat_loop
                ? R_REP
                : sig.cont >= k.continuation_loop
                  ? R_CONT
                  : -1;
      if (r >= 0) {
        sig.rule = r;
        return LEVEL_LOOPING;
      }
    }
    if (stallPre) {
      const r =
        sig.dup >= k.dup_warn
          ? R_DUP
          : sig.fail >= k.fail_warn
            ? R_FAIL
            : sig.top >= k.top_warn
              ? R_TOP
              : sig.rep >= k.session_repeat_warn
                ? R_REP
                : sig.cont >= k.continuation_warn
                  ? R_CONT
                  : -1;
      if (r >= 0) {
        sig.rule = r;
        return LEVEL_STALLING;
      }
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
  if (loopPre) {
    const r =
      sig.fail >= k.fail_loop
        ? R_FAIL
        : sig.top >= k.top_ro_loop
          ? R_TOP
          : sig.rep >= k.session_repeat_loop
            ? R_REP
            : -1;
    if (r >= 0) {
      sig.rule = r;
      return LEVEL_LOOPING;
    }
  }
  const r =
    sig.fail >= k.fail_warn
      ? R_FAIL
      : sig.top >= k.top_ro_warn
        ? R_TOP
        : sig.rep >= k.session_repeat_warn
          ? R_REP
          : sig.novel >= 0 && sig.novel < k.novelty_min
            ? R_NOVEL
            : -1;
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

function evaluate(s: SessionState, k: NoProgressKnobs): LevelCode {
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
    continuation_turns: sig.cont,
    novelty: sig.novel >= 0 ? round(sig.novel, 4) : null,
    read_only: s.readOnly,
    calls: s.calls,
    landed: s.landed,
  };
  return { level: LEVELS[level], rule, reason: reasonOf(s, k, level, rule, signals), signals };
}

/** `tool target` (or the tool alone), printable ASCII. */
export function label(tool: string | undefined, target: string | undefined): string {
  if (tool === undefined) return '(unnamed target)';
  return target ? `${tool} ${target}` : tool;
}

const round = (x: number, d: number) => Math.round(x * 10 ** d) / 10 ** d;
const usdText = (x: number) => `$${x.toFixed(2)}`;
const short = (s: string) => (s.length > 80 ? `${s.slice(0, 38)}...${s.slice(-39)}` : s);

function reasonOf(
  s: SessionState,
  k: NoProgressKnobs,
  level: LevelCode,
  rule: VerdictRule | null,
  g: VerdictSignals,
): string {
  const since = `${g.turns_since_landed} turns (${usdText(g.usd_since_landed)}) without a landed change`;
  if (level === LEVEL_OK) return s.landed > 0 || !s.readOnly ? `ok: ${since}` : `ok: read-only, ${g.calls} calls`;
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
    case 'novelty':
      what = `${Math.round((g.novelty ?? 0) * Math.min(k.novelty_window, s.cap))} new calls in the last ${Math.min(k.novelty_window, s.cap)}`;
      break;
    default:
      what = 'turn/spend ceiling reached';
  }
  const who = s.readOnly ? `read-only ${s.agent ?? 'agent'}, ${g.calls} calls` : since;
  return `${LEVELS[level]}: ${who}; ${what}`.replace(/[^\x20-\x7e]/g, '?').slice(0, 300);
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

// ---------------------------------------------------------------------------
// encode / decode (the Redis backend persists a session's state compactly)

const VERSION = 1;
const enc = new TextEncoder();
const dec = new TextDecoder();

/** A compact binary form: scalars, strings, the ring in order, used table slots only. */
export function encodeState(s: SessionState): Uint8Array {
  const strs = [s.agent, s.parent, s.topTool, s.topTarget, s.failTool, s.failTarget];
  const names = s.names;
  let size = 1 + 4 * 22 + 8 * 5 + 2;
  const strBytes = strs.map((x) => (x === undefined ? undefined : enc.encode(x)));
  for (const b of strBytes) size += 2 + (b?.length ?? 0);
  size += s.len * RING_W * 4;
  const fpUsed: number[] = [];
  for (let i = 0; i < FP_SLOTS; i++) if (s.buf[s.fpBase + i * FP_W + 2] & U16) fpUsed.push(i);
  const tgUsed: number[] = [];
  for (let i = 0; i < TG_SLOTS; i++) if (s.buf[s.tgBase + i * TG_W + 1] & U16) tgUsed.push(i);
  size += fpUsed.length * (1 + FP_W * 4) + tgUsed.length * (1 + TG_W * 4);
  const nameBytes = tgUsed.map((i) =>
    [names?.[i * 2], names?.[i * 2 + 1]].map((x) => (x === undefined ? undefined : enc.encode(x))),
  );
  for (const pair of nameBytes) for (const b of pair) size += 2 + (b?.length ?? 0);

  const out = new Uint8Array(size);
  const dv = new DataView(out.buffer);
  let o = 0;
  out[o++] = VERSION;
  const u32 = (v: number) => {
    dv.setUint32(o, v >>> 0);
    o += 4;
  };
  const f64 = (v: number) => {
    dv.setFloat64(o, v);
    o += 8;
  };
  const bytes = (b: Uint8Array | undefined) => {
    if (b === undefined) {
      dv.setUint16(o, 0xffff);
      o += 2;
      return;
    }
    dv.setUint16(o, b.length);
    o += 2;
    out.set(b, o);
    o += b.length;
  };
  const flags = (s.sawRequest ? 1 : 0) | (s.readOnly ? 2 : 0) | (s.topDirty ? 4 : 0) | (names ? 8 : 0);
  for (const v of [
    s.cap,
    s.len,
    s.dups,
    s.winTop,
    s.winTopHi,
    s.novelRecent,
    s.calls,
    s.landed,
    s.requests,
    s.continuations,
    s.compactions,
    s.reqSince,
    s.toolsSince,
    s.contSince,
    s.contextTokens,
    s.level,
    flags,
    fpUsed.length,
    tgUsed.length,
    s.touched,
    s.winTopLo,
    (Math.min(s.repUB, U16) << 16) | Math.min(s.failUB, U16),
  ])
    u32(v);
  for (const v of [s.usdSince, s.tokSince, s.usdTotal, s.lastTs, 0]) f64(v);
  dv.setUint16(o, 0);
  o += 2;
  for (const b of strBytes) bytes(b);
  // ring, oldest first
  const start = s.len === s.cap ? s.head : 0;
  for (let j = 0; j < s.len; j++) {
    const at = ((start + j) % s.cap) * RING_W;
    for (let w = 0; w < RING_W; w++) u32(s.buf[at + w]);
  }
  for (const i of fpUsed) {
    out[o++] = i;
    for (let w = 0; w < FP_W; w++) u32(s.buf[s.fpBase + i * FP_W + w]);
  }
  tgUsed.forEach((i, j) => {
    out[o++] = i;
    for (let w = 0; w < TG_W; w++) u32(s.buf[s.tgBase + i * TG_W + w]);
    bytes(nameBytes[j][0]);
    bytes(nameBytes[j][1]);
  });
  return out;
}

export function decodeState(bytes: Uint8Array): SessionState {
  const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let o = 0;
  if (bytes[o++] !== VERSION) throw new Error(`unknown judge state version ${bytes[0]}`);
  const u32 = () => {
    const v = dv.getUint32(o);
    o += 4;
    return v;
  };
  const f64 = () => {
    const v = dv.getFloat64(o);
    o += 8;
    return v;
  };
  const str = (): string | undefined => {
    const n = dv.getUint16(o);
    o += 2;
    if (n === 0xffff) return undefined;
    const v = dec.decode(bytes.subarray(o, o + n));
    o += n;
    return v;
  };
  const v = Array.from({ length: 22 }, u32);
  const s = new SessionState(v[0]);
  [, s.len, s.dups, s.winTop, s.winTopHi, s.novelRecent, s.calls, s.landed, s.requests] = v;
  s.winTopLo = v[20];
  s.repUB = v[21] >>> 16;
  s.failUB = v[21] & U16;
  [s.continuations, s.compactions, s.reqSince, s.toolsSince, s.contSince, s.contextTokens] = v.slice(9, 15);
  s.level = v[15] as LevelCode;
  const flags = v[16];
  const fpN = v[17];
  const tgN = v[18];
  s.touched = v[19];
  s.sawRequest = (flags & 1) !== 0;
  s.readOnly = (flags & 2) !== 0;
  s.topDirty = (flags & 4) !== 0;
  s.usdSince = f64();
  s.tokSince = f64();
  s.usdTotal = f64();
  s.lastTs = f64();
  f64();
  o += 2;
  s.agent = str();
  s.parent = str();
  s.topTool = str();
  s.topTarget = str();
  s.failTool = str();
  s.failTarget = str();
  for (let j = 0; j < s.len; j++) for (let w = 0; w < RING_W; w++) s.buf[j * RING_W + w] = u32();
  s.head = s.len === s.cap ? 0 : s.len;
  for (let j = 0; j < fpN; j++) {
    const i = bytes[o++];
    for (let w = 0; w < FP_W; w++) s.buf[s.fpBase + i * FP_W + w] = u32();
  }
  if (flags & 8) s.names = new Array(TG_SLOTS * 2).fill(undefined);
  for (let j = 0; j < tgN; j++) {
    const i = bytes[o++];
    for (let w = 0; w < TG_W; w++) s.buf[s.tgBase + i * TG_W + w] = u32();
    const tool = str();
    const target = str();
    if (s.names) {
      s.names[i * 2] = tool;
      s.names[i * 2 + 1] = target;
    }
  }
  return s;
}

// ---------------------------------------------------------------------------
// Tracker: the in-memory multi-session driver (replay, watchdog, bench)

export interface VerdictChange {
  session_id: string;
  from: VerdictLevel;
  to: VerdictLevel;
  verdict: Verdict;
}

const NO_CHANGES: readonly VerdictChange[] = Object.freeze([]);

/**
 * Holds one SessionState per session and the parent links, applies each input to its
 * session and rolls it up to every ancestor (applyRollUps, shared with the service),
 * and returns the verdict CHANGES (level transitions) it caused, nothing otherwise.
 */
export class Tracker {
  readonly states = new Map<string, SessionState>();
  private readonly parents = new Map<string, string>();
  private stamp = 0;
  private readonly rollup: RollUp = { landed: false, requests: 0, tools: 0, usd: 0, tokens: 0 };

  constructor(readonly knobs: NoProgressKnobs) {}

  get size(): number {
    return this.states.size;
  }

  parentOf = (id: string): string | undefined => this.parents.get(id);

  state(id: string): SessionState | undefined {
    return this.states.get(id);
  }

  verdict(id: string): Verdict | undefined {
    const s = this.states.get(id);
    return s === undefined ? undefined : verdictOf(s, this.knobs);
  }

  apply(input: JudgeInput): readonly VerdictChange[] {
    if (input.type === 'progress') return this.applyProgress(input.event);
    if (input.type === 'request') return this.applyRequest(input.record);
    return NO_CHANGES;
  }

  applyProgress(ev: ProgressEvent): readonly VerdictChange[] {
    const s = this.get(ev.session_id, ev.parent_session_id);
    const from = s.level;
    const to = onProgress(s, ev, this.knobs);
    let changes = from === to ? NO_CHANGES : [this.change(ev.session_id, s, from)];
    if (ev.kind === 'tool' && s.parent !== undefined && this.parents.has(ev.session_id)) {
      const r = this.rollup;
      r.landed = ev.landed;
      r.requests = 0;
      r.tools = 1;
      r.usd = 0;
      r.tokens = 0;
      changes = this.up(ev.session_id, r, changes);
    }
    return changes;
  }

  applyRequest(rec: RequestRecord): readonly VerdictChange[] {
    const s = this.get(rec.session_id, rec.parent_session_id);
    const from = s.level;
    const to = onRequest(s, rec, this.knobs);
    let changes = from === to ? NO_CHANGES : [this.change(rec.session_id, s, from)];
    if (s.parent !== undefined && this.parents.has(rec.session_id)) {
      const r = this.rollup;
      r.landed = false;
      r.requests = 1;
      r.tools = 0;
      r.usd = rec.cost_usd ?? 0;
      r.tokens = rec.prompt_tokens;
      changes = this.up(rec.session_id, r, changes);
    }
    return changes;
  }

  // Bound once: a closure per roll-up would cost a defineProperty under tsx (keepNames).
  private pending: VerdictChange[] | null = null;
  private readonly ancestorState = (id: string): SessionState => this.get(id, undefined);
  private readonly ancestorChanged = (id: string, s: SessionState, from: LevelCode): void => {
    this.pending ??= [];
    this.pending.push(this.change(id, s, from));
  };

  private up(id: string, r: RollUp, changes: readonly VerdictChange[]): readonly VerdictChange[] {
    this.pending = changes === NO_CHANGES ? null : (changes as VerdictChange[]);
    applyRollUps(id, r, this.parentOf, this.ancestorState, this.knobs, this.ancestorChanged);
    const out = this.pending ?? NO_CHANGES;
    this.pending = null;
    return out;
  }

  private change(id: string, s: SessionState, from: LevelCode): VerdictChange {
    const verdict = verdictOf(s, this.knobs);
    return { session_id: id, from: LEVELS[from], to: verdict.level, verdict };
  }

  private get(id: string, parent: string | null | undefined): SessionState {
    let s = this.states.get(id);
    if (s === undefined) {
      if (this.states.size >= this.knobs.max_sessions) this.evict();
      s = newSessionState(this.knobs);
      this.states.set(id, s);
    }
    s.touched = ++this.stamp;
    if (parent && !this.parents.has(id) && parent !== id && !ancestorsOf(parent, this.parentOf).includes(id)) {
      this.parents.set(id, parent);
    }
    return s;
  }

  /** Drop the least recently updated 1% (at least one) when full. */
  private evict(): void {
    const n = Math.max(1, Math.floor(this.knobs.max_sessions / 100));
    const stamps = [...this.states.values()].map((s) => s.touched).sort((a, b) => a - b);
    const cut = stamps[Math.min(n, stamps.length) - 1];
    for (const [id, s] of this.states) {
      if (s.touched <= cut) {
        this.states.delete(id);
        this.parents.delete(id);
      }
    }
  }
}

/**
 * Roll a child's contribution up to every ancestor: the one implementation the Tracker
 * and the service share. `stateOf` loads (or creates) an ancestor's state; `changed` is
 * called for each ancestor whose level moved. The service saves the states it touched.
 */
export function applyRollUps(
  id: string,
  r: RollUp,
  parentOf: (id: string) => string | undefined,
  stateOf: (id: string) => SessionState,
  k: NoProgressKnobs,
  changed?: (id: string, s: SessionState, from: LevelCode) => void,
): void {
  let cur = parentOf(id);
  for (let depth = 0; cur !== undefined && cur !== id && depth < 16; depth++) {
    const s = stateOf(cur);
    const from = s.level;
    if (onRollup(s, r, k) !== from) changed?.(cur, s, from);
    cur = parentOf(cur);
  }
}
