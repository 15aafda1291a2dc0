import type { HygieneOptions } from '../options.ts';
import { type HygieneState, retriesOf, type TrendEntry } from './state.ts';

// Numbers into short ASCII: reasons, the fresh-session brief. Only measurements, ids and
// model strings (both validated printable ASCII at ingestion) ever reach this text.

export const tok = (n: number): string => (n >= 1_000 ? `${Math.round(n / 1_000)}k` : String(Math.round(n)));

export function size(bytes: number): string {
  if (bytes >= 1_000_000) return `${(bytes / 1_000_000).toFixed(1)} MB`;
  if (bytes >= 1_000) return `${Math.round(bytes / 1_000)} KB`;
  return `${bytes} B`;
}

export function span(ms: number): string {
  const s = Math.round(ms / 1_000);
  if (s < 600) return `${s}s`;
  if (s < 7_200) return `${Math.round(s / 60)}m`;
  return `${Math.round(s / 3_600)}h`;
}

export const iso = (ms: number): string => new Date(ms).toISOString();

/** One printable ASCII line, bounded. */
export const line = (s: string, max = 300): string => s.replace(/[^\x20-\x7e]/g, '?').slice(0, max);

export const trendText = (trend: readonly TrendEntry[]): string => trend.map((e) => tok(e.per_call)).join(' -> ');

/** Resumes within the window ending at `now`. */
export function resumesWithin(s: HygieneState, now: number, window: number): number {
  let n = 0;
  for (const t of s.resumes) if (t > now - window && t <= now) n++;
  return n;
}

/**
 * The first message of the session that replaces this one: what died and why (numbers
 * only), that nothing carries over, and not to pretend otherwise. Built from the judge's
 * measurements, never from the session's content.
 */
export function buildBrief(s: HygieneState, why: string, now: number, k: HygieneOptions): string {
  const facts: string[] = [];
  if (s.trend.length > 0) {
    facts.push(`prompt tokens per model call over its last turns: ${trendText(s.trend.slice(-8))}`);
    facts.push(`model calls in its last turn: ${s.trend[s.trend.length - 1].calls}`);
  }
  if (s.model !== null) facts.push(`model: ${s.model}`);
  if (s.stats !== null) {
    facts.push(`messages stored: ${s.stats.messages}`, `stored bytes: ${size(s.stats.stored_bytes)}`);
    if (s.stats.history_bytes !== null) facts.push(`history bytes: ${size(s.stats.history_bytes)}`);
  }
  facts.push(`resumes in the last ${span(k.resume_window)}: ${resumesWithin(s, now, k.resume_window)}`);
  const retries = retriesOf(s.turn);
  if (retries > 0) facts.push(`retries in its last turn: ${retries}`);
  const e = s.last_error;
  if (e !== null) {
    const code = [e.status === null ? '' : `status ${e.status}`, e.code ?? '', e.type ?? ''].filter(Boolean).join(' ');
    facts.push(`last terminal error: ${code || 'no code'} at ${tok(e.prompt_tokens)} prompt tokens`);
  }
  const text = [
    'FRESH SESSION: this session starts with none of the history of the one before it.',
    `What died: session ${s.session_id}. ${why}`,
    `Measurements: ${facts.join('; ')}.`,
    'There is no continuity: nothing of the earlier conversation is here, and project memory is not a record of it.',
    'Do not pretend otherwise: do not claim to remember, resume or continue earlier work. If something from before is needed, say so and ask for it, or re-derive it from the repository.',
  ].join('\n');
  return text.replace(/[^\x20-\x7e\n]/g, '?').slice(0, 2_000);
}
