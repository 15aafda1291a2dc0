import { keys, TTL } from '../../core/store/keys.ts';

// The money detector's store keys, under its own namespace:
//   s:<session>          the session's spend since its stretch started (JSON, compare-and-set)
//   o:<root>             a tree's open stretches: session -> root, agent, flag time (JSON, CAS);
//                        absent when the tree has none (the keys under o: are the index of them)
//   n                    counters: open stretches in all trees (the sum of every o:<root>)
//   open                 the layout before: one map of every tree's open stretches (read
//                        once, moved into o:<root>, then deleted)
//   l:<day>              the stretches closed that day, packed (a capped list, expiring)
//   d:<day>              that day's counters (one hash: totals, per model, per agent, in loops)
//   t:<day>:<root>       a tree's counters that day, and where a Resume rebased them
//   b:<day>              the budget incidents raised that day: scope -> level (JSON, CAS)
//   b:<day>:resolved     set once that day's incidents were resolved (one instance does it)
//   k:<day>              the trees a budget blocked that day at the sensor: root -> blocked | lifted (CAS)
export const TYPE = 'money';
const NS = keys.plugin(TYPE);

/** The open stretches: session -> its tree, agent, and when it was flagged (clock time). */
export type OpenMap = Record<string, { root: string; agent?: string; at: number }>;

export const mKeys = {
  session: (id: string) => `${NS}s:${id}`,
  open: (root: string) => `${NS}o:${root}`,
  openPrefix: `${NS}o:`,
  openCount: `${NS}n`,
  stretches: (day: string) => `${NS}l:${day}`,
  day: (day: string) => `${NS}d:${day}`,
  tree: (day: string, root: string) => `${NS}t:${day}:${root}`,
  raised: (day: string) => `${NS}b:${day}`,
  resolved: (day: string) => `${NS}b:${day}:resolved`,
  blocked: (day: string) => `${NS}k:${day}`,
} as const;

const DAY = 86_400_000;

export const M_TTL = {
  /** A session's spend: dropped as the kernel drops the session. */
  session: TTL.session,
  /** A tree's day counters: the day, and a day's slack for clocks and zones. */
  tree: 2 * DAY,
  /** The raised-incident marks of a day. */
  raised: 3 * DAY,
} as const;

/** Hash fields of a day's counters: totals, then per model and per agent (a model id has no spaces). */
export const F = {
  usd: 'usd',
  tokens: 'tok',
  calls: 'calls',
  loopUsd: 'lusd',
  loopTokens: 'ltok',
  loopCalls: 'lcalls',
  model: (m: string, f: string) => `m|${m}|${f}`,
  agent: (a: string, f: string) => `a|${a}|${f}`,
  /** tree hash: the counts a Resume left behind, and the exemption from shared ceilings. */
  resumedUsd: 'rusd',
  resumedTokens: 'rtok',
  exempt: 'x',
  /** openCount hash: open stretches in all trees. */
  open: 'open',
} as const;
