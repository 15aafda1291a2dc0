import type { OpencodeClient } from '@opencode-ai/sdk/v2';
import { z } from 'zod';
import type { ReplayInput } from '../core/replay.ts';
import { IdSchema, type ToolEvent, type Verdict } from '../core/wire.ts';
import { type JudgeInput, Tracker } from '../detectors/no-progress/judge.ts';
import type { NoProgressKnobs } from '../detectors/no-progress/knobs.ts';
import { type OcSession, type SessionBulk, sessionBulk, sessionToInputs } from '../sensors/opencode/convert.ts';
import { fieldsOf, issueText, opencodeClient, short } from './discover.ts';

// (The opencode.db fallback is dbread.ts.)

// Step 2 and 3 of a tick: read the sessions active since the last tick (and their
// children, whose landed work counts for them), convert them with the ONE shared
// converter (sensors/opencode/convert.ts) and judge them with the ONE judge (Tracker).
//
// Everything read from opencode is validated against zod schemas of the fields used,
// the rest passes through. A mismatch is an `issue`: the watchdog is blind there, and
// says so instead of reporting "all healthy". Transport failures (timeouts, 5xx) are
// `errors`. Neither carries a byte of content: issues name paths and expected types.

// ids go to the service as they are: the service's own id rule, or the shape changed
const Id = IdSchema;

export const SessionSchema = z.looseObject({
  id: Id,
  parentID: Id.nullish(),
  agent: z.string().max(200).nullish(),
  directory: z.string().nullish(),
  time: z.looseObject({ created: z.number(), updated: z.number() }),
});
export const SessionListSchema = z.array(SessionSchema);
export type ListedSession = z.output<typeof SessionSchema>;

const ToolPartSchema = z.looseObject({
  type: z.literal('tool'),
  tool: z.string().min(1),
  callID: z.string().min(1),
  state: z.looseObject({ status: z.enum(['pending', 'running', 'completed', 'error']) }),
});
const PartSchema = z.looseObject({ type: z.string().min(1) }).superRefine((p, ctx) => {
  if (p.type !== 'tool') return;
  const r = ToolPartSchema.safeParse(p);
  if (!r.success) for (const i of r.error.issues) ctx.addIssue({ ...i, path: i.path } as never);
});
export const MessageSchema = z.looseObject({
  info: z.looseObject({
    id: Id,
    role: z.string().min(1),
    time: z.looseObject({ created: z.number() }),
  }),
  parts: z.array(PartSchema),
});
export const MessageListSchema = z.array(MessageSchema);

/** Part types of opencode 1.18 (SDK `Part`): an assistant message made only of others is a shape change. */
export const KNOWN_PART_TYPES = new Set([
  'text',
  'subtask',
  'reasoning',
  'file',
  'tool',
  'step-start',
  'step-finish',
  'snapshot',
  'patch',
  'agent',
  'retry',
  'compaction',
]);

export interface LoadedSession {
  id: string;
  parent?: string;
  agent?: string;
  /** Updated since the window start: judged and reported. The rest are loaded for roll-up only. */
  active: boolean;
  updated: number;
  inputs: ReplayInput[];
  /** Its bulk (messages, bytes, newest model-side write) for session hygiene; read for active sessions. */
  bulk?: SessionBulk;
}

export interface Collected {
  sessions: LoadedSession[];
  /** Shape mismatches: the watchdog is blind. */
  issues: string[];
  /** Transport failures after the probe. */
  errors: string[];
  /** More sessions were active than `max_sessions`. */
  truncated: boolean;
}

export interface CollectOptions {
  since: number;
  maxSessions: number;
  timeoutMs: number;
  /**
   * Sessions already read from another server. Several opencode processes on one machine
   * share one opencode.db, so they list the same sessions: each is judged once, or its
   * calls would count twice.
   */
  seen?: Set<string>;
}

type Result = { data?: unknown; error?: unknown; response?: Response };

