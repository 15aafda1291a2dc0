import type { VerdictLevel } from '../../core/wire.ts';

// The ledger's pure part: what is kept per session between inputs, how spend, a landed
// change, a flag and an action move it, and the compact record of a closed stretch.
// No I/O, no clock: money.detector.ts loads and saves, replays and tests call these.
//
// A stretch is the spend of one session from its start (the session's first counted
// input, its last landed change, or the end of its previous stretch) to the action or
// the session's end. It is flagged when a detector's verdict on the session leaves ok
// (info-level notes are not flags) and closes when:
//   acted      an acting mode acted on the session (refused, stopped, capped, compacted);
//   budget     a budget ceiling refused its tree;
//   recovered  the detector that flagged it says ok again, or the session landed a change;
//   ended      no input for `idle_close` (the session's end).
// Stretches never overlap: each close starts the next count from zero.
//
// Calls are model calls: request records, or a sensor's assistant events for a session
// no router reports (the same calls, counted once); a session that reports neither
// counts its tool calls. Tokens are prompt tokens (cached included). Dollars are what
// request records report (`cost_usd`); a sensor's events carry none.

export const OUTCOMES = ['acted', 'budget', 'recovered', 'ended'] as const;
export type Outcome = (typeof OUTCOMES)[number];

/** Calls, prompt tokens, dollars. */
export interface Spend {
  c: number;
  k: number;
  u: number;
}

/** The open flag of a session's current stretch. */
export interface Flag extends Spend {
  /** When it was flagged (the session's latest counted input then). */
  at: number;
  det: string;
  rule: string | null;
  lvl: 'stalling' | 'looping';
  /** The response mode when it was flagged. */
  mode: string;
  root: string;
  agent: string | null;
  /** The latest model of the stretch. */
  model: string | null;
}

/** What the ledger keeps per session between inputs (stored packed: encodeSpend). */
export interface SessionSpend extends Spend {
  /** Start of the current stretch (epoch ms). */
  t0: number;
  /** The latest counted input (epoch ms). */
  ts: number;
  /** The session reports request records: its assistant events are the same calls. */
  req?: 1;
  /** The session reports model calls: its tool calls are not counted as calls. */
  mc?: 1;
  /** The last landed call's fingerprint (8 hex): landing it again is no progress. */
  lf?: string;
  f?: Flag;
}

export function newSessionSpend(ts: number): SessionSpend {
  return { t0: ts, ts, c: 0, k: 0, u: 0 };
}

export interface SpendInput {
  /** 1 for a model call; tool calls count only for sessions with no model calls. */
  calls: number;
  tokens: number;
  usd: number;
  ts: number;
  model?: string;
  agent?: string;
  kind: 'request' | 'assistant' | 'tool';
}

const NOTHING: Spend = Object.freeze({ c: 0, k: 0, u: 0 });

/**
 * Adds one input's spend; returns what it added (nothing for an assistant event of a
 * session a router reports, or a tool call of a session that reports model calls).
 */
export function addSpend(s: SessionSpend, x: SpendInput): Spend {
  if (x.kind === 'request') {
    s.req = 1;
    s.mc = 1;
  } else if (x.kind === 'assistant') {
    if (s.req) return NOTHING;
    s.mc = 1;
  } else if (s.mc) {
    return NOTHING;
  }
  s.c += x.calls;
  s.k += x.tokens;
  s.u += x.usd;
  s.ts = Math.max(s.ts, x.ts);
  if (s.f && x.model) s.f.model = x.model;
  if (s.f && x.agent && !s.f.agent) s.f.agent = x.agent;
  return { c: x.calls, k: x.tokens, u: x.usd };
}

/**
 * A landed call: progress unless it lands the same call as the last one (a re-applied
 * edit). Returns whether it was progress (the stretch restarts from it; an open one
 * closes as recovered, by the caller).
 */
export function landed(s: SessionSpend, fingerprint: string, ts: number): boolean {
  const fp = fingerprint.slice(0, 8);
  const progress = s.lf !== fp;
  s.lf = fp;
  s.ts = Math.max(s.ts, ts);
  return progress;
}

/** Starts counting afresh at `at` (after a landed change or a close). */
export function restart(s: SessionSpend, at: number): void {
  s.t0 = at;
  s.c = 0;
  s.k = 0;
  s.u = 0;
  delete s.f;
}

/** Who a flagged stretch belongs to: its tree, its agent and model as the tree knows them. */
export interface Owner {
  root: string;
  agent?: string | null;
  model?: string | null;
}

