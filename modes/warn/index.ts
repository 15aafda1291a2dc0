import { z } from 'zod';
import type { ModePlugin } from '../../core/registry.ts';
import { warnDecision } from '../common.ts';
import type { Mode } from '../contracts.ts';

export const WarnOptionsSchema = z.strictObject({
  /** Severity of a looping tree in warn mode: nothing acts on it, so a person should. */
  looping_severity: z.enum(['warning', 'critical']).default('critical'),
});
export type WarnOptions = z.output<typeof WarnOptionsSchema>;

/** warn: warnings only (a /metrics warning, a toast, an alert). The neutral default. */
export function warnMode(o: WarnOptions): Mode {
  return { type: 'warn', decide: (tree, ev, now) => warnDecision(tree, ev, now, o.looping_severity) };
}

export const warnPlugin: ModePlugin<WarnOptions, Mode> = {
  kind: 'mode',
  type: 'warn',
  options: WarnOptionsSchema,
  create: (_c, o) => warnMode(o),
};
