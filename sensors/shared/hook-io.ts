import { z } from 'zod/mini';
import type { Checks } from '../../core/sensor.ts';

// What every hook bridge (sensors/<agent>/bridge.ts) does the same way with a payload:
// check it, keep a little state per session between calls (the landed rule's memory,
// model call ids already reported, sessions that had a turn), and pick out the model
// calls of the agent's session log not reported yet. The bridges run in the process
// that hosts the hook endpoint (sensors/shared/hook-host.ts); nothing here does I/O.

/** The payload checked by `schema` and its event (the payload's hook_event_name); undefined: not understood. */
export function payloadOf<T extends { hook_event_name?: string }>(
  raw: unknown,
  schema: Checks<T>,
): { p: T; name: string } | undefined {
  const r = schema.safeParse(raw);
  return r.success && r.data.hook_event_name ? { p: r.data, name: r.data.hook_event_name } : undefined;
}

/** The `session_id` of a payload, when it has a plausible one (what the host orders calls by). */
export function sessionIdOf(raw: unknown): string | undefined {
  const s = raw !== null && typeof raw === 'object' ? (raw as { session_id?: unknown }).session_id : undefined;
  return typeof s === 'string' && s.length > 0 && s.length <= 100 && /^[\x21-\x7e]+$/.test(s) ? s : undefined;
}

/** The payload's `hook_event_name` ('' when it has none). */
export function eventOf(raw: unknown): string {
  const e =
    raw !== null && typeof raw === 'object' ? (raw as { hook_event_name?: unknown }).hook_event_name : undefined;
  return typeof e === 'string' ? e : '';
}

/** The landed rule's memory per session (sensors/shared/landed.ts), as a bridge keeps it. */
export const TrackersSchema = z._default(
  z.record(z.string(), z.object({ failing: z.readonly(z.array(z.string()).check(z.maxLength(64))) })),
  {},
);

/** The state of a bridge that reads model calls from a session log: trackers, calls sent, sessions that had a turn. */
export const LogStateSchema = z.object({
  trackers: TrackersSchema,
  /** Model call ids already reported, newest last (bounded). */
  sent: z._default(z.array(z.string()).check(z.maxLength(1000)), []),
  /** Sessions that had a turn (the next prompt is a resume). */
  turns: z._default(z.array(z.string()).check(z.maxLength(1000)), []),
});
export type LogState = z.output<typeof LogStateSchema>;
export const freshLogState = (): LogState => ({ trackers: {}, sent: [], turns: [] });

const SENT_MAX = 500;
/** Older model calls found in a session log are stamped this long ago at most (the service's accepted window). */
const USAGE_AGE_MS = 5 * 60_000;

/**
 * The entries of `calls` not reported yet, by call id; `sent` (the state's memory,
 * newest last) gets them and is bounded. Each keeps the log's own time, within the
 * service's accepted window (a late first read of an old session).
 */
export function unsent<T extends { call_id: string; ts: number }>(
  sent: string[],
  calls: readonly T[],
  now: number,
): T[] {
  const seen = new Set(sent);
  const out: T[] = [];
  for (const a of calls) {
    if (seen.has(a.call_id)) continue;
    seen.add(a.call_id);
    out.push({ ...a, ts: Math.min(now, Math.max(a.ts, now - USAGE_AGE_MS)) });
    sent.push(a.call_id);
  }
  if (sent.length > SENT_MAX) sent.splice(0, sent.length - SENT_MAX);
  return out;
}

/** Whether `session` had a turn before (its prompt is then a resume); records it in `turns` (bounded). */
export function hadTurn(turns: string[], session: string): boolean {
  if (turns.includes(session)) return true;
  turns.push(session);
  if (turns.length > 1000) turns.splice(0, turns.length - 1000);
  return false;
}
