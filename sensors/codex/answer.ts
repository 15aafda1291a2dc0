import type { Directive } from '../../core/wire.ts';
import { type HookAnswer, type HookContext, answer as hookAnswer } from '../claude-code/answer.ts';

// What a Codex hook answers. Codex 0.169 takes Claude Code's hook answer format (the
// same event names, `hookSpecificOutput.permissionDecision`, Stop `decision: "block"`),
// so the choice of directive and its acks are that one implementation's; only what
// Codex does differently is changed here (verified on 0.169.0, docs/codex.md):
// - `continue: false` from PreToolUse is unsupported: the hook counts as failed and the
//   tool RUNS. A stopped tree's calls are denied without it.
// - `continue: false` from PostToolUse does not stop the run, it only replaces the
//   call's output: not sent.
// - UserPromptSubmit `continue: false` does prevent the turn (a held tree's new prompt).
export function answer(ctx: HookContext, directives: readonly Directive[], ts: number): HookAnswer {
  const a = hookAnswer(ctx, directives, ts);
  if (!a.output) return a;
  if (ctx.event === 'PostToolUse') return { ...a, output: undefined };
  if (ctx.event === 'PreToolUse') {
    const { continue: _c, stopReason: _s, ...rest } = a.output;
    return { ...a, output: rest };
  }
  return a;
}
