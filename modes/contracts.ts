import type { AlertInput } from '../core/alert.ts';
import type { VerdictLevel } from '../core/wire.ts';

// Response modes are pure deciders: (tree state, event, options, now) -> decision. The
// engine (core/engine.ts) loads the tree state from the store, applies the decision
// compare-and-set, queues the directives and sends the alerts. Scenario tests drive
// the deciders with a fake clock; the service and several instances share the state.

/** Per tree (keyed by its root session): what the modes decided and the gate enforces. */
export interface TreeState {
  root: string;
  /** auto_recover stage: 0 none, 1 recovering, 2 recovering with a context cap, 3 hard stop. */
  stage: 0 | 1 | 2 | 3;
  /** Scoped refusals: these conversations get 429 until lifted. */
  refused: Record<string, { reason: string; since: number }>;
  /** Stage 3: every conversation of the tree is refused until an admin Resume. */
  refuse_all?: { reason: string; since: number };
  /** Context caps: per session id, or '*' for the whole tree. */
  limits: Record<string, { max_context_tokens: number; mechanism: 'cap' | 'overflow'; since: number; until?: number }>;
  /** When each recovery (stage 1 or 2) started; pruned to the recover window. */
  recoveries: number[];
  /** Sessions of the tree whose verdict is not ok, with their level. */
  flagged: Record<string, VerdictLevel>;
  /** A recovery waits for the plugin to report the root's compaction done. */
  awaiting_compaction?: { session: string; since: number };
  updated_at: number;
}

export function emptyTree(root: string, now: number): TreeState {
  return { root, stage: 0, refused: {}, limits: {}, recoveries: [], flagged: {}, updated_at: now };
}

export type DirectiveType = 'toast' | 'abort' | 'compact' | 'lift';

/** An action for the opencode plugin, queued per tree until the plugin acknowledges it. */
export interface DirectiveSpec {
  type: DirectiveType;
  /** The session to act on (abort, compact) or about (toast, lift). */
  session_id: string;
  toast?: { title: string; message: string; variant: 'info' | 'success' | 'warning' | 'error' };
  /** compact: the incident report the plugin appends to the compaction prompt. */
  report?: string;
  /** compact: continue the session after the compaction (auto_compact) or not (auto_recover stage 1 continues the root). */
  auto_continue?: boolean;
  reason?: string;
}

export interface Directive extends DirectiveSpec {
  id: string;
  root_id: string;
  created_at: number;
}

export type ModeEvent =
  | {
      type: 'verdict';
      session_id: string;
      root_id: string;
      agent?: string;
      from: VerdictLevel;
      to: VerdictLevel;
      /** One line, no content. */
      reason: string;
      /** The incident report (deterministic, no content). */
      report: string;
      source: string;
    }
  | { type: 'compaction_done'; session_id: string; root_id: string }
  /** The plugin acknowledged a directive (done). */
  | { type: 'acked'; directive: DirectiveType; session_id: string; root_id: string }
  /** Time passed (checked lazily, e.g. on a gate check of a recovering tree). */
  | { type: 'tick'; root_id: string }
  | { type: 'resume'; root_id: string; by: string };

export interface Decision {
  tree: TreeState;
  directives: DirectiveSpec[];
  alerts: AlertInput[];
}

/** A mode instance: built by its plugin from its options. */
export interface Mode {
  readonly type: string;
  decide(tree: TreeState, ev: ModeEvent, now: number): Decision;
}