class Blind extends Error {}
class Transport extends Error {}
class Gone extends Error {}

/** One SDK call: network failure and 5xx are transport errors, other non-2xx and bad JSON a shape issue. */
async function call(what: string, fn: () => Promise<Result>): Promise<unknown> {
  let r: Result;
  try {
    r = await fn();
  } catch (e) {
    throw new Blind(`${what}: ${short(e)}`);
  }
  if (!r.response) {
    const e = r.error as { name?: string } | undefined;
    throw new Transport(`${what}: ${e?.name === 'TimeoutError' ? 'timed out' : 'no answer'}`);
  }
  const s = r.response.status;
  if (r.response.ok) return r.data;
  if (s === 404) throw new Gone(`${what}: 404`);
  if (s >= 500 || s === 429) throw new Transport(`${what}: answered ${s}`);
  throw new Blind(`${what}: answered ${s}`);
}

function check<T extends z.ZodType>(schema: T, data: unknown, what: string): z.output<T> {
  const r = schema.safeParse(data);
  if (!r.success) throw new Blind(`${what}: unexpected shape (${fieldsOf(r.error)})`);
  return r.data;
}

/** Assistant messages whose parts are all of unknown types: a renamed part type would otherwise look healthy. */
function unknownParts(messages: z.output<typeof MessageListSchema>): string | null {
  for (let i = 0; i < messages.length; i++) {
    const m = messages[i];
    if (m.info.role !== 'assistant' || m.parts.length === 0) continue;
    if (!m.parts.some((p) => KNOWN_PART_TYPES.has(p.type))) return `messages[${i}].parts: no known part type`;
  }
  return null;
}

/** Sessions updated since `since`, most recent first: across projects, else the server's project. */
async function listActive(c: OpencodeClient, url: string, o: CollectOptions): Promise<ListedSession[]> {
  const q = { start: o.since, limit: o.maxSessions + 1 };
  let data: unknown;
  try {
    data = await call(`${url} GET /experimental/session`, () => c.experimental.session.list(q) as Promise<Result>);
  } catch (e) {
    if (e instanceof Transport) throw e;
    // the experimental route may go away: the classic one is the stable interface
    try {
      data = await call(`${url} GET /session`, () => c.session.list(q) as Promise<Result>);
    } catch (e2) {
      // no session list at all is an API change, not a deleted session
      throw e2 instanceof Gone ? new Blind(e2.message) : e2;
    }
  }
  const list = check(SessionListSchema, data, `${url} GET /session`);
  return list.filter((s) => s.time.updated >= o.since).sort((a, b) => b.time.updated - a.time.updated);
}

function toOc(s: ListedSession): OcSession {
  return {
    id: s.id,
    ...(s.parentID ? { parentID: s.parentID } : {}),
    ...(s.agent ? { agent: s.agent } : {}),
    ...(s.directory ? { directory: s.directory } : {}),
  };
}

