import type { AlertState } from '../alert.ts';

// The notifier's per-channel gate as one pure rule. MemoryStore.admit runs it as is;
// RedisStore.admit runs the same rule in a Lua script (lua/admit.lua), so both
// backends answer alike: the store contract tests (store.test.ts) run the same cases
// against each.
//
// What a channel keeps per incident (the marks): the episode it was told of (the
// incident's opening), the last transition it was told (seq, and the state it went out
// as), the highest severity it was told in that episode, and when it was last told a
// new incident of this dedup_key (the quiet window's clock). Alertmanager and
// PagerDuty semantics:
//   - a transition the channel already got passes again as it went (a fan-out run twice);
//     an older one than it got is stale;
//   - a rise (escalate) of an incident the channel knows always passes, uncounted;
//   - a resolve passes when the channel was told of the incident, never otherwise;
//   - a transition of an incident the channel was not told of (its trigger was below
//     min_severity, or held) is its trigger: held by the quiet window only when the same
//     dedup_key was opened on this channel within `quietMs` at no lower severity (a
//     flapping incident), and by the rate limit only when `max` incidents at its
//     severity or above were opened on this channel within `windowMs` (warnings do not
//     use up the room of a critical one).

export interface AdmitRequest {
  /** The channel's marks for this incident (one per channel and dedup_key). */
  markKey: string;
  /** The incident's opening (opened_at): what a channel was told is told per episode. */
  episode: number;
  /** The transition: its number in the incident, its lifecycle state, its severity rank. */
  seq: number;
  state: AlertState;
  severity: number;
  now: number;
  quietMs: number;
  /** Expiry of the marks. */
  markTtlMs: number;
  /** The channel's incidents opened, one sorted set per severity rank (index = rank). */
  rateKeys: readonly string[];
  windowMs: number;
  max: number;
  /** The incident's member in its rate set (dedup_key and episode). */
  member: string;
}

export type AdmitResult =
  /** `as`: the state the channel gets (an incident it was not told of starts with a trigger). */
  | { ok: true; as: AlertState }
  | { ok: false; why: 'quiet'; last: number }
  | { ok: false; why: 'rate'; count: number }
  /** A resolve of an incident this channel was never told of. */
  | { ok: false; why: 'untold' }
  /** Older than a transition this channel was already told. */
  | { ok: false; why: 'stale' };

export interface AdmitMarks {
  ep?: number;
  seq?: number;
  as?: AlertState;
  sev?: number;
  /** When this channel was last told a new incident of this dedup_key. */
  tat?: number;
}

export interface AdmitStep {
  result: AdmitResult;
  /** The marks to write (undefined: nothing changes). */
  marks?: AdmitMarks;
  /** Record the incident in the rate set of this rank. */
  count?: number;
}

/**
 * Pure: the gate's answer from the channel's marks. `opened(rank)` is the number of
 * incidents opened on the channel inside the rate window at that severity rank.
 */
export function admitRule(m: AdmitMarks, q: AdmitRequest, opened: (rank: number) => number): AdmitStep {
  const told = m.ep === q.episode && m.seq !== undefined;
  if (told && q.seq === m.seq) return { result: { ok: true, as: m.as ?? q.state } };
  if (told && q.seq < (m.seq as number)) return { result: { ok: false, why: 'stale' } };
  if (q.state === 'resolve') {
    if (!told || m.as === 'resolve') return { result: { ok: false, why: 'untold' } };
    return { result: { ok: true, as: 'resolve' }, marks: { ...m, seq: q.seq, as: 'resolve' } };
  }
  if (told && m.as !== 'resolve') {
    return {
      result: { ok: true, as: q.state },
      marks: { ...m, seq: q.seq, as: q.state, sev: Math.max(m.sev ?? q.severity, q.severity) },
    };
  }
  // New to this channel: its trigger.
  if (m.tat !== undefined && q.now - m.tat < q.quietMs && q.severity <= (m.sev ?? -1)) {
    return { result: { ok: false, why: 'quiet', last: m.tat } };
  }
  let n = 0;
  for (let r = q.severity; r < q.rateKeys.length; r++) n += opened(r);
  if (n >= q.max) return { result: { ok: false, why: 'rate', count: n } };
  return {
    result: { ok: true, as: 'trigger' },
    marks: { ep: q.episode, seq: q.seq, as: 'trigger', sev: q.severity, tat: q.now },
    count: q.severity,
  };
}
