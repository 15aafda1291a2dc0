import type { ReplayInput } from '../../../core/replay.ts';
import type { VerdictLevel } from '../../../core/wire.ts';
import type { NoProgressKnobs } from '../knobs.ts';

// The no-progress judge: a pure function of (session state, input, knobs) -> (state,
// verdict). No I/O, no clock, no logger: the service, the watchdog and replay all run
// this code. The state is owned by the caller and updated IN PLACE (it is returned for
// convenience); copy it with decodeState(encodeState(s)) to keep an old one.
//
// Performance (bench/judge.ts): events arrive pre-fingerprinted, so an update costs a
// few scans over small typed arrays and no allocation. Per session state:
// - ring: the last `window` tool calls, 3 x uint32 each: the call's key (its
//   fingerprint's first 64 bits as hi, lo; lo mixed with the result fingerprint's first
//   word when the event carries one, so the window's repeats are of a call with its
//   result), target hash (28 bits) | flags (failed, novel, dup, old) << 28;
// - fingerprint table: 64 Space-Saving slots over the whole session (16 sets of 4 ways,
//   so a lookup scans 4 slots), keyed on the call alone, 6 x uint32 each: hi, lo, count |
//   overestimate << 16, failure streak | result tag << 16, last call seq, target hash. A
//   repeat counts when its result tag is the one the call had the time before (always,
//   without result fingerprints: the tag is 0). The lower bound count - overestimate
//   drives the whole-session repeat rule, so the sketch cannot cause a false positive;
// - target table: 16 Space-Saving slots (4 sets of 4 ways), 4 x uint32 each: target
//   hash, count | overestimate << 16, failure streak, last call seq. The `tool target`
//   names are kept (references to an event's strings, no copy) for targets seen twice.
// One Uint32Array holds all three: 628 words (2512 bytes) at window 60, plus 9 words
// (the window's top call, the current run of identical calls with its exit, the latest
// landed call, the monologue's text), and a Float64Array view of 6 doubles on the same
// buffer.
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
// A landed write (edit, write, patch) whose fingerprint equals the session's previous
// landed call, made within the window, is a REPEAT: a line-range edit that re-inserts
// the same block changes the file every time, so each looks landed. A repeat resets the
// counters since the last landed change neither here nor in the ancestors (landedNow is
// the effective flag the roll-up carries); a run of them is the landed_repeat rule.
// Edit fingerprints are keyed on the path alone, so a re-applied edit and a new edit of
// the same file look the same here; landed_repeat_warn sits above a long single-file
// edit streak for that reason. Shell landings (a commit, a test passing after failing)
// are never repeats: git refuses an empty commit and a test fix needs a failure first.
//
// An unbroken run of one call with one exit (runLen), and one result when the events
// carry result fingerprints (runRes), is the identical_run rule. With results, a poll
// whose output moves breaks the run, so the result_* thresholds are low. Without, a poll
// whose command and exit stay the same while its output changes looks identical too:
// lookups (read, grep, glob, list, todoread: their result only changes when the files
// do) get the lookup_run_* thresholds, every other call (bash, MCP tools, edits) the
// higher run_* ones, and a poll whose numbers or exit change breaks the run.
//
// A short cycle of calls (period 2 to 4) is three streaks (per2..per4): how many calls in
// a row equalled the call 2, 3, 4 before, ended by any landing. A monologue (monoRun) is
// the model steps in a row with one text fingerprint and no tool call.
//
// A session whose descendants have landed tree_min_landings times is an orchestrator,
// judged by its children's rate: while, since its tree last landed, its own calls and
// its descendants' turns stay within tree_rhythm_factor times the longest such stretch
// the tree has shown (at least tree_rhythm_min, at most tree_grace_turns turns), its
// routine repeats (duplicate share, top repeat, whole-session repeats) do not flag it.
// Over hours its routine (status checks, plan reads, todo writes, a log check after each
// child) is a quarter to a third of its calls. Failure streaks, identical runs, cycles,
// monologues, continuation turns and the ceiling still count; a parent that stops
// spawning, or a child that stops landing, leaves the rhythm and is judged as any session.
//
// compaction_done resets the window signals without erasing evidence: the calls made
// before it are marked OLD. After a compaction the agent legitimately re-reads what it
// lost, so a new call never counts as a duplicate of an OLD one, and the window's top
// repeat restarts; OLD calls keep their own duplicate flags until they age out. Turns
// and spend since the last landed change, continuation turns, failure streaks and the
// whole-session table stay: a compaction lands nothing, and a loop that survives it is
// still the same loop.
//
// A recovery is different: an acting mode aborted the session's tree and compacted its
// root with the incident report. rebase() (judge/recover.ts) then judges the session
// afresh from that point, so a loop that resumes is a new transition the mode escalates.

export const LEVEL_OK = 0;
export const LEVEL_STALLING = 1;
export const LEVEL_LOOPING = 2;
export type LevelCode = 0 | 1 | 2;
export const LEVELS: readonly VerdictLevel[] = ['ok', 'stalling', 'looping'];

export const RING_W = 3;
export const FP_SLOTS = 64;
export const FP_W = 6;
/** set-associative: 16 sets of 4 ways, so a lookup scans 4 slots, not 64 */
export const FP_WAYS = 4;
export const FP_SET_MASK = FP_SLOTS / FP_WAYS - 1;
export const TG_SLOTS = 16;
export const TG_W = 4;
export const TG_WAYS = 4;
export const TG_SET_MASK = TG_SLOTS / TG_WAYS - 1;
export const FLAG_FAIL = 1;
export const FLAG_NOVEL = 2;
/** repeated a call still in the window when it was made */
export const FLAG_DUP = 4;
/** made before the latest compaction: later calls do not count as its duplicates */
export const FLAG_OLD = 8;
export const HASH_MASK = 0x0fffffff;
export const NUM_N = 6;
/** Words after the tables: top call (hi, lo), run call (hi, lo, exit), last landed call (hi, lo), monologue text (hi, lo). */
export const EXTRA_W = 9;
export const U16 = 0xffff;

