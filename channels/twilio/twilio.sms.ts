import type { Alert } from '../../core/alert.ts';
import { renderLine } from '../../core/render.ts';
import { fitTo } from '../shared/fit.ts';

// Pure helpers for the SMS body and for naming recipients without exposing them.

/** GSM-7 extension characters: each costs two septets (escape + char). */
const GSM7_EXTENDED = new Set(['^', '{', '}', '\\', '[', ']', '~', '|']);

/** Septets of an ASCII string in GSM-7 (backtick is not in GSM-7 and is never passed in). */
export function septets(s: string): number {
  let n = 0;
  for (const ch of s) n += GSM7_EXTENDED.has(ch) ? 2 : 1;
  return n;
}

/** One segment holds 160 septets; a concatenated message 153 per segment (the rest is the UDH). */
export function segmentBudget(maxSegments: number): number {
  return maxSegments === 1 ? 160 : 153 * maxSegments;
}

/**
 * What happened, in one line that stays GSM-7 (a single character outside it would
 * switch the whole message to UCS-2, 70 characters a segment) and within the budget.
 */
export function smsBody(a: Alert, maxSegments: number): string {
  const line = renderLine(a).replace(/\s+/g, ' ').replace(/`/g, "'").trim();
  return fitTo(line, segmentBudget(maxSegments), (x) => x, septets);
}

/** A phone number fit for a log line: country prefix and last two digits only. */
export function maskNumber(e164: string): string {
  if (e164.length <= 6) return '*'.repeat(e164.length);
  return `${e164.slice(0, 3)}${'*'.repeat(e164.length - 5)}${e164.slice(-2)}`;
}
