import { z } from 'zod';
import type { TreeState } from '../core/contracts.ts';
import { duration } from '../core/duration.ts';

// The context cap, shared by the modes that set one (auto_limit_context, and
// auto_recover's second stage): a mode plugin imports no other mode plugin.

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
