import { closeSync, mkdirSync, openSync, readFileSync, readSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { z } from 'zod/mini';
import type { Directive, ProgressEvent } from '../../core/wire.ts';
import { type LandedTracker, newLandedTracker } from '../shared/landed.ts';
import { answer } from './answer.ts';
import { clientSettings, VigilClient } from './client.ts';
import {
  assistantEvents,
  type HookPayload,
  HookPayloadSchema,
  promptEvent,
  sessionKey,
  ToolPayloadSchema,
  toolEvent,
} from './map.ts';

// `vigil hook claude-code <Event>`: one Claude Code command hook call. Reads the payload
// (stdin), turns it into progress events (map.ts), posts them, answers from the tree's
// pending directives (answer.ts). Fails open: a payload it does not understand, Vigil
// down or slow (VIGIL_HOOK_TIMEOUT_MS per request) -> no output, exit 0, the agent goes on.

/** Per-session memory between hook calls (each call is its own process): landed trackers, usage already sent. */
interface BridgeState {
  trackers: Record<string, LandedTracker>;
  /** Assistant message ids already reported, newest last (bounded). */
  sent: string[];
  /** Sessions that had a turn (the next prompt is a resume). */
  turns: string[];
}

const StateSchema = z.object({
  trackers: z._default(z.record(z.string(), z.object({ failing: z.array(z.string()).check(z.maxLength(64)) })), {}),
  sent: z._default(z.array(z.string()).check(z.maxLength(1000)), []),
  turns: z._default(z.array(z.string()).check(z.maxLength(1000)), []),
});

const SENT_MAX = 500;
/** Older model calls found in a transcript are stamped this long ago at most. */
const USAGE_AGE_MS = 5 * 60_000;
/** How much of a transcript's end is read for usage: the latest calls are there. */
const TAIL_BYTES = 256 * 1024;

const stateFile = (env: NodeJS.ProcessEnv, session: string) =>
  join(
    env.VIGIL_HOOK_STATE_DIR || join(tmpdir(), 'vigil-claude-code'),
    `${session.replace(/[^A-Za-z0-9_-]/g, '_')}.json`,
  );

function loadState(path: string): BridgeState {
  try {
    const r = StateSchema.safeParse(JSON.parse(readFileSync(path, 'utf8')));
    if (r.success) return r.data;
  } catch {
    // none yet, or unreadable: start afresh
  }
  return { trackers: {}, sent: [], turns: [] };
}

function saveState(path: string, s: BridgeState): void {
  try {
    mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
    const tmp = `${path}.${process.pid}.tmp`;
    writeFileSync(tmp, JSON.stringify(s), { mode: 0o600 });
    renameSync(tmp, path);
  } catch {
    // memory lost is a missed landed fact at worst
  }
}

/** The last TAIL_BYTES of a file (its first line may be cut; the parser skips it). */
function tail(path: string | undefined): string {
  if (!path) return '';
  try {
    const size = statSync(path).size;
    const n = Math.min(size, TAIL_BYTES);
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

/** Where a payload's own model calls are written: the main transcript, or the subagent's beside it. */
export function transcriptOf(p: HookPayload): string | undefined {
  const own = (p as { agent_transcript_path?: unknown }).agent_transcript_path;
  if (typeof own === 'string') return own;
  if (!p.transcript_path) return undefined;
  if (!p.agent_id) return p.transcript_path;
  return join(dirname(p.transcript_path), p.session_id, 'subagents', `agent-${p.agent_id}.jsonl`);
}

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

export interface HookResult {
  /** What to print on stdout ('' for no opinion). */
  stdout: string;
}

/** One hook call. Never throws; `now` stamps the events. */
export async function runHook(
  event: string,
  stdin: string,
  env: NodeJS.ProcessEnv,
  now: number = Date.now(),
): Promise<HookResult> {
  let raw: unknown;
  try {
    raw = JSON.parse(stdin);
  } catch {
    return { stdout: '' };
  }
  const base = HookPayloadSchema.safeParse(raw);
  if (!base.success) return { stdout: '' };
  const p = base.data;
  const name = p.hook_event_name || event;
  const session = sessionKey(p.session_id, p.agent_id);
  const client = new VigilClient(clientSettings(env));
  const path = stateFile(env, p.session_id);
  const state = loadState(path);
  const events: ProgressEvent[] = [];
  let dirty = false;

  const usage = () => {
    const sent = new Set(state.sent);
    for (const a of assistantEvents(tail(transcriptOf(p)), p, now)) {
      if (sent.has(a.call_id)) continue;
      // The transcript's own time, within the service's accepted window (a late first read of an old session).
      events.push({ ...a, ts: Math.min(now, Math.max(a.ts, now - USAGE_AGE_MS)) });
      state.sent.push(a.call_id);
      dirty = true;
    }
    if (state.sent.length > SENT_MAX) state.sent = state.sent.slice(-SENT_MAX);
  };

  switch (name) {
    case 'PostToolUse':
    case 'PostToolUseFailure': {
      const t = ToolPayloadSchema.safeParse(raw);
      if (!t.success) return { stdout: '' };
      usage();
      const r = toolEvent(t.data, state.trackers[session] ?? newLandedTracker(), now);
      if (r) {
        events.push(r.event);
        if (r.tracker !== state.trackers[session]) {
          state.trackers[session] = r.tracker;
          dirty = true;
        }
      }
      break;
    }
    case 'UserPromptSubmit':
    case 'SubagentStart': {
      events.push(promptEvent(p, state.turns.includes(session), now));
      if (!state.turns.includes(session)) {
        state.turns = [...state.turns, session].slice(-1000);
        dirty = true;
      }
      break;
    }
    case 'Stop':
    case 'SubagentStop':
      usage();
      break;
    case 'PreToolUse':
      break;
    default:
      return { stdout: '' };
  }
  if (dirty) saveState(path, state);

  // The tree's pending directives: in the /progress answer, or asked for (PreToolUse).
  // A subagent asks by its parent: the tree may not know the child yet.
  const named = (evs: readonly ProgressEvent[]) =>
    evs.flatMap((e) => (e.parent_session_id ? [e.session_id, e.parent_session_id] : [e.session_id]));
  const asked = p.agent_id ? p.session_id : session;
  const out = events.length
    ? await client.request('POST', '/progress', named(events), events)
    : await client.request('GET', `/directives?session=${encodeURIComponent(asked)}`, [asked]);
  const d = DirectivesOut.safeParse(out);
  if (!d.success) return { stdout: '' };
  const a = answer(
    { event: name, session, ...(p.agent_id ? { parent: p.session_id } : {}) },
    d.data.directives as Directive[],
    now,
  );
  // Acknowledged before the markers: the mode ends a recovery's refusal of an aborted
  // root on the ack, then lifts the rest on the marker.
  if (a.acks.length) {
    await client.request(
      'POST',
      '/directives/ack',
      a.acks.map((x) => x.session_id),
      { acks: a.acks },
    );
  }
  // A marker names its session, the tree's root (what it lifts).
  if (a.markers.length) await client.request('POST', '/progress', named(a.markers), a.markers);
  return { stdout: a.output ? JSON.stringify(a.output) : '' };
}

export { readStdin } from '../shared/stdin.ts';
