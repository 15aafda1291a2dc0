import { z } from 'zod';

// Knobs that are durations accept milliseconds or a short string ("90s", "5m", "1h",
// "60 min"), so config reads like the spec. Parsed once at load into milliseconds.
const UNITS: Record<string, number> = {
  ms: 1,
  s: 1_000,
  sec: 1_000,
  m: 60_000,
  min: 60_000,
  h: 3_600_000,
  d: 86_400_000,
};

export function parseDuration(v: string | number): number | undefined {
  if (typeof v === 'number') return Number.isFinite(v) && v >= 0 ? v : undefined;
  const m = /^\s*(\d+(?:\.\d+)?)\s*(ms|s|sec|m|min|h|d)?\s*$/.exec(v);
  if (!m) return undefined;
  return Math.round(Number(m[1]) * UNITS[m[2] ?? 'ms']);
}

export function formatDuration(ms: number): string {
  if (ms % 3_600_000 === 0 && ms > 0) return `${ms / 3_600_000}h`;
  if (ms % 60_000 === 0 && ms > 0) return `${ms / 60_000}m`;
  if (ms % 1_000 === 0 && ms > 0) return `${ms / 1_000}s`;
  return `${ms}ms`;
}

/** A duration knob: a number of ms or a string like "5m"; always milliseconds after parsing. */
export const duration = () =>
  z.union([z.number(), z.string()]).transform((v, ctx) => {
    const ms = parseDuration(v);
    if (ms === undefined) {
      ctx.addIssue({
        code: 'custom',
        message: `not a duration: ${JSON.stringify(v)} (use ms or e.g. "90s", "5m", "1h")`,
      });
      return z.NEVER;
    }
    return ms;
  });
