import { type Alert, type AlertState, SEVERITIES, severityRank } from '../alert.ts';
import type { ChannelEntry } from '../config-schema.ts';
import { keys, TTL } from '../store/keys.ts';
import type { AdmitRequest, AdmitResult, Store } from '../store/store.ts';

// The quiet-window and rate-limit stage, in one atomic store step (one round trip on
// Redis). The rules are the store's admitRule (core/store/admit.ts): a rise of an
// incident the channel knows always passes; the quiet window and the rate limit hold
// only an incident new to the channel, and count incidents, not their states. Admitting
// the same transition twice (a fan-out run again after a crash) passes as it did.

export type Admitted =
  | { ok: true; as: AlertState }
  /** `log`: a suppression worth a delivery-log row (quiet window, rate limit); else filtered. */
  | { ok: false; reason: string; log: boolean };

/** `episode`: the incident's opening (opened_at). */
export async function admit(store: Store, e: ChannelEntry, a: Alert, episode: number): Promise<Admitted> {
  return admitted(await store.admit(admitRequest(e, a, episode)), e, a);
}

/** The store's gate request for one channel and transition. */
export function admitRequest(e: ChannelEntry, a: Alert, episode: number): AdmitRequest {
  return {
    markKey: keys.notified(e.name, a.dedup_key),
    episode,
    seq: a.seq,
    state: a.state,
    severity: severityRank(a.severity),
    now: a.at,
    quietMs: e.quiet_window,
    markTtlMs: Math.max(e.quiet_window, TTL.notified),
    rateKeys: SEVERITIES.map((_, rank) => keys.rate(e.name, rank)),
    windowMs: e.rate_limit.window,
    max: e.rate_limit.max,
    member: `${a.dedup_key}#${episode}`,
  };
}

/** The gate's answer as the notifier reports it. */
export function admitted(gate: AdmitResult, e: ChannelEntry, a: Alert): Admitted {
  if (gate.ok) return gate;
  switch (gate.why) {
    case 'quiet':
      return {
        ok: false,
        log: true,
        reason: `quiet window (opened here ${Math.round((a.at - gate.last) / 1000)} s ago)`,
      };
    case 'rate':
      return {
        ok: false,
        log: true,
        reason: `rate limit (${e.rate_limit.max} incidents at ${a.severity} or above per ${e.rate_limit.window / 1000} s)`,
      };
    case 'untold':
      return { ok: false, log: false, reason: 'not told of this incident' };
    case 'stale':
      return { ok: false, log: false, reason: 'a later transition was already admitted' };
  }
}
