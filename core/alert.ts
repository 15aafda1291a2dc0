import { z } from 'zod';

// An alert is an event with a lifecycle, mapped one-to-one onto PagerDuty Events v2:
// `dedup_key` names the incident, `state` is the transition, `severity` routes it.
export const SEVERITIES = ['info', 'warning', 'critical'] as const;
export type Severity = (typeof SEVERITIES)[number];
export const SeveritySchema = z.enum(SEVERITIES);

export const ALERT_STATES = ['trigger', 'escalate', 'resolve'] as const;
export type AlertState = (typeof ALERT_STATES)[number];

export function severityRank(s: Severity): number {
  return SEVERITIES.indexOf(s);
}

/** What a detector or mode asks for: raise (trigger or escalate) or resolve an incident. */
export const AlertInputSchema = z.strictObject({
  dedup_key: z.string().min(1).max(255),
  severity: SeveritySchema,
  /** `resolve` closes the incident; `trigger` opens it or, at a higher severity, escalates it. */
  state: z.enum(['trigger', 'resolve']).default('trigger'),
  title: z.string().min(1).max(200),
  summary: z.string().max(1024),
  /** The incident report: deterministic text built from fingerprints and targets, never content. */
  details: z.string().max(16_384).default(''),
  source: z.string().min(1).max(64),
  /**
   * An escalation step within a severity (an acting mode's stage): a higher stage at the
   * same severity escalates the open incident too. Absent: 0.
   */
  stage: z.number().int().min(0).max(100).optional(),
});
export type AlertInput = z.input<typeof AlertInputSchema>;

/** One transition of an incident, as delivered to channels. */
export interface Alert {
  dedup_key: string;
  severity: Severity;
  state: AlertState;
  title: string;
  summary: string;
  details: string;
  source: string;
  /** Epoch ms of the transition. */
  at: number;
  /** Transition number of this incident, so a re-sent transition has the same identity. */
  seq: number;
  /** A Send test alert: skips dedup, quiet window and rate limit, and says TEST. */
  test?: boolean;
}
