import type { Directive } from '../../core/wire.ts';
import { decide, type HookAnswer, type HookContext, type HookRole } from '../shared/answer.ts';

// What a Gemini CLI hook answers; what to do is decided once for every hook agent
// (sensors/shared/answer.ts), the output is Gemini's (verified on 0.61.0, docs/gemini.md):
// - BeforeTool `{"decision":"deny","reason"}`: the call does not run, the model gets
//   the reason, the loop goes on.
// - BeforeTool `{"continue":false,"stopReason"}`: the run ends without running the call
//   (from AfterTool: after it ran).
// - AfterAgent `{"decision":"block","reason"}`: the run goes on with the reason as a
//   new user message.

const ROLE: Record<string, HookRole> = {
  BeforeTool: 'before_tool',
  AfterTool: 'after_tool',
  BeforeAgent: 'prompt',
  AfterAgent: 'turn_end',
};

export function answer(ctx: HookContext, directives: readonly Directive[], ts: number): HookAnswer {
  const { act, acks, markers } = decide(ROLE[ctx.event], ctx, directives, ts);
  if (!act) return { acks, markers };
  const output =
    act.kind === 'stop'
      ? { continue: false, stopReason: act.stopReason }
      : { decision: act.kind === 'deny' ? 'deny' : 'block', reason: act.reason };
  return { output, acks, markers };
}
