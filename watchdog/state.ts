import { mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { z } from 'zod';
import { VerdictLevelSchema } from '../core/wire.ts';

// The watchdog's own memory between ticks, one small JSON file:
// - last_tick_at + result: the latest tick, so a watchdog that stopped is visible even
//   when the service is down (the service keeps the same through the heartbeat);
// - since: where the next tick's "active since" window starts (the start of the last
//   tick that reported; a tick that could not report leaves it, so nothing is skipped);
// - flagged: sessions this watchdog reported non-ok, so a recovered one is reported ok;
// - service_down: the open outage and the sessions already named in its direct alert
//   (one alert per outage, another only when a new session is flagged).
// A missing or unreadable file is a first run, never an error. What the DB fallback
// kept of its last read is a separate, larger file beside this one (dbread.ts), so
// this one stays small and is rewritten on every path, errors included.

export const TICK_STATUSES = ['ok', 'flagged', 'idle', 'blind', 'error', 'skipped'] as const;
export type TickStatus = (typeof TICK_STATUSES)[number];

export const TickResultSchema = z.object({
  status: z.enum(TICK_STATUSES),
  servers: z.number().int().min(0),
  sessions: z.number().int().min(0),
  flagged: z.number().int().min(0),
  model_calls: z.number().int().min(0),
  duration_ms: z.number().min(0).optional(),
  error: z.string().max(300).optional(),
});
export type TickResult = z.output<typeof TickResultSchema>;

export const WatchdogStateSchema = z.object({
  version: z.literal(1),
  last_tick_at: z.number(),
  result: TickResultSchema,
  since: z.number().optional(),
  flagged: z.record(z.string(), VerdictLevelSchema).default({}),
  service_down: z
    .object({ since: z.number(), alerted: z.array(z.string()) })
    .nullable()
    .default(null),
});
export type WatchdogState = z.output<typeof WatchdogStateSchema>;

export function readState(path: string): WatchdogState | null {
  let raw: string;
  try {
    raw = readFileSync(path, 'utf8');
  } catch {
    return null;
  }
  try {
    const r = WatchdogStateSchema.safeParse(JSON.parse(raw));
    return r.success ? r.data : null;
  } catch {
    return null;
  }
}

/** Write to a temp file and rename: a reader never sees half a file. */
export function writeState(path: string, s: WatchdogState): void {
  mkdirSync(dirname(path), { recursive: true });
  const tmp = `${path}.${process.pid}.tmp`;
  writeFileSync(tmp, `${JSON.stringify(s, null, 2)}\n`, { mode: 0o600 });
  renameSync(tmp, path);
}
