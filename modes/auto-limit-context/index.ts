import type { Mode, ModePlugin } from '../../core/contracts.ts';
import { definePlugin } from '../../core/registry.ts';
import { type AutoLimitContextOptions, AutoLimitContextOptionsSchema, applyCap } from '../cap.ts';
import { startsActing, toast, treeGate, warnDecision } from '../common.ts';

export { type AutoLimitContextOptions, AutoLimitContextOptionsSchema, applyCap };

/** auto_limit_context: on looping, cap the stuck session's context. No stop. */
export function autoLimitContextMode(o: AutoLimitContextOptions): Mode {
  return {
    type: 'auto_limit_context',
    acts: true,
    asks: ['cap_context', 'toast'],
    decide(tree, ev, now) {
      const d = warnDecision(tree, ev, now, 'warning');
      if (startsActing(ev)) {
        d.tree = applyCap(d.tree, ev.session_id, o, now);
        d.directives.push(
          toast(
            ev.session_id,
            'Vigil: context capped',
            `${ev.agent ?? ev.session_id}: context capped at ${Math.round(o.max_context_tokens / 1000)}k tokens`,
            'warning',
          ),
        );
      }
      return d;
    },
    gate: (tree, session, now) => treeGate(tree, session, now),
  };
}

export const autoLimitContextPlugin = definePlugin<ModePlugin<AutoLimitContextOptions>>({
  kind: 'mode',
  type: 'auto_limit_context',
  options: AutoLimitContextOptionsSchema,
  create: (_c, o) => autoLimitContextMode(o),
});
