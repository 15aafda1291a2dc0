import { dirname, join } from 'node:path';
import type { ProgressEvent } from '../../core/wire.ts';
import {
  freshLogState,
  type HookResult,
  hadTurn,
  LogStateSchema,
  loadState,
  payloadOf,
  reply,
  saveState,
  stateFile,
  tail,
  unsent,
} from '../shared/hook-io.ts';
import { newLandedTracker } from '../shared/landed.ts';
import { answer } from './answer.ts';
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

const SENSOR = 'claude-code';

/** Where a payload's own model calls are written: the main transcript, or the subagent's beside it. */
export function transcriptOf(p: HookPayload): string | undefined {
  const own = (p as { agent_transcript_path?: unknown }).agent_transcript_path;
  if (typeof own === 'string') return own;
  if (!p.transcript_path) return undefined;
  if (!p.agent_id) return p.transcript_path;
  return join(dirname(p.transcript_path), p.session_id, 'subagents', `agent-${p.agent_id}.jsonl`);
}

/** One hook call. Never throws; `now` stamps the events. */
export async function runHook(
  event: string,
  stdin: string,
  env: NodeJS.ProcessEnv,
  now: number = Date.now(),
): Promise<HookResult> {
  const got = payloadOf(stdin, HookPayloadSchema, event);
  if (!got) return { stdout: '' };
  const { raw, p, name } = got;
  const session = sessionKey(p.session_id, p.agent_id);
  const path = stateFile(env, SENSOR, p.session_id);
  const state = loadState(path, LogStateSchema, freshLogState);
  const events: ProgressEvent[] = [];
  let dirty = false;

  const usage = () => {
    const fresh = unsent(state.sent, assistantEvents(tail(transcriptOf(p)), p, now), now);
    events.push(...fresh);
    if (fresh.length) dirty = true;
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
      const again = hadTurn(state.turns, session);
      events.push(promptEvent(p, again, now));
      if (!again) dirty = true;
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
  // A subagent asks by its parent: the tree may not know the child yet.
  return reply(env, SENSOR, events, p.agent_id ? p.session_id : session, (ds) =>
    answer({ event: name, session, ...(p.agent_id ? { parent: p.session_id } : {}) }, ds, now),
  );
}
