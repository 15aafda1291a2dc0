import type { AlertInput, Severity } from '../core/alert.ts';
import type { VerdictLevel } from '../core/wire.ts';
import type { Decision, DirectiveSpec, ModeEvent, TreeState } from './contracts.ts';

// What every mode does (seed 000 section 5: "every mode warns"): keep the tree's
// flagged sessions, toast in the operator's opencode window, and raise, escalate or
// resolve the tree's incident through the notifier. Modes that act add to this.

const RANK: Record<VerdictLevel, number> = { ok: 0, stalling: 1, looping: 2 };

export function worstFlag(t: TreeState): VerdictLevel {
  let w: VerdictLevel = 'ok';
  for (const l of Object.values(t.flagged)) if (RANK[l] > RANK[w]) w = l;
  return w;
}

export function treeIsQuiet(t: TreeState): boolean {
  return Object.keys(t.flagged).length === 0 && Object.keys(t.refused).length === 0 && !t.refuse_all;
}

export function incidentTitle(ev: Extract<ModeEvent, { type: 'verdict' }>): string {
  return `${ev.to}: ${ev.agent ?? 'agent'} (${ev.session_id})`.slice(0, 200);
}

export function toast(
  session_id: string,
  title: string,
  message: string,
  variant: 'info' | 'warning' | 'error' | 'success',
): DirectiveSpec {
  return { type: 'toast', session_id, toast: { title: title.slice(0, 120), message: message.slice(0, 300), variant } };
}

/**
 * The warning part of a decision. `looping` is critical when nothing acts on it (warn
 * mode), a warning when the mode acts; the hard stop is always critical (added by
 * auto_recover).
 */
export function warnDecision(tree: TreeState, ev: ModeEvent, now: number, loopingSeverity: Severity): Decision {
  const t: TreeState = { ...tree, flagged: { ...tree.flagged }, updated_at: now };
  const directives: DirectiveSpec[] = [];
  const alerts: AlertInput[] = [];
  if (ev.type !== 'verdict') return { tree: t, directives, alerts };
  if (ev.to === 'ok') delete t.flagged[ev.session_id];
  else t.flagged[ev.session_id] = ev.to;

  if (RANK[ev.to] > RANK[ev.from]) {
    directives.push(
      toast(
        ev.session_id,
        `Vigil: ${ev.to}`,
        `${ev.agent ?? ev.session_id}: ${ev.reason}`,
        ev.to === 'looping' ? 'error' : 'warning',
      ),
    );
  }
  const worst = worstFlag(t);
  if (worst !== 'ok') {
    alerts.push({
      dedup_key: t.root,
      severity: worst === 'looping' ? loopingSeverity : 'warning',
      state: 'trigger',
      title: incidentTitle(ev.to === 'ok' ? { ...ev, to: worst } : ev),
      summary: ev.reason,
      details: ev.report,
      source: ev.source === 'no-progress' ? 'no-progress' : `no-progress/${ev.source}`.slice(0, 64),
    });
  } else if (treeIsQuiet(t)) {
    alerts.push(resolveAlert(t.root, `recovered: ${ev.agent ?? ev.session_id} is making progress`, ev.report));
  }
  return { tree: t, directives, alerts };
}

export function resolveAlert(root: string, summary: string, details = ''): AlertInput {
  return {
    dedup_key: root,
    severity: 'info',
    state: 'resolve',
    title: `recovered: ${root}`,
    summary,
    details,
    source: 'no-progress',
  };
}
