import { formatDuration } from '../../core/duration.ts';
import { ascii, truncate } from '../../core/render.ts';
import type { Evidence } from './breaker.evidence.ts';

// The text of a trip alert: deterministic, from counts, session ids and verdict reasons
// (which are one-line, content-free by the verdict schema), so a human can review it.

export const pct = (r: number | null) => (r === null ? 'n/a' : `${(r * 100).toFixed(1)}%`);

export function formatP(p: number): string {
  return p < 0.0001 ? p.toExponential(2) : p.toFixed(4);
}

const iso = (ms: number) => new Date(ms).toISOString();

/** One line for the alert summary. */
export function summaryOf(e: Evidence): string {
  const m = e.model_rate;
  const o = e.others;
  const line =
    `stalled ${m.stalled} of ${m.served} sessions (${pct(m.rate)}) in ${formatDuration(e.window_ms)} ` +
    `vs ${o.stalled} of ${o.served} (${pct(o.rate)}) on other models, ` +
    `p = ${e.p_value === null ? 'n/a' : formatP(e.p_value)}; skipped for ${formatDuration(e.cooldown_ms ?? 0)}`;
  return truncate(ascii(line), 1024);
}

/** The incident report of a trip. */
export function renderEvidence(e: Evidence): string {
  const m = e.model_rate;
  const o = e.others;
  const t = e.thresholds;
  const lines = [
    `Behavior breaker ${e.decision} ${e.model} at ${iso(e.at)}.`,
    ...(e.decision === 'tripped'
      ? [
          `Routing skip for ${formatDuration(e.cooldown_ms ?? 0)} (backoff level ${e.backoff_level ?? 0}), until ${iso(e.until ?? e.at)}.`,
          'Resume early: POST /breaker/<model>/resume (model URL-encoded).',
        ]
      : []),
    `Window ${formatDuration(e.window_ms)}, this model counted from ${iso(e.since)}.`,
    `This model: ${m.stalled} of ${m.served} sessions stalled (${pct(m.rate)}).`,
    `Other models (${o.models.join(', ') || 'none'}): ${o.stalled} of ${o.served} (${pct(o.rate)}).`,
    `Rate ratio ${e.ratio === null ? (o.stalled === 0 && m.stalled > 0 ? 'inf' : 'n/a') : e.ratio.toFixed(2)} (min ${t.min_ratio}); ` +
      `Fisher exact one-sided p = ${e.p_value === null ? 'n/a' : formatP(e.p_value)} (alpha ${t.alpha}); ` +
      `min_sessions ${t.min_sessions}, min_other_sessions ${t.min_other_sessions}.`,
    `Why: ${e.note}.`,
    'Stalled sessions:',
    ...e.sessions.slice(0, 20).map((s) => `  ${s.session} ${s.level} at ${iso(s.at)} (${s.source}): ${s.reason}`),
    ...(m.stalled > 20 ? [`  ... and ${m.stalled - 20} more (GET /breaker)`] : []),
  ];
  return truncate(ascii(lines.join('\n')), 16_000);
}