/**
 * A detector flagged the session. Opens the stretch's flag (true), or raises an open
 * one to looping (false).
 */
export function flag(
  s: SessionSpend,
  det: string,
  rule: string | null,
  lvl: VerdictLevel,
  mode: string,
  who: Owner,
): boolean {
  const level = lvl === 'looping' ? 'looping' : 'stalling';
  if (s.f) {
    if (level === 'looping') s.f.lvl = 'looping';
    return false;
  }
  s.f = {
    at: Math.max(s.ts, s.t0),
    c: s.c,
    k: s.k,
    u: s.u,
    det,
    rule,
    lvl: level,
    mode,
    root: who.root,
    agent: who.agent ?? null,
    model: who.model ?? null,
  };
  return true;
}

// The stored form: a short array (field names would be most of it), about 60 bytes of
// JSON for a session no detector flags. Dollars to the nano-dollar: a float sum's last
// digits only cost bytes.
type PackedFlag = [
  number,
  number,
  number,
  number,
  string,
  string | null,
  0 | 1,
  string,
  string,
  string | null,
  string | null,
];
type PackedSpend = [number, number, number, number, number, number, string | 0, PackedFlag?];
const nano = (usd: number) => Math.round(usd * 1e9) / 1e9;

export function encodeSpend(s: SessionSpend): PackedSpend {
  const out: PackedSpend = [s.t0, s.ts, s.c, s.k, nano(s.u), (s.req ? 1 : 0) | (s.mc ? 2 : 0), s.lf ?? 0];
  const f = s.f;
  if (f) {
    out.push([f.at, f.c, f.k, nano(f.u), f.det, f.rule, f.lvl === 'looping' ? 1 : 0, f.mode, f.root, f.agent, f.model]);
  }
  return out;
}

export function decodeSpend(p: unknown): SessionSpend | undefined {
  if (!Array.isArray(p) || p.length < 7) return undefined;
  const [t0, ts, c, k, u, flags, lf, f] = p as PackedSpend;
  const s: SessionSpend = { t0, ts, c, k, u };
  if (flags & 1) s.req = 1;
  if (flags & 2) s.mc = 1;
  if (lf) s.lf = lf;
  if (Array.isArray(f)) {
    const [at, fc, fk, fu, det, rule, looping, mode, root, agent, model] = f;
    s.f = { at, c: fc, k: fk, u: fu, det, rule, lvl: looping ? 'looping' : 'stalling', mode, root, agent, model };
  }
  return s;
}

/** A stretch as the ledger reports it. Minutes are rounded to 0.1. */
export interface Stretch {
  session: string;
  root: string;
  agent: string | null;
  model: string | null;
  detector: string;
  rule: string | null;
  level: 'stalling' | 'looping';
  mode: string;
  /** `open` while it is not closed yet. */
  outcome: Outcome | 'open';
  start: number;
  flagged_at: number;
  /** When it closed: the action, the recovery, or the session's last input (null while open). */
  closed_at: number | null;
  /** Start to close (or to now while open). */
  calls: number;
  tokens: number;
  usd: number;
  minutes: number;
  to_flag: { calls: number; tokens: number; usd: number; minutes: number };
  /** Start to the action (null: nothing acted, the stretch ran to its end). */
  to_action: { calls: number; tokens: number; usd: number; minutes: number } | null;
}

const min = (ms: number) => Math.round(Math.max(0, ms) / 6_000) / 10;
const cents = (usd: number) => Math.round(usd * 1e6) / 1e6;

/** The stretch of a session's open flag, closed now (`outcome`) or still open. */
export function stretchOf(
  id: string,
  s: SessionSpend,
  outcome: Outcome | 'open',
  at: number | null,
): Stretch | undefined {
  const f = s.f;
  if (!f) return undefined;
  const end = at ?? s.ts;
  const acted = outcome === 'acted' || outcome === 'budget';
  const total = { calls: s.c, tokens: s.k, usd: cents(s.u), minutes: min(end - s.t0) };
  return {
    session: id,
    root: f.root,
    agent: f.agent,
    model: f.model,
    detector: f.det,
    rule: f.rule,
    level: f.lvl,
    mode: f.mode,
    outcome,
    start: s.t0,
    flagged_at: f.at,
    closed_at: at,
    ...total,
    to_flag: { calls: f.c, tokens: f.k, usd: cents(f.u), minutes: min(f.at - s.t0) },
    to_action: acted ? total : null,
  };
}

