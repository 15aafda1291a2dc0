import { z } from 'zod';
import type { Mode, ModePlugin, TreeState } from '../../core/contracts.ts';
import { duration } from '../../core/duration.ts';
import { definePlugin } from '../../core/registry.ts';
import { startsActing, toast, treeGate, warnDecision } from '../common.ts';

export const AutoLimitContextOptionsSchema = z.strictObject({
  /**
   * cap: the gate returns the max context size and the router enforces it (trims or
   * refuses). overflow: the gate answers an over-cap request with a provider-shaped
   * context-overflow error so the client (opencode) compacts on its own.
   */
  mechanism: z.enum(['cap', 'overflow']).default('cap'),
  /** The cap in prompt tokens. */
  max_context_tokens: z.number().int().min(1_000).max(10_000_000).default(100_000),
  /** How long a cap stays (a Resume lifts it earlier). */
  duration: duration().prefault('1h'),
});
export type AutoLimitContextOptions = z.output<typeof AutoLimitContextOptionsSchema>;

/** Sets a cap on one session (`session`) or the whole tree (`'*'`). */
export function applyCap(t: TreeState, scope: string, o: AutoLimitContextOptions, now: number): TreeState {
  return {
    ...t,
    limits: {
      ...t.limits,
      [scope]: {
        max_context_tokens: o.max_context_tokens,
        mechanism: o.mechanism,
        since: now,
        until: now + o.duration,
      },
    },
  };
}

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
