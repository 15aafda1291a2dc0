import type { Directive } from '../../core/wire.ts';
import { decide, type HookAnswer, type HookContext, type HookRole } from '../shared/answer.ts';

// What a Claude Code hook answers (docs/claude-code.md); what to do is decided once for
// every hook agent (sensors/shared/answer.ts). Verified on 2.1.328:
// - PreToolUse `hookSpecificOutput.permissionDecision: "deny"` with a reason: the tool
//   does not run, the model gets the reason as the call's error, the run goes on.
// - `continue: false`: the run ends (from PreToolUse only after that tool ran, so the
//   hard stop denies the call as well).
// - Stop `decision: "block"` with a reason: the session goes on with the reason as a
//   user message.

export type { HookAnswer, HookContext } from '../shared/answer.ts';

const ROLE: Record<string, HookRole> = {
  PreToolUse: 'before_tool',
  PostToolUse: 'after_tool',
  PostToolUseFailure: 'after_tool',
  UserPromptSubmit: 'prompt',
  Stop: 'turn_end',
};

const deny = (reason: string) => ({
  hookSpecificOutput: { hookEventName: 'PreToolUse', permissionDecision: 'deny', permissionDecisionReason: reason },
});

export function answer(ctx: HookContext, directives: readonly Directive[], ts: number): HookAnswer {
  const role = ROLE[ctx.event];
  const { act, acks, markers } = decide(role, ctx, directives, ts);
  if (!act) return { acks, markers };
  const output =
    act.kind === 'nudge'
      ? { decision: 'block', reason: act.reason }
      : act.kind === 'deny'
        ? deny(act.reason)
        : role === 'before_tool'
          ? { continue: false, stopReason: act.stopReason, ...deny(act.reason) }
          : { continue: false, stopReason: act.stopReason };
  return { output, acks, markers };
}
