import type { FastifyRequest } from 'fastify';
import { AppError } from '../core/errors.ts';
import { parseSessionKeys, SESSION_KEY_HEADER } from '../core/session-key.ts';
import type { Vigil } from '../core/vigil.ts';

// The sensor routes that stop or lift a session's tree, or read what an ack needs,
// check the X-Vigil-Session-Key header against each session they name (core/binding.ts;
// docs/api.md, Session keys). The ingestion token says "a sensor"; the key says "the
// sensor of this session".

/** The paths that check session keys (the docs table's key column lists them). */
export const KEYED_ROUTES = new Set(['/progress', '/verdicts', '/directives', '/directives/ack']);

/** The sessions items name: each `session_id` and `parent_session_id` (joining a tree names its parent). */
export function namedSessions(items: readonly { session_id: string; parent_session_id?: string | null }[]): string[] {
  const out = new Set<string>();
  for (const it of items) {
    out.add(it.session_id);
    if (it.parent_session_id) out.add(it.parent_session_id);
  }
  return [...out];
}

/**
 * The sessions progress events name, and for a `compaction_done` (it ends a tree's
 * recovery) the root of the tree it would lift: a member that joined the tree through a
 * route without keys (a router's record, a gate check naming a parent) cannot lift it.
 */
export async function withLiftedRoots(
  vigil: Vigil,
  events: readonly { kind?: string; session_id: string; parent_session_id?: string | null }[],
): Promise<string[]> {
  const named = namedSessions(events);
  for (const e of events) {
    if (e.kind !== 'compaction_done') continue;
    named.push(await vigil.tree.rootOf(e.session_id));
    if (e.parent_session_id) named.push(await vigil.tree.rootOf(e.parent_session_id));
  }
  return [...new Set(named)];
}

/**
 * Refuses the request (403 SESSION_KEY_MISMATCH, before anything is judged) when a
 * session it names is bound to a key the header does not carry; binds the sessions it
 * names for the first time with a key. A malformed header is a 400 naming it.
 */
export async function checkSessionKeys(vigil: Vigil, req: FastifyRequest, sessions: readonly string[]): Promise<void> {
  const h = req.headers[SESSION_KEY_HEADER];
  const parsed = parseSessionKeys(Array.isArray(h) ? h.join(' ') : h);
  if (typeof parsed === 'string') throw new AppError('BAD_INPUT', `headers.${SESSION_KEY_HEADER}: ${parsed}`);
  if (parsed.bare !== undefined && sessions.length > 1) {
    throw new AppError(
      'BAD_INPUT',
      `headers.${SESSION_KEY_HEADER}: a bare key names one session; this request names ${sessions.length} (send <session_id>=<key> pairs)`,
    );
  }
  await vigil.bindings.check(sessions, (id) => parsed.bySession.get(id) ?? parsed.bare);
}
