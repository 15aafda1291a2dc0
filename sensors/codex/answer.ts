import type { Directive } from '../../core/wire.ts';
import { decide, type HookAnswer, type HookContext, type HookRole } from '../shared/answer.ts';

// What a Codex hook answers. Codex 0.169 takes Claude Code's hook output format (the
// same event names, `hookSpecificOutput.permissionDecision`, Stop `decision: "block"`);
// what to do is decided once for every hook agent (sensors/shared/answer.ts). What Codex
// does differently (verified on 0.169.0, docs/codex.md):
// - `continue: false` from PreToolUse is unsupported: the hook counts as failed and the
//   tool RUNS. A stopped tree's calls are denied without it.
// - `continue: false` from PostToolUse does not stop the run, it only replaces the
//   call's output: not sent.
// - UserPromptSubmit `continue: false` does prevent the turn (a held tree's new prompt).

const ROLE: Record<string, HookRole> = {
  PreToolUse: 'before_tool',
  PostToolUse: 'after_tool',
  UserPromptSubmit: 'prompt',
  Stop: 'turn_end',
};

export function answer(ctx: HookContext, directives: readonly Directive[], ts: number): HookAnswer {
  const role = ROLE[ctx.event];
  const { act, acks, markers } = decide(role, ctx, directives, ts);
  if (!act || role === 'after_tool') return { acks, markers };
  const output =
    act.kind === 'nudge'
      ? { decision: 'block', reason: act.reason }
      : role === 'before_tool'
        ? {
            hookSpecificOutput: {
              hookEventName: 'PreToolUse',
              permissionDecision: 'deny',
              permissionDecisionReason: act.reason,
            },
          }
        : { continue: false, stopReason: act.stopReason };
  return { output, acks, markers };
}
