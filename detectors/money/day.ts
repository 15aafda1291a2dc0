// Days in a configured time zone: the key of a day's totals and budgets, and when the
// next one starts. Intl does the zone arithmetic; a formatter per zone is kept, and
// day keys are cached per quarter hour (every zone offset is a multiple of 15 minutes).

const QUARTER = 15 * 60_000;
const formatters = new Map<string, Intl.DateTimeFormat>();
const cache = new Map<string, string>();

function formatter(tz: string): Intl.DateTimeFormat {
  let f = formatters.get(tz);
  if (!f) {
    f = new Intl.DateTimeFormat('en-CA', {
      timeZone: tz,
      year: 'numeric',
      month: '2-digit',
      day: '2-digit',
      hour: '2-digit',
      minute: '2-digit',
      second: '2-digit',
      hourCycle: 'h23',
    });
    formatters.set(tz, f);
  }
  return f;
}

function parts(ms: number, tz: string): Record<string, number> {
  const out: Record<string, number> = {};
  for (const p of formatter(tz).formatToParts(ms)) if (p.type !== 'literal') out[p.type] = Number(p.value);
  return out;
}

/** `2026-09-26`: the day `ms` falls on in `tz`. */
export function dayOf(ms: number, tz: string): string {
  const q = `${tz}|${Math.floor(ms / QUARTER)}`;
  let d = cache.get(q);
  if (d === undefined) {
    const p = parts(ms, tz);
    d = `${p.year}-${String(p.month).padStart(2, '0')}-${String(p.day).padStart(2, '0')}`;
    if (cache.size > 4_096) cache.clear();
    cache.set(q, d);
  }
  return d;
}

/** When the day after the one `ms` falls on starts in `tz` (epoch ms). */
export function nextDayAt(ms: number, tz: string): number {
  const p = parts(ms, tz);
  const sinceMidnight = ((p.hour * 60 + p.minute) * 60 + p.second) * 1000 + (ms % 1000);
  let next = ms - sinceMidnight + 86_400_000;
  // A day of 23 or 25 hours (a DST change): step to where the day key changes.
  const today = dayOf(ms, tz);
  while (dayOf(next, tz) === today) next += 3_600_000;
  while (dayOf(next - 3_600_000, tz) !== today) next -= 3_600_000;
  return next;
}

/** The `n` days ending with the one `ms` falls on, oldest first. */
export function lastDays(ms: number, n: number, tz: string): string[] {
  const out: string[] = [];
  let at = ms;
  for (let i = 0; i < n; i++) {
    const d = dayOf(at, tz);
    if (out[0] !== d) out.unshift(d);
    at -= 86_400_000;
  }
  return out;
}

/** The epoch ms a day key starts at in `tz` (for chart axes). */
export function dayStart(day: string, tz: string): number {
  // Noon UTC of that date is within 14 hours of it in any zone: start from before it.
  let s = nextDayAt(Date.parse(`${day}T12:00:00Z`) - 40 * 3_600_000, tz);
  while (dayOf(s, tz) < day) s = nextDayAt(s, tz);
  return s;
}
