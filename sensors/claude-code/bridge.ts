import { dirname, join } from 'node:path';
import type { HookBridge, HookIo } from '../../core/sensor.ts';
import type { ProgressEvent } from '../../core/wire.ts';
import { eventOf, freshLogState, hadTurn, LogStateSchema, payloadOf, sessionIdOf, unsent } from '../shared/hook-io.ts';
import { newLandedTracker } from '../shared/landed.ts';
import { answer } from './answer.ts';
import { SENSOR_NAME } from './descriptor.ts';
import {
  assistantEvents,
  type HookPayload,
  HookPayloadSchema,
  promptEvent,
  sessionKey,
  ToolPayloadSchema,
  toolEvent,
} from './map.ts';

// One Claude Code hook call (an http hook posting to the local hook endpoint,
// sensors/shared/hook-host.ts): the payload turned into progress events (map.ts),
// posted, answered from the tree's pending directives (answer.ts). Anything it does not
// understand, or Vigil not answering, is no opinion: the agent goes on.

/** Where a payload's own model calls are written: the main transcript, or the subagent's beside it. */
export function transcriptOf(p: HookPayload): string | undefined {
  const own = (p as { agent_transcript_path?: unknown }).agent_transcript_path;
  if (typeof own === 'string') return own;
  if (!p.transcript_path) return undefined;
  if (!p.agent_id) return p.transcript_path;
  return join(dirname(p.transcript_path), p.session_id, 'subagents', `agent-${p.agent_id}.jsonl`);
}

async function handle(raw: unknown, io: HookIo): Promise<Record<string, unknown> | undefined> {
  const got = payloadOf(raw, HookPayloadSchema);
  if (!got) return undefined;
  const { p, name } = got;
  const now = io.now;
  const session = sessionKey(p.session_id, p.agent_id);
  const state = io.load(LogStateSchema, freshLogState);
  const events: ProgressEvent[] = [];
  let dirty = false;

  const usage = () => {
    const fresh = unsent(state.sent, assistantEvents(io.appended(transcriptOf(p)), p, now), now);
    events.push(...fresh);
    if (fresh.length) dirty = true;
  };

  switch (name) {
    case 'PostToolUse':
    case 'PostToolUseFailure': {
      const t = ToolPayloadSchema.safeParse(raw);
      if (!t.success) return undefined;
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
      return undefined;
  }
  if (dirty) io.save(state);
  // A subagent asks by its parent: the tree may not know the child yet.
  return io.exchange(events, p.agent_id ? p.session_id : session, (ds) =>
    answer({ event: name, session, ...(p.agent_id ? { parent: p.session_id } : {}) }, ds, now),
  );
}

/** Calls whose answer Vigil never uses to act: a tool's result, a subagent's start and end (answered at once). */
const OBSERVED = new Set(['PostToolUse', 'PostToolUseFailure', 'SubagentStart', 'SubagentStop']);

export const claudeCodeBridge: HookBridge = {
  sensor: SENSOR_NAME,
  sessionOf: sessionIdOf,
  observes: (p) => OBSERVED.has(eventOf(p)),
  handle,
};
