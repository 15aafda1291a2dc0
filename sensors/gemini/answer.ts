import type { Directive } from '../../core/wire.ts';
import { type HookAnswer, type HookContext, answer as hookAnswer } from '../claude-code/answer.ts';

// What a Gemini CLI hook answers. The choice of directive and its acks are the one
// implementation the Claude Code answer has (its event names: the same roles under
// other names); the output is turned into Gemini's shapes (verified on 0.61.0,
// docs/gemini.md):
// - BeforeTool `{"decision":"deny","reason"}`: the call does not run, the model gets
//   the reason, the loop goes on.
// - BeforeTool `{"continue":false,"stopReason"}`: the run ends without running the call
//   (from AfterTool: after it ran).
// - AfterAgent `{"decision":"block","reason"}`: the run goes on with the reason as a
//   new user message.

const ROLE: Record<string, string> = {
  BeforeTool: 'PreToolUse',
  AfterTool: 'PostToolUse',
  BeforeAgent: 'UserPromptSubmit',
  AfterAgent: 'Stop',
};

export function answer(ctx: HookContext, directives: readonly Directive[], ts: number): HookAnswer {
  const a = hookAnswer({ ...ctx, event: ROLE[ctx.event] ?? ctx.event }, directives, ts);
  const o = a.output as
    | {
        continue?: boolean;
        stopReason?: string;
        decision?: string;
        reason?: string;
        hookSpecificOutput?: { permissionDecision?: string; permissionDecisionReason?: string };
      }
    | undefined;
  if (!o) return a;
  if (o.continue === false) return { ...a, output: { continue: false, stopReason: o.stopReason ?? 'Vigil: stopped' } };
  if (o.hookSpecificOutput?.permissionDecision === 'deny')
    return { ...a, output: { decision: 'deny', reason: o.hookSpecificOutput.permissionDecisionReason ?? 'Vigil' } };
  if (o.decision === 'block') return { ...a, output: { decision: 'block', reason: o.reason ?? 'Vigil' } };
  return { ...a, output: undefined };
}