/** A child's contribution to its ancestors: requests and spend count, a landed change resets. */
export interface RollUp {
  landed: boolean;
  requests: number;
  tools: number;
  usd: number;
  tokens: number;
}

/** A recorded input (core/replay.ts: what the service, the watchdog and the readers hand over) or a child's roll-up. */
export type JudgeInput = ReplayInput | { type: 'rollup'; rollup: RollUp };

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
  /**
   * While calls < tabExact, repUB and failUB are not bounds but the exact table signals:
   * a scan sets it to the first call at which a slot holding either maximum can leave the
   * recent window, each update keeps the maxima exact, and one that may lower a maximum
   * (a streak ending, a slot replaced) resets it to 0 (unknown). A stalling session with
   * repeats then pays for the 64-slot scan about once a window, not on every call.
   */
  tabExact = 0;

  calls = 0;
  /** Effective landed events (repeats excluded). */
  landed = 0;
  /** Landed events that repeated the previous landed call (not progress). */
  landRepeats = 0;
  /** Landed events in the current run of one fingerprint (the first, effective one included). */
  landRun = 0;
  /** Call seq of the latest landed event. */
  landSeq = 0;
  /** Whether the latest progress event landed a change that counts (what the roll-up carries). */
  landedNow = false;
  /** Length of the current unbroken run of one call with one exit. */
  runLen = 0;
  /** The run's call ended with a null exit (aborted), kept apart from any exit code. */
  runNull = false;
  /** The run's calls carried result fingerprints: it is a run of one call with one result. */
  runRes = false;
  /**
   * Cycles: for period p = 2, 3, 4, how many calls in a row equalled the call p before
   * (same key, same failure flag), since the latest landing or compaction.
   */
  per2 = 0;
  per3 = 0;
  per4 = 0;
  /** Model steps in a row with one text and no tool call between, nothing landed (text: monoHi, monoLo). */
  monoRun = 0;
  /** Whether any event carried a result fingerprint (the session table then holds result tags). */
  sawResult = false;
  /**
   * An orchestrator's rhythm: the longest stretches between two effective landings of its
   * tree (the stretch before the first included), in its own tool calls and in its
   * descendants' turns; and its own calls and turns at the latest landing.
   */
  ownGapMax = 0;
  childGapMax = 0;
  callsAtLand = 0;
  reqAtLand = 0;
  /** Effective landed events rolled up from descendants. */
  treeLandings = 0;
  requests = 0;
  continuations = 0;
  compactions = 0;
  /** Recoveries this session was rebased at (rebase()). */
  recoveries = 0;
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
  /** tool, target of the current run's call (set once it repeats) and of the latest effective landed call. */
  runTool: string | undefined = undefined;
  runTarget: string | undefined = undefined;
  landTool: string | undefined = undefined;
  landTarget: string | undefined = undefined;
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
  /** index in buf of the EXTRA_W words after the tables */
  private readonly topAt: number;

  constructor(cap: number) {
    this.cap = cap;
    const words = cap * RING_W + FP_SLOTS * FP_W + TG_SLOTS * TG_W;
    // one allocation: the tables, EXTRA_W words, then NUM_N doubles (8-byte aligned)
    const numAt = Math.ceil(((words + EXTRA_W) * 4) / 8) * 8;
    const ab = new ArrayBuffer(numAt + NUM_N * 8);
    this.buf = new Uint32Array(ab, 0, words + EXTRA_W);
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
  /** Fingerprint and exit (as uint32) of the current run's call. */
  get runHi(): number {
    return this.buf[this.topAt + 2];
  }
  set runHi(v: number) {
    this.buf[this.topAt + 2] = v;
  }
  get runLo(): number {
    return this.buf[this.topAt + 3];
  }
  set runLo(v: number) {
    this.buf[this.topAt + 3] = v;
  }
  get runExit(): number {
    return this.buf[this.topAt + 4];
  }
  set runExit(v: number) {
    this.buf[this.topAt + 4] = v;
  }
  /** Text fingerprint (first 64 bits) of the current monologue. */
  get monoHi(): number {
    return this.buf[this.topAt + 7];
  }
  set monoHi(v: number) {
    this.buf[this.topAt + 7] = v;
  }
  get monoLo(): number {
    return this.buf[this.topAt + 8];
  }
  set monoLo(v: number) {
    this.buf[this.topAt + 8] = v;
  }
  /** Fingerprint of the latest landed call. */
  get landHi(): number {
    return this.buf[this.topAt + 5];
  }
  set landHi(v: number) {
    this.buf[this.topAt + 5] = v;
  }
  get landLo(): number {
    return this.buf[this.topAt + 6];
  }
  set landLo(v: number) {
    this.buf[this.topAt + 6] = v;
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
  /** When the latest recovery rebased this session (epoch ms, 0: never). */
  get recoveredAt(): number {
    return this.num[5];
  }
  set recoveredAt(v: number) {
    this.num[5] = v;
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

export function nameOf(s: SessionState, hash: number): [string, string] | undefined {
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

/** `tool target` (or the tool alone), printable ASCII. */
export function label(tool: string | undefined, target: string | undefined): string {
  if (tool === undefined) return '(unnamed target)';
  return target ? `${tool} ${target}` : tool;
}