/** Read active sessions and their descendants from one opencode server through the SDK. */
export async function collectFromServer(url: string, o: CollectOptions): Promise<Collected> {
  const out: Collected = { sessions: [], issues: [], errors: [], truncated: false };
  const c = opencodeClient(url, o.timeoutMs);
  const fail = (e: unknown) => {
    if (e instanceof Blind) out.issues.push(e.message);
    else if (e instanceof Transport || e instanceof Gone) out.errors.push(e.message);
    else throw e;
  };
  let active: ListedSession[];
  try {
    active = await listActive(c, url, o);
  } catch (e) {
    fail(e);
    return out;
  }
  const seen = o.seen ?? new Set<string>();
  active = active.filter((s) => !seen.has(s.id));
  if (active.length > o.maxSessions) {
    out.truncated = true;
    active = active.slice(0, o.maxSessions);
  }
  // children carry landed work that counts for their parent: load them even when idle
  const loaded = new Map<string, { s: ListedSession; active: boolean }>();
  for (const s of active) loaded.set(s.id, { s, active: true });
  const maxLoaded = o.maxSessions * 4;
  const queue = [...active];
  while (queue.length && loaded.size < maxLoaded) {
    const p = queue.shift()!;
    let kids: ListedSession[];
    try {
      const what = `${url} GET /session/{id}/children`;
      kids = check(
        SessionListSchema,
        await call(what, () => c.session.children({ sessionID: p.id }) as Promise<Result>),
        what,
      );
    } catch (e) {
      if (e instanceof Gone) continue; // deleted since the list
      fail(e);
      if (e instanceof Blind) return out;
      continue;
    }
    for (const k of kids) {
      if (loaded.has(k.id) || seen.has(k.id) || loaded.size >= maxLoaded) continue;
      loaded.set(k.id, { s: { ...k, parentID: k.parentID ?? p.id }, active: false });
      queue.push(k);
    }
  }
  for (const { s, active: isActive } of loaded.values()) {
    const what = `${url} GET /session/{id}/message`;
    let messages: z.output<typeof MessageListSchema>;
    try {
      messages = check(
        MessageListSchema,
        await call(what, () => c.session.messages({ sessionID: s.id }) as Promise<Result>),
        what,
      );
      const odd = unknownParts(messages);
      if (odd) throw new Blind(`${what}: ${odd}`);
    } catch (e) {
      if (e instanceof Gone) continue;
      fail(e);
      if (e instanceof Blind) return out; // one blind call is enough to say so; do not hammer
      continue;
    }
    seen.add(s.id);
    const { inputs, issues } = sessionToInputs(toOc(s), messages);
    for (const i of issues.slice(0, 3)) out.issues.push(`${what}: ${issueText(i)}`);
    if (issues.length) continue;
    out.sessions.push({
      id: s.id,
      ...(s.parentID ? { parent: s.parentID } : {}),
      ...(s.agent ? { agent: s.agent } : {}),
      active: isActive,
      updated: s.time.updated,
      inputs,
      ...(isActive ? { bulk: sessionBulk(messages) } : {}),
    });
  }
  return out;
}

export interface JudgedSession {
  id: string;
  parent?: string;
  agent?: string;
  verdict: Verdict;
  /** The converter's tool events, in order: the only thing a digest is built from. */
  events: ToolEvent[];
}

const tsOf = (i: JudgeInput) => (i.type === 'progress' ? i.event.ts : i.type === 'request' ? i.record.ts : 0);

/**
 * Runs every loaded session's history through one Tracker, merged by time (children
 * roll up into their parents as they go), and returns the active sessions' verdicts.
 */
export function judgeSessions(sessions: readonly LoadedSession[], knobs: NoProgressKnobs): JudgedSession[] {
  const timed: { ts: number; seq: number; input: JudgeInput }[] = [];
  for (const s of sessions) for (const input of s.inputs) timed.push({ ts: tsOf(input), seq: timed.length, input });
  timed.sort((a, b) => a.ts - b.ts || a.seq - b.seq);
  const tracker = new Tracker({ ...knobs, max_sessions: Math.max(knobs.max_sessions, sessions.length + 1) });
  for (const t of timed) tracker.apply(t.input);
  const out: JudgedSession[] = [];
  for (const s of sessions) {
    if (!s.active) continue;
    const st = tracker.state(s.id);
    const verdict = tracker.verdict(s.id);
    if (verdict === undefined) continue; // no tool call and no request yet: nothing to judge
    const events: ToolEvent[] = [];
    for (const i of s.inputs) if (i.type === 'progress' && i.event.kind === 'tool') events.push(i.event);
    const agent = st?.agent ?? s.agent;
    out.push({ id: s.id, ...(s.parent ? { parent: s.parent } : {}), ...(agent ? { agent } : {}), verdict, events });
  }
  return out;
}
