import { truncate } from '../../core/render.ts';

/**
 * The longest `truncate(raw, n)` whose rendered form measures at most `max`: for
 * measures that grow faster than the character count (Slack escaping, GSM-7 escape
 * septets). Binary search, since cutting by the overshoot can undershoot to nothing.
 */
export function fitTo(raw: string, max: number, render: (s: string) => string, measure: (s: string) => number): string {
  const whole = render(raw);
  if (measure(whole) <= max) return whole;
  let lo = 0;
  let hi = Math.min(raw.length, max);
  let best = render('');
  while (lo <= hi) {
    const n = (lo + hi) >> 1;
    const out = render(truncate(raw, n));
    if (measure(out) <= max) {
      best = out;
      lo = n + 1;
    } else {
      hi = n - 1;
    }
  }
  return best;
}
