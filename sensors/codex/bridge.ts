import { z } from 'zod/mini';
import type { HookBridge, HookIo } from '../../core/sensor.ts';
import type { ProgressEvent } from '../../core/wire.ts';
import { eventOf, hadTurn, LogStateSchema, payloadOf, sessionIdOf, unsent } from '../shared/hook-io.ts';
import { newLandedTracker } from '../shared/landed.ts';
import { answer } from './answer.ts';
import { SENSOR_NAME } from './descriptor.ts';
import {
  finishedCalls,
  type HookPayload,
  HookPayloadSchema,
  promptEvent,
  readRollout,
  sessionOf,
  toolEvent,
} from './map.ts';

// One Codex hook call (a command hook whose `curl` posts the payload to the local hook
// endpoint, sensors/shared/hook-host.ts). Codex writes every finished call, its output
// (with the exit code the hook payload lacks) and every model call's usage to the
// thread's rollout (transcript_path) before it asks the model again, so the calls are
// read from there: at each PreToolUse, at Stop, and for a subagent at its SubagentStop
// (its own rollout). That is the mapping replay uses (replay.ts), and one hook process
// per tool call instead of two (no PostToolUse hook: docs/codex.md, Cost). Anything it
// does not understand, or Vigil not answering, is no opinion: Codex goes on.

const StateSchema = z.object({
  ...LogStateSchema.shape,
  /** Tool call ids already reported, newest last (bounded). */
  calls: z._default(z.array(z.string()).check(z.maxLength(1000)), []),
});
type BridgeState = z.output<typeof StateSchema>;
const fresh = (): BridgeState => ({ trackers: {}, sent: [], turns: [], calls: [] });

/** The finished calls and model calls of `path` (a rollout) not reported yet, as events of `ids`' session. */
function catchUp(
  io: HookIo,
  state: BridgeState,
  path: string | undefined,
  ids: Pick<HookPayload, 'session_id' | 'agent_id' | 'agent_type' | 'cwd'>,
): ProgressEvent[] {
  const r = readRollout(io.tail(path), ids, io.now);
  const session = sessionOf(ids);
  const out: ProgressEvent[] = [];
  for (const c of unsent(state.calls, finishedCalls(r), io.now)) {
    const cwd = ids.cwd ?? r.cwd;
    const done = toolEvent(
      {
        ids,
        name: c.name,
        input: c.input,
        call_id: c.call_id,
        output: c.output,
        ...(cwd ? { cwd } : {}),
        ...(c.exit !== undefined ? { exit: c.exit } : {}),
      },
      state.trackers[session] ?? newLandedTracker(),
      c.ts,
    );
    state.trackers[session] = done.tracker;
    out.push(done.event);
  }
  out.push(...unsent(state.sent, r.models, io.now));
  return out;
}

async function handle(raw: unknown, io: HookIo): Promise<Record<string, unknown> | undefined> {
  const got = payloadOf(raw, HookPayloadSchema);
  if (!got) return undefined;
  const { p, name } = got;
  const session = sessionOf(p);
  const state = io.load(StateSchema, fresh);
  const events: ProgressEvent[] = [];

  switch (name) {
    // A subagent's thread fires its own UserPromptSubmit (with agent_id): SubagentStart adds nothing.
    case 'UserPromptSubmit':
      events.push(promptEvent(p, hadTurn(state.turns, session), io.now));
      break;
    case 'PreToolUse':
    case 'PostToolUse':
    case 'Stop':
      events.push(...catchUp(io, state, p.transcript_path, p));
      break;
    // A subagent's Stop names its own rollout apart.
    case 'SubagentStop':
      events.push(...catchUp(io, state, p.agent_transcript_path, p));
      break;
    default:
      return undefined;
  }
  if (events.length) io.save(state);
  // A subagent asks by its parent: the tree may not know the child yet.
  return io.exchange(events, p.agent_id ? p.session_id : session, (ds) =>
    answer({ event: name, session, ...(p.agent_id ? { parent: p.session_id } : {}) }, ds, io.now),
  );
}

export const codexBridge: HookBridge = {
  sensor: SENSOR_NAME,
  sessionOf: sessionIdOf,
  // a subagent's end only reports (its hook is async in Codex too)
  observes: (p) => eventOf(p) === 'SubagentStop',
  handle,
};
