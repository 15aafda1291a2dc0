import { ancestorsOf } from '../../../core/tree.ts';
import type { ProgressEvent, RequestRecord, Verdict, VerdictLevel } from '../../../core/wire.ts';
import type { NoProgressKnobs } from '../knobs.ts';
import { rebase } from './recover.ts';
import { verdictOf } from './rules.ts';
import { type JudgeInput, LEVELS, type LevelCode, newSessionState, type RollUp, type SessionState } from './state.ts';
import { onProgress, onRequest, onRollup } from './update.ts';

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

  /**
   * A recovery of this session at `at` (an acting mode aborted its tree and compacted the
   * root): it is judged afresh from here. Returns the change, if its level moved.
   */
  recover(id: string, at: number): VerdictChange | undefined {
    const s = this.states.get(id);
    if (s === undefined) return undefined;
    const from = s.level;
    return rebase(s, this.knobs, at) === from ? undefined : this.change(id, s, from);
  }

  applyProgress(ev: ProgressEvent): readonly VerdictChange[] {
    const s = this.get(ev.session_id, ev.parent_session_id);
    const from = s.level;
    const to = onProgress(s, ev, this.knobs);
    let changes = from === to ? NO_CHANGES : [this.change(ev.session_id, s, from)];
    if (ev.kind === 'tool' && s.parent !== undefined && this.parents.has(ev.session_id)) {
      const r = this.rollup;
      r.landed = s.landedNow;
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
