import { z } from 'zod';
import type { Mode, ModePlugin } from '../../core/contracts.ts';
import { definePlugin } from '../../core/registry.ts';
import { treeGate, warnDecision } from '../common.ts';

export const WarnOptionsSchema = z.strictObject({
  /** Severity of a looping tree in warn mode: nothing acts on it, so a person should. */
  looping_severity: z.enum(['warning', 'critical']).default('critical'),
});
export type WarnOptions = z.output<typeof WarnOptionsSchema>;

/** warn: warnings only (a /metrics warning, a toast, an alert). The neutral default. */
export function warnMode(o: WarnOptions): Mode {
  return {
    type: 'warn',
    acts: false,
    asks: ['toast'],
    decide: (tree, ev, now) => warnDecision(tree, ev, now, o.looping_severity),
    // Nothing is refused in warn mode, but a tree stopped under another mode stays stopped.
    gate: (tree, session, now) => treeGate(tree, session, now),
  };
}

export const warnPlugin = definePlugin<ModePlugin<WarnOptions>>({
  kind: 'mode',
  type: 'warn',
  options: WarnOptionsSchema,
  create: (_c, o) => warnMode(o),
});
