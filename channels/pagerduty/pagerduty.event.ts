import type { Alert } from '../../core/alert.ts';
import { ascii, renderTitle, truncate } from '../../core/render.ts';

// Pure: an alert transition as a PagerDuty Events API v2 event. No I/O.

/** PagerDuty refuses events over 512 KB; Alertmanager uses 512000 bytes as the line. */
export const MAX_EVENT_BYTES = 512_000;
export const DETAILS_REMOVED =
  'Custom details have been removed because the original event exceeds the maximum size of 512KB';

/** PagerDuty's `error` level sits between warning and critical; Vigil has no such level, so it is never sent. */
const SEVERITY = { info: 'info', warning: 'warning', critical: 'critical' } as const;

export interface PagerDutyEventOptions {
  source: string;
  group: string;
}

export type PagerDutyEvent =
  | { routing_key: string; dedup_key: string; event_action: 'resolve' }
  | {
      routing_key: string;
      event_action: 'trigger';
      dedup_key: string;
      payload: {
        summary: string;
        source: string;
        severity: (typeof SEVERITY)[keyof typeof SEVERITY];
        timestamp: string;
        component: string;
        group: string;
        class: string;
        custom_details: Record<string, unknown>;
      };
      client: string;
    };

/**
 * trigger and escalate are both `trigger` events on the incident's dedup_key (an
 * escalation carries the higher severity); resolve is the three-field resolve event.
 */
export function pagerDutyEvent(a: Alert, routingKey: string, o: PagerDutyEventOptions): PagerDutyEvent {
  if (a.state === 'resolve') return { routing_key: routingKey, dedup_key: a.dedup_key, event_action: 'resolve' };
  const title = renderTitle(a);
  const event: PagerDutyEvent = {
    routing_key: routingKey,
    event_action: 'trigger',
    dedup_key: a.dedup_key,
    payload: {
      // PagerDuty shows the summary as the alert's title: at most 1024 characters.
      summary: truncate(a.summary ? `${title}: ${ascii(a.summary)}` : title, 1024),
      source: o.source,
      severity: SEVERITY[a.severity],
      timestamp: new Date(a.at).toISOString(),
      // The detector or mode that raised it, for PagerDuty event rules.
      component: a.source,
      group: o.group,
      class: a.source,
      custom_details: {
        details: a.details,
        title: a.title,
        summary: a.summary,
        state: a.state,
        seq: a.seq,
        ...(a.test ? { test: true } : {}),
      },
    },
    client: 'Vigil',
  };
  // As Alertmanager does: an oversized event keeps its summary and loses its details.
  if (Buffer.byteLength(JSON.stringify(event), 'utf8') > MAX_EVENT_BYTES) {
    event.payload.custom_details = { error: DETAILS_REMOVED };
  }
  return event;
}
