import { z } from 'zod/mini';
import type { HookBridge, HookIo } from '../../core/sensor.ts';
import type { ProgressEvent } from '../../core/wire.ts';
import { eventOf, payloadOf, sessionIdOf, TrackersSchema } from '../shared/hook-io.ts';
import { newLandedTracker } from '../shared/landed.ts';
import { answer } from './answer.ts';
import { SENSOR_NAME } from './descriptor.ts';
import {
  childName,
  HookPayloadSchema,
  loopNudges,
  promptEvent,
  ToolPayloadSchema,
  toolEvent,
  type Who,
} from './map.ts';

// One Gemini CLI hook call (a command hook whose `curl` posts the payload to the local
// hook endpoint, sensors/shared/hook-host.ts; the event is the payload's
// hook_event_name): turned into progress events (map.ts), posted, answered from the
// tree's pending directives (answer.ts). Anything it does not understand, or Vigil not
// answering, is no opinion: Gemini goes on.

const Count = z._default(z.number().check(z.int(), z.minimum(0)), 0);
const StateSchema = z.object({
  trackers: TrackersSchema,
  /** Calls and turns seen (Gemini gives calls no id): the next call id. */
  n: Count,
  turns: Count,
  /** The subagent running now (between the parent's invoke_agent BeforeTool and AfterTool). */
  child: z._default(z.nullable(z.object({ id: z.string(), agent: z.string() })), null),
  children: Count,
  /** Gemini's own loop-detection nudges already reported (chat record ids). */
  nudges: z._default(z.array(z.string()).check(z.maxLength(64)), []),
  /** A turn began (BeforeAgent) and has not ended (AfterAgent). */
  open: z._default(z.boolean(), false),
  /** Gemini nudged in this turn; Vigil stopped this turn (continue: false). */
  nudged: z._default(z.boolean(), false),
  vigilStopped: z._default(z.boolean(), false),
});
type BridgeState = z.output<typeof StateSchema>;

async function handle(raw: unknown, io: HookIo): Promise<Record<string, unknown> | undefined> {
  const got = payloadOf(raw, HookPayloadSchema);
  if (!got) return undefined;
  const { p, name } = got;
  const now = io.now;
  const state: BridgeState = io.load(StateSchema, () => ({
    trackers: {},
    n: 0,
    turns: 0,
    child: null,
    children: 0,
    nudges: [],
    open: false,
    nudged: false,
    vigilStopped: false,
  }));
  const root: Who = { session_id: p.session_id };
  const events: ProgressEvent[] = [];
  let who: Who = state.child
    ? { session_id: state.child.id, parent_session_id: p.session_id, agent: state.child.agent }
    : root;
  let dirty = false;

  // Gemini's own loop detection (docs/gemini.md): a refused repeated call never reaches
  // a hook, so it is never counted; its nudge is a user record in the chat file, its
  // stop a run that ends (SessionEnd) without AfterAgent after a nudge. Both reported
  // as agent_loop markers of the main session, not judged.
  if (name === 'BeforeTool' || name === 'AfterAgent' || name === 'SessionEnd') {
    for (const id of loopNudges(io.appended(p.transcript_path))) {
      if (state.nudges.includes(id)) continue;
      state.nudges = [...state.nudges, id].slice(-64);
      events.push({ kind: 'agent_loop', session_id: p.session_id, call_id: id, landed: false, ts: now });
      if (state.open) state.nudged = true;
      dirty = true;
    }
  }

  switch (name) {
    case 'BeforeTool': {
      const t = ToolPayloadSchema.safeParse(raw);
      if (!t.success) return undefined;
      break;
    }
    case 'AfterTool': {
      const t = ToolPayloadSchema.safeParse(raw);
      if (!t.success) return undefined;
      // The parent's invoke_agent ends the child's span and is the parent's own call.
      if (t.data.tool_name === 'invoke_agent' && state.child) {
        state.child = null;
        who = root;
      }
      state.n++;
      const r = toolEvent(t.data, who, `g${state.n}`, state.trackers[who.session_id] ?? newLandedTracker(), now);
      events.push(r.event);
      state.trackers[who.session_id] = r.tracker;
      dirty = true;
      break;
    }
    case 'BeforeAgent':
      events.push(promptEvent(root, `t${state.turns + 1}`, state.turns > 0, now));
      state.turns++;
      state.open = true;
      state.nudged = false;
      state.vigilStopped = false;
      dirty = true;
      break;
    case 'AfterAgent':
      state.open = false;
      dirty = true;
      break;
    case 'SessionEnd':
      if (state.open && state.nudged && !state.vigilStopped)
        events.push({
          kind: 'agent_loop',
          session_id: p.session_id,
          call_id: `stop-t${state.turns}`,
          landed: false,
          stopped: true,
          ts: now,
        });
      state.open = false;
      dirty = true;
      break;
    default:
      return undefined;
  }

  const session = who.session_id;
  const out = await io.exchange(events, p.session_id, (ds) =>
    answer({ event: name, session, ...(who.parent_session_id ? { parent: who.parent_session_id } : {}) }, ds, now),
  );
  if (out?.continue === false) {
    state.vigilStopped = true;
    dirty = true;
  }
  // A subagent's span starts once its parent's invoke_agent is let through.
  if (name === 'BeforeTool' && !out) {
    const t = ToolPayloadSchema.parse(raw);
    if (t.tool_name === 'invoke_agent' && !state.child) {
      const agent = childName(String((t.tool_input as { agent_name?: unknown } | undefined)?.agent_name ?? 'agent'));
      state.children++;
      state.child = { id: `${p.session_id}.${agent}-${state.children}`, agent };
      dirty = true;
    }
  }
  if (dirty) io.save(state);
  return out;
}

export const geminiBridge: HookBridge = {
  sensor: SENSOR_NAME,
  sessionOf: sessionIdOf,
  // a tool's result and the session's end only report: a stop decided on them is carried out at the next call
  observes: (p) => eventOf(p) === 'AfterTool' || eventOf(p) === 'SessionEnd',
  handle,
};
