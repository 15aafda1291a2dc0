import { type AlertInput, AlertInputSchema, type AlertState, type Severity, severityRank } from '../alert.ts';

/** The durable record of one incident, per dedup_key. */
export interface Incident {
  dedup_key: string;
  open: boolean;
  severity: Severity;
  /** The highest escalation step within the severity so far (AlertInput.stage). */
  stage?: number;
  title: string;
  summary: string;
  details: string;
  source: string;
  /** Number of transitions so far; identifies each one. */
  seq: number;
  last_state: AlertState;
  opened_at: number;
  updated_at: number;
}

/**
 * Whether a request raises an open incident: a higher severity, or a higher stage at the
 * same severity (an acting mode's next stage is news even when its severity is not).
 */
export function rises(cur: Pick<Incident, 'severity' | 'stage'>, a: { severity: Severity; stage?: number }): boolean {
  const d = severityRank(a.severity) - severityRank(cur.severity);
  return d > 0 || (d === 0 && (a.stage ?? 0) > (cur.stage ?? 0));
}

/**
 * Pure: does this request change the incident? Fires only on transitions:
 * open (trigger), a rise while open (escalate: a higher severity, or a higher stage at
 * the same severity), close (resolve). Repeats that do not rise fire nothing (their
 * text still updates the open incident), and resolves of a closed incident are no-ops.
 */
export function transition(
  cur: Incident | undefined,
  raw: AlertInput,
  now: number,
): { next: Incident | undefined; fired?: AlertState } {
  const a = AlertInputSchema.parse(raw);
  if (a.state === 'resolve') {
    if (!cur?.open) return { next: cur };
    return {
      next: {
        ...cur,
        open: false,
        seq: cur.seq + 1,
        last_state: 'resolve',
        updated_at: now,
        summary: a.summary || cur.summary,
      },
      fired: 'resolve',
    };
  }
  const base = { title: a.title, summary: a.summary, details: a.details, source: a.source, updated_at: now };
  if (!cur?.open) {
    const seq = (cur?.seq ?? 0) + 1;
    return {
      next: {
        dedup_key: a.dedup_key,
        open: true,
        severity: a.severity,
        ...(a.stage !== undefined ? { stage: a.stage } : {}),
        seq,
        last_state: 'trigger',
        opened_at: now,
        ...base,
      },
      fired: 'trigger',
    };
  }
  if (rises(cur, a)) {
    // The stage counts within the new severity.
    const { stage: _, ...rest } = cur;
    return {
      next: {
        ...rest,
        ...base,
        severity: a.severity,
        ...(a.stage !== undefined ? { stage: a.stage } : {}),
        seq: cur.seq + 1,
        last_state: 'escalate',
      },
      fired: 'escalate',
    };
  }
  // Not a transition, so nothing is sent; but the open incident shows what is true now
  // (a stall that turned into a loop at the same severity says so in /alerts).
  const same = cur.title === a.title && cur.summary === a.summary && cur.details === a.details;
  return { next: same ? cur : { ...cur, ...base } };
}
