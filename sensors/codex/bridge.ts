import { z } from 'zod';
import type { ProgressEvent } from '../../core/wire.ts';
import { clientSettings, HOOK_VERSION, VigilClient } from '../claude-code/client.ts';
import { exchange, loadState, saveState, stateFile, tail } from '../shared/hook-io.ts';
import { type LandedTracker, newLandedTracker } from '../shared/landed.ts';
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

export const HOOK_ID = `vigil-${SENSOR_NAME}/${HOOK_VERSION}`;

const StateSchema = z.object({
  trackers: z.record(z.string(), z.object({ failing: z.array(z.string()).max(64) })).default({}),
  sent: z.array(z.string()).max(1000).default([]),
  turns: z.array(z.string()).max(1000).default([]),
});
type BridgeState = z.output<typeof StateSchema>;
const SENT_MAX = 500;
/** Older model calls found in a rollout are stamped this long ago at most (the service's accepted window). */
const USAGE_AGE_MS = 5 * 60_000;

export interface HookResult {
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
  const session = sessionOf(p);
  const path = stateFile(env, SENSOR_NAME, p.session_id);
  const state: BridgeState = loadState(path, StateSchema, () => ({ trackers: {}, sent: [], turns: [] }));
  const events: ProgressEvent[] = [];
  let dirty = false;
  // A subagent's Stop names its own rollout apart; its other hooks have it in transcript_path.
  const rolloutPath = name === 'SubagentStop' ? p.agent_transcript_path : p.transcript_path;
  const rollout = () => readRollout(tail(rolloutPath), p, now);

  const usage = (r: ReturnType<typeof rollout>) => {
    const sent = new Set(state.sent);
    for (const a of r.models) {
      if (sent.has(a.call_id)) continue;
      events.push({ ...a, ts: Math.min(now, Math.max(a.ts, now - USAGE_AGE_MS)) });
      state.sent.push(a.call_id);
      dirty = true;
    }
    if (state.sent.length > SENT_MAX) state.sent = state.sent.slice(-SENT_MAX);
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
        state.trackers[session] = done.tracker as LandedTracker & { failing: string[] };
        dirty = true;
      }
      break;
    }
    // A subagent's thread fires its own UserPromptSubmit (with agent_id): SubagentStart adds nothing.
    case 'UserPromptSubmit': {
      events.push(promptEvent(p, state.turns.includes(session), now));
      if (!state.turns.includes(session)) {
        state.turns = [...state.turns, session].slice(-1000);
        dirty = true;
      }
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

  const client = new VigilClient(clientSettings(env), HOOK_ID);
  // A subagent asks by its parent: the tree may not know the child yet.
  const out = await exchange(client, events, p.agent_id ? p.session_id : session, (ds) =>
    answer({ event: name, session, ...(p.agent_id ? { parent: p.session_id } : {}) }, ds, now),
  );
  return { stdout: out ? JSON.stringify(out) : '' };
}
