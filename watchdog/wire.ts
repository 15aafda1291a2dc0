import { z } from 'zod';
import { TimestampSchema } from '../core/wire.ts';
import { TICK_STATUSES } from './state.ts';

// The watchdog's own wire shape (each sensor owns its shapes; the kernel keeps the
// envelope): the heartbeat it posts after each tick to /watchdog/heartbeat.

/** The watchdog's tick result, as it reports it after each tick. */
export const HeartbeatSchema = z.strictObject({
  last_tick_at: TimestampSchema,
  result: z.strictObject({
    status: z.enum(TICK_STATUSES),
    servers: z.number().int().min(0).max(10_000).default(0),
    sessions: z.number().int().min(0).max(1_000_000).default(0),
    flagged: z.number().int().min(0).max(1_000_000).default(0),
    model_calls: z.number().int().min(0).max(1_000_000).default(0),
    duration_ms: z.number().min(0).max(86_400_000).optional(),
    error: z.string().max(300).optional(),
  }),
});
export type Heartbeat = z.output<typeof HeartbeatSchema>;
