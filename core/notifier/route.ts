import { type Alert, severityRank } from '../alert.ts';
import type { ChannelEntry } from '../config-schema.ts';

// The route stage: does this channel want this transition at all? Pure.

export type Routed = { send: true } | { send: false; reason: string };

export function route(e: ChannelEntry, a: Alert): Routed {
  if (!e.enabled) return { send: false, reason: 'disabled' };
  if (a.state === 'resolve' && !e.resolve_messages) return { send: false, reason: 'resolve_messages off' };
  // A resolve is routed like the incident it closes (it carries the incident's severity).
  if (severityRank(a.severity) < severityRank(e.min_severity)) return { send: false, reason: 'below min_severity' };
  return { send: true };
}
