import type { Directive, MarkerEvent } from '../../core/wire.ts';

// What a Claude Code hook answers, from the pending directives of the session's tree
// (docs/claude-code.md). Pure. Verified on 2.1.328:
// - PreToolUse `hookSpecificOutput.permissionDecision: "deny"` with a reason: the tool
//   does not run, the model gets the reason as the call's error, the run goes on.
// - `continue: false`: the run ends (from PreToolUse only after that tool ran, so the
//   hard stop denies the call as well).
// - Stop `decision: "block"` with a reason: the session goes on with the reason as a
//   user message.
// A directive the agent cannot carry out (toast) is acknowledged without effect; the
// readouts show it as missing (core/sensor.ts).

export type HookEvent = 'PreToolUse' | 'PostToolUse' | 'PostToolUseFailure' | 'UserPromptSubmit' | 'Stop' | string;

export interface HookContext {
  event: HookEvent;
  /** The Vigil session of the payload (a subagent's own). */
  session: string;
  /** Its parent (the payload's session_id) for a subagent. */
  parent?: string;
}

export interface HookAnswer {
  /** The JSON printed on stdout (absent: no opinion, exit 0 with nothing printed). */
  output?: Record<string, unknown>;
  /** Directives carried out (or that this agent cannot carry out), to acknowledge. */
  acks: { id: string; root_id: string; session_id: string }[];
  /** compaction_done markers: the recovery's report reached the model in place of a compaction. */
  markers: MarkerEvent[];
}

const MAX_REASON = 9_000;

/** The reason text a denied call or a Stop block carries: Vigil's reason, then the incident report. */
export function reasonText(d: Pick<Directive, 'reason' | 'report'>, lead: string): string {
  const head = `Vigil: ${lead}${d.reason ? `: ${d.reason}` : ''}`;
  return (d.report ? `${head}\n\n${d.report}` : head).slice(0, MAX_REASON);
}

const ackOf = (d: Directive) => ({ id: d.id, root_id: d.root_id, session_id: d.session_id });

/**
 * The hook's answer. `ts` stamps the markers. The directives are those pending for
 * the tree of `ctx.session` (as /progress or /directives returns them).
 */
export function answer(ctx: HookContext, directives: readonly Directive[], ts: number): HookAnswer {
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

  const deliverInject = () => {
    if (!inject) return;
    acks.push(ackOf(inject));
    markers.push({
      kind: 'compaction_done',
      session_id: inject.session_id,
      call_id: `inject-${inject.id}`,
      landed: false,
      ts,
    });
    // The aborts of this recovery are done by the same deny.
    for (const d of directives)
      if (d.type === 'abort' && (mine(d) || d.session_id === inject.session_id)) acks.push(ackOf(d));
  };

  switch (ctx.event) {
    case 'PreToolUse': {
      if (stop) {
        return {
          output: {
            continue: false,
            stopReason: reasonText(stop, 'stopped').slice(0, 300),
            hookSpecificOutput: {
              hookEventName: 'PreToolUse',
              permissionDecision: 'deny',
              permissionDecisionReason: reasonText(stop, 'stopped, waiting for Resume'),
            },
          },
          acks: [...acks, ...directives.filter((d) => d.type === 'abort').map(ackOf)],
          markers,
        };
      }
      const why = inject ?? block ?? abort;
      if (!why) return { acks, markers };
      if (inject) deliverInject();
      else if (abort) acks.push(ackOf(abort));
      return {
        output: {
          hookSpecificOutput: {
            hookEventName: 'PreToolUse',
            permissionDecision: 'deny',
            permissionDecisionReason: reasonText(why, inject ? 'this loop was stopped' : 'tool calls refused'),
          },
        },
        acks,
        markers,
      };
    }
    case 'PostToolUse':
    case 'PostToolUseFailure':
    case 'UserPromptSubmit': {
      if (!stop) return { acks, markers };
      // Ending the run is the abort: none is left to deny a call after the Resume.
      return {
        output: { continue: false, stopReason: reasonText(stop, 'stopped').slice(0, 300) },
        acks: [...acks, ...directives.filter((d) => d.type === 'abort').map(ackOf)],
        markers,
      };
    }
    case 'Stop': {
      // A stopped run may end; a pending report is the nudge: the session goes on with it.
      if (stop || !inject) return { acks, markers };
      deliverInject();
      return { output: { decision: 'block', reason: reasonText(inject, 'this loop was stopped') }, acks, markers };
    }
    default:
      return { acks, markers };
  }
}