// A closed stretch is stored as a short array (about 200 bytes of JSON): field names
// would be most of it. Version first, so the layout can change.
type Packed = [
  1,
  string, // session
  string, // root
  string | null, // agent
  string | null, // model
  string, // detector
  string | null, // rule
  0 | 1, // looping
  string, // mode
  Outcome,
  number, // start (epoch ms)
  number, // flagged_at - start (s)
  number, // closed_at - flagged_at (s)
  number, // calls
  number, // tokens
  number, // usd
  number, // calls to flag
  number, // tokens to flag
  number, // usd to flag
];

export function pack(x: Stretch): Packed {
  return [
    1,
    x.session,
    x.root,
    x.agent,
    x.model,
    x.detector,
    x.rule,
    x.level === 'looping' ? 1 : 0,
    x.mode,
    x.outcome === 'open' ? 'ended' : x.outcome,
    x.start,
    // Offsets in seconds: shorter than two more epochs.
    Math.round((x.flagged_at - x.start) / 1000),
    Math.round(((x.closed_at ?? x.flagged_at) - x.flagged_at) / 1000),
    x.calls,
    x.tokens,
    x.usd,
    x.to_flag.calls,
    x.to_flag.tokens,
    x.to_flag.usd,
  ];
}

export function unpack(p: unknown): Stretch | undefined {
  if (!Array.isArray(p) || p[0] !== 1 || p.length < 19) return undefined;
  const [, session, root, agent, model, detector, rule, looping, mode, outcome, start, toFlag, toClose] = p;
  const flagged = start + toFlag * 1000;
  const closed = flagged + toClose * 1000;
  const [calls, tokens, usd, fc, fk, fu] = p.slice(13) as number[];
  const acted = outcome === 'acted' || outcome === 'budget';
  const total = { calls, tokens, usd, minutes: min(closed - start) };
  return {
    session,
    root,
    agent,
    model,
    detector,
    rule,
    level: looping ? 'looping' : 'stalling',
    mode,
    outcome,
    start,
    flagged_at: flagged,
    closed_at: closed,
    ...total,
    to_flag: { calls: fc, tokens: fk, usd: fu, minutes: min(flagged - start) },
    to_action: acted ? total : null,
  };
}

/** The morning figures over a set of stretches. */
export interface LedgerSummary {
  loops: number;
  open: number;
  by_outcome: Record<Outcome | 'open', number>;
  /** Spend in the stretches before their flag, and in all of them (each ends at its action or its end). */
  before_flag: { calls: number; tokens: number; usd: number };
  before_action: { calls: number; tokens: number; usd: number };
  median_calls_to_flag: number | null;
  median_minutes_to_flag: number | null;
  /** Over acted stretches only. */
  median_calls_to_action: number | null;
  by_model: Record<string, { loops: number; usd_before_flag: number; usd: number }>;
}

export function median(xs: readonly number[]): number | null {
  if (!xs.length) return null;
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

export function summarize(xs: readonly Stretch[]): LedgerSummary {
  const by_outcome = { acted: 0, budget: 0, recovered: 0, ended: 0, open: 0 };
  const bf = { calls: 0, tokens: 0, usd: 0 };
  const ba = { calls: 0, tokens: 0, usd: 0 };
  const by_model: LedgerSummary['by_model'] = {};
  for (const x of xs) {
    by_outcome[x.outcome]++;
    bf.calls += x.to_flag.calls;
    bf.tokens += x.to_flag.tokens;
    bf.usd += x.to_flag.usd;
    ba.calls += x.calls;
    ba.tokens += x.tokens;
    ba.usd += x.usd;
    const key = x.model ?? 'unknown';
    by_model[key] ??= { loops: 0, usd_before_flag: 0, usd: 0 };
    const m = by_model[key];
    m.loops++;
    m.usd_before_flag = cents(m.usd_before_flag + x.to_flag.usd);
    m.usd = cents(m.usd + x.usd);
  }
  bf.usd = cents(bf.usd);
  ba.usd = cents(ba.usd);
  const acted = xs.filter((x) => x.to_action);
  return {
    loops: xs.length,
    open: by_outcome.open,
    by_outcome,
    before_flag: bf,
    before_action: ba,
    median_calls_to_flag: median(xs.map((x) => x.to_flag.calls)),
    median_minutes_to_flag: median(xs.map((x) => x.to_flag.minutes)),
    median_calls_to_action: median(acted.map((x) => x.to_action?.calls ?? 0)),
    by_model,
  };
}
