import type { Alert } from '../alert.ts';
import type { ChannelEntry } from '../config.ts';
import { keys, TTL } from '../store/keys.ts';
import type { Store } from '../store/store.ts';

// The quiet-window and rate-limit stage, in one atomic store step (one round trip on
// Redis). Admitting the same transition twice (a fan-out run again after a crash)
// passes without counting twice.

export type Admitted = { ok: true } | { ok: false; reason: string };

export async function admit(store: Store, e: ChannelEntry, a: Alert): Promise<Admitted> {
  const gate = await store.admit({
    markKey: keys.notified(e.name, a.dedup_key),
    field: a.state,
    ident: `${a.dedup_key}#${a.seq}`,
    now: a.at,
    quietMs: e.quiet_window,
    markTtlMs: Math.max(e.quiet_window, TTL.notified),
    rateKey: keys.rate(e.name),
    windowMs: e.rate_limit.window,
    max: e.rate_limit.max,
  });
  if (gate.ok) return gate;
  if (gate.why === 'quiet') {
    return { ok: false, reason: `quiet window (${a.state} sent ${Math.round((a.at - gate.last) / 1000)} s ago)` };
  }
  return { ok: false, reason: `rate limit (${e.rate_limit.max} per ${e.rate_limit.window / 1000} s)` };
}
