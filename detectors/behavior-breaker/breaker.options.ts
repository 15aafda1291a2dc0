import { z } from 'zod';
import { duration } from '../../core/duration.ts';

// The `breaker` config section (docs/detection.md, the behavior breaker): trip a model whose sessions stall
// well above the other models' rate on the same window's traffic. Live through Knobs.

export const BreakerOptionsSchema = z
  .strictObject({
    /** Off: no trips and no routing skips; traffic is still recorded so turning it on has a window. */
    enabled: z.boolean().default(true),
    /** Rolling window for traffic and stall verdicts (spec: 60 min). */
    window: duration().prefault('60m'),
    /** Distinct stalled sessions on one model in the window before it can trip (spec: 3). */
    min_sessions: z.number().int().min(1).max(10_000).default(3),
    /** The model's stall rate must be at least this multiple of the other models' rate. */
    min_ratio: z.number().min(1).max(1_000).default(2),
    /** One-sided Fisher exact test (model rate > others' rate): trip only when p <= alpha. */
    alpha: z.number().gt(0).max(1).default(0.05),
    /** Distinct sessions the other models must have served in the window, else no comparison and no trip. */
    min_other_sessions: z.number().int().min(1).max(1_000_000).default(5),
    /**
     * A model held back (no baseline, ratio or test) while its stalls are in the window is
     * compared again at most this often, when another model serves a new session or on the
     * timer; 0: only a new stall compares.
     */
    recheck_interval: duration().prefault('1m'),
    /** Routing skip after the first trip. */
    cooldown: duration().prefault('15m'),
    /** Each re-trip within backoff_memory multiplies the cooldown by this. */
    backoff: z.number().min(1).max(100).default(2),
    /** Ceiling of the backed-off cooldown. */
    max_cooldown: duration().prefault('24h'),
    /** A trip this long after the previous release starts again at `cooldown`. */
    backoff_memory: duration().prefault('24h'),
    /** Sessions kept per model (and stalled sessions overall) in the window; the least recent go first. */
    max_sessions: z.number().int().min(10).max(1_000_000).default(2_000),
    /** Evidence records kept, newest first: this many trips, and as many comparisons that held a model back. */
    evidence_kept: z.number().int().min(1).max(10_000).default(100),
  })
  .superRefine((o, ctx) => {
    if (o.max_cooldown < o.cooldown) {
      ctx.addIssue({ code: 'custom', path: ['max_cooldown'], message: `must be >= cooldown (${o.cooldown} ms)` });
    }
  });

export type BreakerOptions = z.output<typeof BreakerOptionsSchema>;
export type BreakerOptionsInput = z.input<typeof BreakerOptionsSchema>;
