// Shared by the admin tests: small knobs that flag a loop within a few calls, and
// progress events that repeat one fingerprint.
import { normalizeCall } from '../../sensors/shared/normalize.ts';

export const LOOP_KNOBS = {
  window: 10,
  novelty_window: 10,
  dup_min_events: 4,
  stall_turns: 3,
  loop_turns: 6,
  top_warn: 3,
  top_loop: 6,
  session_repeat_warn: 3,
  session_repeat_loop: 6,
};

const read = normalizeCall('read', { filePath: '/p/admin/frontend/navbar.js' }, { cwd: '/p' });
let seq = 0;

/** `n` reads of one file by `session` (a loop), as the plugin would POST them. */
export function loopEvents(session: string, n: number, o: { parent?: string; agent?: string } = {}) {
  return Array.from({ length: n }, () => {
    seq++;
    return {
      kind: 'tool',
      session_id: session,
      ...(o.parent ? { parent_session_id: o.parent } : {}),
      agent: o.agent ?? 'sisyphus-junior',
      tool: 'read',
      call_id: `call_${seq}`,
      fingerprint: read.fingerprint,
      target: read.target,
      exit: 0,
      landed: false,
      ts: Date.now(),
    };
  });
}
