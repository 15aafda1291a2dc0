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
import { SENSOR_NAME } from './descriptor.ts';
import { HookPayloadSchema, promptEvent, readRollout, sessionOf, ToolPayloadSchema, toolEvent } from './map.ts';

// `vigil hook codex <Event>`: one Codex command hook call. Reads the payload (stdin),
// turns it into progress events (map.ts), posts them, answers from the tree's pending
// directives (answer.ts). The hook payload has no exit code and no token usage: both
// are read from the thread's rollout (transcript_path), whose tail already holds the
// finished call and the model calls before it. Fails open: a payload it does not
// understand, Vigil down or slow (VIGIL_HOOK_TIMEOUT_MS per request) -> no output,
// exit 0, Codex goes on.

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
  const session = sessionOf(p);
  const path = stateFile(env, SENSOR_NAME, p.session_id);
  const state = loadState(path, LogStateSchema, freshLogState);
  const events: ProgressEvent[] = [];
  let dirty = false;
  // A subagent's Stop names its own rollout apart; its other hooks have it in transcript_path.
  const rolloutPath = name === 'SubagentStop' ? p.agent_transcript_path : p.transcript_path;
  const rollout = () => readRollout(tail(rolloutPath), p, now);

  const usage = (r: ReturnType<typeof rollout>) => {
    const fresh = unsent(state.sent, r.models, now);
    events.push(...fresh);
    if (fresh.length) dirty = true;
  };

  switch (name) {
    case 'PostToolUse': {
      const t = ToolPayloadSchema.safeParse(raw);
      if (!t.success) return { stdout: '' };
      const r = rollout();
      usage(r);
      const seen = r.calls.find((c) => c.call_id === t.data.tool_use_id);
      const output =
        typeof t.data.tool_response === 'string' ? t.data.tool_response : JSON.stringify(t.data.tool_response ?? '');
      const done = toolEvent(
        {
          ids: p,
          name: t.data.tool_name,
          input: t.data.tool_input,
          call_id: t.data.tool_use_id,
          ...(p.cwd ? { cwd: p.cwd } : {}),
          // the rollout's output has the exit line the hook's lacks
          output: seen?.output ?? output,
          ...(seen?.exit !== undefined ? { exit: seen.exit } : {}),
        },
        state.trackers[session] ?? newLandedTracker(),
        now,
      );
      events.push(done.event);
      if (done.tracker !== state.trackers[session]) {
        state.trackers[session] = done.tracker;
        dirty = true;
      }
      break;
    }
    // A subagent's thread fires its own UserPromptSubmit (with agent_id): SubagentStart adds nothing.
    case 'UserPromptSubmit': {
      const again = hadTurn(state.turns, session);
      events.push(promptEvent(p, again, now));
      if (!again) dirty = true;
      break;
    }
    case 'Stop':
    case 'SubagentStop':
      usage(rollout());
      break;
    case 'PreToolUse':
      break;
    default:
      return { stdout: '' };
  }
  if (dirty) saveState(path, state);
  // A subagent asks by its parent: the tree may not know the child yet.
  return reply(env, SENSOR_NAME, events, p.agent_id ? p.session_id : session, (ds) =>
    answer({ event: name, session, ...(p.agent_id ? { parent: p.session_id } : {}) }, ds, now),
  );
}
