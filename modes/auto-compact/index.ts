import { z } from 'zod';
import type { Mode, ModePlugin } from '../../core/contracts.ts';
import { definePlugin } from '../../core/registry.ts';
import { startsActing, toast, treeGate, warnDecision } from '../common.ts';

export const AutoCompactOptionsSchema = z.strictObject({
  /** Continue the session after the compaction (opencode summarize with auto). */
  auto_continue: z.boolean().default(true),
});
export type AutoCompactOptions = z.output<typeof AutoCompactOptionsSchema>;

/** auto_compact: on looping, compact the stuck session with the incident report injected, then continue. No refusal. */
export function autoCompactMode(o: AutoCompactOptions): Mode {
  return {
    type: 'auto_compact',
    acts: true,
    asks: ['compact', 'toast'],
    decide(tree, ev, now) {
      const d = warnDecision(tree, ev, now, 'warning');
      if (startsActing(ev)) {
        d.directives.push({
          type: 'compact',
          session_id: ev.session_id,
          report: ev.report,
          auto_continue: o.auto_continue,
          reason: ev.reason,
        });
        d.directives.push(
          toast(ev.session_id, 'Vigil: compacting', `compacting ${ev.agent ?? ev.session_id}: ${ev.reason}`, 'warning'),
        );
      }
      return d;
    },
    gate: (tree, session, now) => treeGate(tree, session, now),
  };
}

export const autoCompactPlugin = definePlugin<ModePlugin<AutoCompactOptions>>({
  kind: 'mode',
  type: 'auto_compact',
  options: AutoCompactOptionsSchema,
  create: (_c, o) => autoCompactMode(o),
});
