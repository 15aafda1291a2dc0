import { closeSync, mkdirSync, openSync, readFileSync, readSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { z } from 'zod';
import { type Directive, DirectiveSchema, type MarkerEvent, type ProgressEvent } from '../../core/wire.ts';

// The I/O every command-hook bridge does the same way: stdin read bounded in size and
// time, a small per-session state file between hook calls (each call is its own
// process), the tail of the agent's session log, and the exchange with Vigil (post the
// events or ask for the directives, acknowledge what was carried out). Any failure is
// "no opinion": the agent goes on (fail open).

export { readStdin } from './stdin.ts';

/** The state file of one session of one sensor: VIGIL_HOOK_STATE_DIR, else vigil-<sensor>/ in the temp dir. */
export const stateFile = (env: NodeJS.ProcessEnv, sensor: string, session: string): string =>
  join(
    env.VIGIL_HOOK_STATE_DIR || join(tmpdir(), `vigil-${sensor}`),
    `${session.replace(/[^A-Za-z0-9_-]/g, '_')}.json`,
  );

export function loadState<T>(path: string, schema: z.ZodType<T>, fresh: () => T): T {
  try {
    const r = schema.safeParse(JSON.parse(readFileSync(path, 'utf8')));
    if (r.success) return r.data;
  } catch {
    // none yet, or unreadable: start afresh
  }
  return fresh();
}

export function saveState(path: string, s: unknown): void {
  try {
    mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
    const tmp = `${path}.${process.pid}.tmp`;
    writeFileSync(tmp, JSON.stringify(s), { mode: 0o600 });
    renameSync(tmp, path);
  } catch {
    // memory lost is a missed landed fact at worst
  }
}

/** The last `bytes` of a file (its first line may be cut: parsers skip it); '' when unreadable. */
export function tail(path: string | undefined, bytes = 256 * 1024): string {
  if (!path) return '';
  try {
    const size = statSync(path).size;
    const n = Math.min(size, bytes);
    const buf = Buffer.alloc(n);
    const fd = openSync(path, 'r');
    try {
      readSync(fd, buf, 0, n, size - n);
    } finally {
      closeSync(fd);
    }
    return buf.toString('utf8');
  } catch {
    return '';
  }
}

/** What a sensor's answer step returns (sensors/claude-code/answer.ts has the shape). */
export interface Decision {
  output?: Record<string, unknown>;
  acks: { id: string; root_id: string; session_id: string }[];
  markers: MarkerEvent[];
}

export interface VigilRequester {
  /** `sessions`: the sessions the request names (each gets its session key). */
  request(
    method: 'GET' | 'POST',
    path: string,
    sessions: readonly string[],
    body?: unknown,
  ): Promise<unknown | undefined>;
}

/** The sessions events name: each one's, and a child's parent. */
const named = (evs: readonly ProgressEvent[]) =>
  evs.flatMap((e) => (e.parent_session_id ? [e.session_id, e.parent_session_id] : [e.session_id]));

const DirectivesOut = z.object({ directives: z.array(DirectiveSchema).max(1000) });

/**
 * Posts `events` (the /progress answer has the tree's pending directives) or, with none,
 * asks for the directives of `ask`'s tree; lets `decide` answer; acknowledges what it
 * carried out before posting its markers (a recovery ends an aborted root's refusal on
 * the ack, then lifts the rest on the marker). Undefined: no opinion.
 */
export async function exchange(
  client: VigilRequester,
  events: readonly ProgressEvent[],
  ask: string,
  decide: (directives: Directive[]) => Decision,
): Promise<Record<string, unknown> | undefined> {
  const out = events.length
    ? await client.request('POST', '/progress', named(events), events)
    : await client.request('GET', `/directives?session=${encodeURIComponent(ask)}`, [ask]);
  const d = DirectivesOut.safeParse(out);
  if (!d.success) return undefined;
  const a = decide(d.data.directives as Directive[]);
  if (a.acks.length)
    await client.request(
      'POST',
      '/directives/ack',
      a.acks.map((x) => x.session_id),
      { acks: a.acks },
    );
  if (a.markers.length) await client.request('POST', '/progress', named(a.markers), a.markers);
  return a.output;
}
