import type { HookAnswer } from '../../core/sensor.ts';
import type { Directive, MarkerEvent } from '../../core/wire.ts';

// What a command hook does about the pending directives of its session's tree, the same
// for every hook agent (Claude Code, Codex CLI, Gemini CLI); each sensor's answer.ts
// only turns the act into its agent's hook output. Pure, no zod (Claude Code's bundle).
// - `stop`: the tree is stopped until a Resume (the hard stop); a call is refused too.
// - `deny`: refuse this tool call with the reason (a session refused, or a recovery's
//   report delivered in place of a compaction).
// - `nudge`: at a turn's end, go on with the report as the next user message.
// A directive the agent cannot carry out (toast, fresh) is acknowledged without effect;
// the readouts show it as missing (core/sensor.ts).

/** Where a hook call stands in the agent's loop. */
export type HookRole = 'before_tool' | 'after_tool' | 'prompt' | 'turn_end';

export interface HookContext {
  /** The agent's own event name; each sensor maps it to a role. */
  event: string;
  /** The Vigil session of the payload (a subagent's own). */
  session: string;
  /** Its parent for a subagent. */
  parent?: string;
}

export interface HookAct {
  kind: 'stop' | 'deny' | 'nudge';
  /** The reason and report the model is shown. */
  reason: string;
  /** A stop's short line (the agent prints it). */
  stopReason?: string;
}

export type { HookAnswer } from '../../core/sensor.ts';

const MAX_REASON = 9_000;
const MAX_STOP_REASON = 300;

/** The reason text a denied call or a nudge carries: Vigil's reason, then the incident report. */
export function reasonText(d: Pick<Directive, 'reason' | 'report'>, lead: string): string {
  const head = `Vigil: ${lead}${d.reason ? `: ${d.reason}` : ''}`;
  return (d.report ? `${head}\n\n${d.report}` : head).slice(0, MAX_REASON);
}

const ackOf = (d: Directive) => ({ id: d.id, root_id: d.root_id, session_id: d.session_id });

/**
 * What the hook call at `role` does, and what it acknowledges. `ts` stamps the markers.
 * The directives are those pending for the tree of `ctx.session` (as /progress or
 * /directives returns them).
 */
export function decide(
  role: HookRole | undefined,
  ctx: HookContext,
  directives: readonly Directive[],
  ts: number,
): { act?: HookAct; acks: HookAnswer['acks']; markers: MarkerEvent[] } {
  const acks: HookAnswer['acks'] = [];
  const markers: MarkerEvent[] = [];
  const mine = (d: Directive) => d.session_id === ctx.session;
  // The main conversation is the tree's root; a compaction asked of it is delivered in
  // whichever of its sessions calls next (a subagent's call runs inside the root's turn).
  const inTree = (d: Directive) => mine(d) || d.session_id === d.root_id;

  const stop = directives.find((d) => d.type === 'block' && d.scope === 'tree');
  const block = directives.find((d) => d.type === 'block' && d.scope !== 'tree' && mine(d));
  const inject = directives.find((d) => d.type === 'compact' && inTree(d));
  const abort = directives.find((d) => d.type === 'abort' && mine(d));

  // Nothing to do but acknowledge: toasts and fresh briefs (no window here), lifts (a
  // lift already removed its blocks from the queue).
  for (const d of directives)
    if ((d.type === 'toast' || d.type === 'fresh' || d.type === 'lift') && mine(d)) acks.push(ackOf(d));

  const deliverInject = (x: Directive) => {
    acks.push(ackOf(x));
    markers.push({ kind: 'compaction_done', session_id: x.session_id, call_id: `inject-${x.id}`, landed: false, ts });
    // The aborts of this recovery are done by the same deny or nudge.
    for (const d of directives)
      if (d.type === 'abort' && (mine(d) || d.session_id === x.session_id)) acks.push(ackOf(d));
  };
  // Ending the run is the abort: none is left to deny a call after the Resume.
  const stopped = (s: Directive) => ({
    act: {
      kind: 'stop' as const,
      reason: reasonText(s, 'stopped, waiting for Resume'),
      stopReason: reasonText(s, 'stopped').slice(0, MAX_STOP_REASON),
    },
    acks: [...acks, ...directives.filter((d) => d.type === 'abort').map(ackOf)],
    markers,
  });

  switch (role) {
    case 'before_tool': {
      if (stop) return stopped(stop);
      const why = inject ?? block ?? abort;
      if (!why) return { acks, markers };
      if (inject) deliverInject(inject);
      else if (abort) acks.push(ackOf(abort));
      const lead = inject ? 'this loop was stopped' : 'tool calls refused';
      return { act: { kind: 'deny', reason: reasonText(why, lead) }, acks, markers };
    }
    case 'after_tool':
    case 'prompt':
      return stop ? stopped(stop) : { acks, markers };
    case 'turn_end': {
      // A stopped run may end; a pending report is the nudge: the session goes on with it.
      if (stop || !inject) return { acks, markers };
      deliverInject(inject);
      return { act: { kind: 'nudge', reason: reasonText(inject, 'this loop was stopped') }, acks, markers };
    }
    default:
      return { acks, markers };
  }
}
