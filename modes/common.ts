import type { AlertInput, Severity } from '../core/alert.ts';
import type { Decision, GateVote, ModeEvent, TreeState, VerdictModeEvent } from '../core/contracts.ts';
import type { DirectiveSpec, VerdictLevel } from '../core/wire.ts';

// What every mode does ("every mode warns"): keep the tree's open incidents and their
// flagged sessions, toast in the operator's opencode window, and raise, escalate or
// resolve each incident through the notifier. Modes that act add to this.

const RANK: Record<VerdictLevel, number> = { ok: 0, stalling: 1, looping: 2 };

/** The worst level among an incident's flagged sessions. */
export function worstOf(flagged: Record<string, VerdictLevel> | undefined): VerdictLevel {
  let w: VerdictLevel = 'ok';
  for (const l of Object.values(flagged ?? {})) if (RANK[l] > RANK[w]) w = l;
  return w;
}

/** No refusal of any kind: incidents whose sessions all recovered may resolve. */
export function treeIsQuiet(t: TreeState): boolean {
  return Object.keys(t.refused).length === 0 && !t.refuse_all;
}

/** Whether this event starts an acting mode's action: a transition the detector marked for acting. */
export function startsActing(ev: ModeEvent): ev is VerdictModeEvent {
  return ev.type === 'verdict' && ev.act && ev.to !== 'ok' && ev.from !== ev.to;
}

/** The alert source: the detector, and the outside sensor when one said so (`no-progress/watchdog`). */
export function sourceOf(ev: VerdictModeEvent): string {
  return (ev.source === ev.detector ? ev.detector : `${ev.detector}/${ev.source}`).slice(0, 64);
}

export function incidentTitle(ev: VerdictModeEvent, level: VerdictLevel = ev.to): string {
  return (ev.title ?? `${level}: ${ev.agent ?? 'agent'} (${ev.session_id})`).slice(0, 200);
}

export function toast(
  session_id: string,
  title: string,
  message: string,
  variant: 'info' | 'warning' | 'error' | 'success',
): DirectiveSpec {
  return { type: 'toast', session_id, toast: { title: title.slice(0, 120), message: message.slice(0, 300), variant } };
}

export function resolveAlert(
  dedup_key: string,
  title: string,
  summary: string,
  source: string,
  details = '',
): AlertInput {
  return { dedup_key, severity: 'info', state: 'resolve', title: title.slice(0, 200), summary, details, source };
}

/**
 * Resolves every open incident of the tree whose sessions all recovered, once the tree
 * holds no refusal (a refused or stopped tree keeps its incident open until lifted).
 */
export function settle(d: Decision, summary: string, source = 'vigil'): Decision {
  if (!treeIsQuiet(d.tree)) return d;
  for (const [key, sessions] of Object.entries(d.tree.flagged)) {
    if (Object.keys(sessions).length) continue;
    const { [key]: _, ...rest } = d.tree.flagged;
    d.tree = { ...d.tree, flagged: rest };
    d.alerts.push(resolveAlert(key, `recovered: ${d.tree.root}`, summary, source));
  }
  return d;
}

/**
 * The warning part of a decision. `looping` is critical when nothing acts on it (warn
 * mode), a warning when the mode acts; a detector may set the severity itself; the
 * hard stop is always critical (added by auto_recover). `hold`: the mode has the tree in
 * hand (a recovery episode), so an incident whose sessions are ok again stays open until
 * the mode ends the episode: a session judged afresh after a recovery has not shown
 * progress yet, and a "recovered" then would not be true.
 */
export function warnDecision(
  tree: TreeState,
  ev: ModeEvent,
  now: number,
  loopingSeverity: Severity,
  hold = false,
): Decision {
  const d: Decision = {
    tree: { ...tree, flagged: { ...tree.flagged }, updated_at: now },
    directives: [],
    alerts: [],
  };
  if (ev.type === 'resume') return resumeDecision(d, ev.by);
  if (ev.type !== 'verdict') return d;
  const inc = { ...(d.tree.flagged[ev.dedup_key] ?? {}) };
  if (ev.to === 'ok') delete inc[ev.session_id];
  else inc[ev.session_id] = ev.to;
  // The key stays (empty) until its resolve is sent: that is how settle() knows it is open.
  if (Object.keys(inc).length || d.tree.flagged[ev.dedup_key]) d.tree.flagged[ev.dedup_key] = inc;

  if (RANK[ev.to] > RANK[ev.from]) {
    d.directives.push(
      toast(
        ev.session_id,
        `Vigil: ${ev.to}`,
        `${ev.agent ?? ev.session_id}: ${ev.reason}`,
        ev.to === 'looping' ? 'error' : 'warning',
      ),
    );
  }
  const worst = worstOf(inc);
  if (worst !== 'ok') {
    d.alerts.push({
      dedup_key: ev.dedup_key,
      severity: ev.severity ?? (worst === 'looping' ? loopingSeverity : 'warning'),
      state: 'trigger',
      title: incidentTitle(ev, ev.to === 'ok' ? worst : ev.to),
      summary: ev.reason,
      details: ev.report,
      source: sourceOf(ev),
    });
    return d;
  }
  if (hold) return d;
  // The detector's own words for why the session is ok (a landed change, a quieter window).
  return settle(d, `${ev.agent ?? ev.session_id}: ${ev.reason}`.slice(0, 1024), sourceOf(ev));
}

/**
 * Resume, whatever the mode: a tree stopped, refused or capped (perhaps under another
 * mode before a switch) is released, the plugin told, and incidents whose sessions
 * recovered resolve. A mode with more state (auto_recover's stage) adds to it.
 */
export function resumeDecision(d: Decision, by: string): Decision {
  const t = d.tree;
  d.tree = {
    ...t,
    stage: 0,
    refused: {},
    refuse_all: undefined,
    limits: {},
    recoveries: [],
    awaiting_compaction: undefined,
  };
  // The whole tree: the sensor lifts every block of it and nudges a session it stopped.
  d.directives.push({ type: 'lift', session_id: t.root, scope: 'tree', reason: `resumed by ${by}` });
  d.directives.push(toast(t.root, 'Vigil: resumed', `tree ${t.root} resumed by ${by}`, 'info'));
  return settle(d, `resumed by ${by}`);
}

/**
 * Retry-After of a refusal when the mode has no option of its own. A stopped tree's is
 * short: a client waiting in retry (opencode honours Retry-After) is back soon after a
 * Resume, and a retry meanwhile costs one refused gate check.
 */
export const GATE_DEFAULTS = { retry_after: 30_000, hard_stop_retry_after: 10_000 };

/** The gate's vote from a tree's state: the hard stop, a scoped refusal, or a context cap. */
export function treeGate(
  t: TreeState,
  session: string,
  now: number,
  o: { retry_after: number; hard_stop_retry_after: number } = GATE_DEFAULTS,
): GateVote | undefined {
  if (t.refuse_all) {
    return { refuse: { reason: t.refuse_all.reason, retry_after_s: Math.ceil(o.hard_stop_retry_after / 1000) } };
  }
  const r = t.refused[session];
  if (r) return { refuse: { reason: r.reason, retry_after_s: Math.ceil(o.retry_after / 1000) } };
  const lim = [t.limits[session], t.limits['*']].find((l) => l && (l.until === undefined || l.until > now));
  if (lim) {
    return {
      limit: {
        max_context_tokens: lim.max_context_tokens,
        mechanism: lim.mechanism,
        reason: 'context capped after a loop',
      },
    };
  }
  return undefined;
}
