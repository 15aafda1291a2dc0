import { z } from 'zod';
import type { ModePlugin } from '../../core/registry.ts';
import { toast, warnDecision } from '../common.ts';
import type { Mode } from '../contracts.ts';

export const AutoCompactOptionsSchema = z.strictObject({
  /** Continue the session after the compaction (opencode summarize with auto). */
  auto_continue: z.boolean().default(true),
});
export type AutoCompactOptions = z.output<typeof AutoCompactOptionsSchema>;

/** auto_compact: on looping, compact the stuck session with the incident report injected, then continue. No refusal. */
export function autoCompactMode(o: AutoCompactOptions): Mode {
  return {
    type: 'auto_compact',
    decide(tree, ev, now) {
      const d = warnDecision(tree, ev, now, 'warning');
      if (ev.type === 'verdict' && ev.to === 'looping' && ev.from !== 'looping') {
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
  };
}

export const autoCompactPlugin: ModePlugin<AutoCompactOptions, Mode> = {
  kind: 'mode',
  type: 'auto_compact',
  options: AutoCompactOptionsSchema,
  create: (_c, o) => autoCompactMode(o),
};
