import { closeSync, mkdirSync, openSync, readFileSync, readSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { z } from 'zod/mini';
import type { AssistantEvent, Directive, ProgressEvent } from '../../core/wire.ts';
import type { HookAnswer } from './answer.ts';
import { clientSettings, hookId, VigilClient } from './client.ts';
import { readStdin } from './stdin.ts';

// The I/O every command-hook bridge does the same way: stdin read bounded in size and
// time, the payload checked, a small per-session state file between hook calls (each
// call is its own process), the tail of the agent's session log, the model calls not
// reported yet, and the exchange with Vigil (post the events or ask for the
// directives, acknowledge what was carried out). Any failure is "no opinion": the
// agent goes on (fail open). zod/mini: Claude Code's bundle stays small.

export { readStdin };

/** A schema of full zod or zod/mini: both parse the same way. */
export interface Checks<T> {
  safeParse(v: unknown): { success: true; data: T } | { success: false };
}

/** What a hook call prints on stdout ('' for no opinion). */
export interface HookResult {
  stdout: string;
}

/**
 * The hook's stdin as JSON checked by `schema`, the raw object too, and the event
 * (the payload's hook_event_name, else `event` from the command line); undefined: not
 * understood.
 */
export function payloadOf<T extends { hook_event_name?: string }>(
  stdin: string,
  schema: Checks<T>,
  event: string,
): { raw: unknown; p: T; name: string } | undefined {
  let raw: unknown;
  try {
    raw = JSON.parse(stdin);
  } catch {
    return undefined;
  }
  const r = schema.safeParse(raw);
  return r.success ? { raw, p: r.data, name: r.data.hook_event_name || event } : undefined;
}

/** The landed rule's memory per session (sensors/shared/landed.ts), as a state file keeps it. */
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

/** The state file of one session of one sensor: VIGIL_HOOK_STATE_DIR, else vigil-<sensor>/ in the temp dir. */
export const stateFile = (env: NodeJS.ProcessEnv, sensor: string, session: string): string =>
  join(
    env.VIGIL_HOOK_STATE_DIR || join(tmpdir(), `vigil-${sensor}`),
    `${session.replace(/[^A-Za-z0-9_-]/g, '_')}.json`,
  );

export function loadState<T>(path: string, schema: Checks<T>, fresh: () => T): T {
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

const SENT_MAX = 500;
/** Older model calls found in a session log are stamped this long ago at most (the service's accepted window). */
const USAGE_AGE_MS = 5 * 60_000;

/**
 * The model calls of `calls` not reported yet, by call id; `sent` (the state's memory,
 * newest last) gets them and is bounded. Each keeps the log's own time, within the
 * service's accepted window (a late first read of an old session).
 */
export function unsent(sent: string[], calls: readonly AssistantEvent[], now: number): AssistantEvent[] {
  const seen = new Set(sent);
  const out: AssistantEvent[] = [];
  for (const a of calls) {
    if (seen.has(a.call_id)) continue;
    seen.add(a.call_id);
    out.push({ ...a, ts: Math.min(now, Math.max(a.ts, now - USAGE_AGE_MS)) });
    sent.push(a.call_id);
  }
  if (sent.length > SENT_MAX) sent.splice(0, sent.length - SENT_MAX);
  return out;
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

/** Whether `session` had a turn before (its prompt is then a resume); records it in `turns` (bounded). */
export function hadTurn(turns: string[], session: string): boolean {
  if (turns.includes(session)) return true;
  turns.push(session);
  if (turns.length > 1000) turns.splice(0, turns.length - 1000);
  return false;
}

/** The sessions events name: each one's, and a child's parent. */
const named = (evs: readonly ProgressEvent[]) =>
  evs.flatMap((e) => (e.parent_session_id ? [e.session_id, e.parent_session_id] : [e.session_id]));

/** The fields of a directive the answers read (core/wire.ts DirectiveSchema has the whole shape; the service sent it). */
const DirectiveIn = z.looseObject({
  id: z.string().check(z.minLength(1), z.maxLength(64)),
  type: z.enum(['toast', 'abort', 'compact', 'lift', 'fresh', 'block']),
  session_id: z.string().check(z.minLength(1), z.maxLength(128)),
  root_id: z.string().check(z.minLength(1), z.maxLength(128)),
  scope: z.optional(z.enum(['session', 'tree'])),
  reason: z.optional(z.string().check(z.maxLength(300))),
  report: z.optional(z.string().check(z.maxLength(16_384))),
});
const DirectivesOut = z.object({ directives: z.array(DirectiveIn).check(z.maxLength(1000)) });

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
  decide: (directives: Directive[]) => HookAnswer,
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

/** The exchange as `sensor` (the client from the hook's environment): what the hook prints. */
export async function reply(
  env: NodeJS.ProcessEnv,
  sensor: string,
  events: readonly ProgressEvent[],
  ask: string,
  decide: (directives: Directive[]) => HookAnswer,
): Promise<HookResult> {
  const out = await exchange(new VigilClient(clientSettings(env), hookId(sensor)), events, ask, decide);
  return { stdout: out ? JSON.stringify(out) : '' };
}

/**
 * The entry of a bundled hook (sensors/<sensor>/hook/main.ts): `node hook.mjs <Event>`,
 * payload on stdin. Whatever happens it exits 0, within a bounded time, printing an
 * answer or nothing.
 */
export async function hookMain(
  runHook: (event: string, stdin: string, env: NodeJS.ProcessEnv) => Promise<{ stdout: string }>,
  argv: readonly string[] = process.argv.slice(2),
): Promise<void> {
  // The last resort: no opinion rather than a slow agent (per-request timeouts are shorter).
  setTimeout(() => process.exit(0), 4_500).unref();
  try {
    const r = await runHook(argv[0] ?? '', await readStdin(), process.env);
    if (r.stdout) process.stdout.write(r.stdout);
  } catch {
    // fail open
  }
  process.exitCode = 0;
}
