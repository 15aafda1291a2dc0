import type { HygieneOptions } from '../options.ts';
import { type EnvelopeBook, type EnvelopeReadout, envelopeOf, readoutOf } from './envelope.ts';
import {
  HYGIENE_RULES,
  type HygieneLevel,
  type HygieneRule,
  type HygieneState,
  retriesOf,
  turnNumbers,
} from './state.ts';
import { iso, resumesWithin, size, span, tok, trendText } from './text.ts';
import { actionOf } from './update.ts';

// What the Sessions readout and the incident report show of a session's hygiene.

export interface HygieneReadout {
  session_id: string;
  level: HygieneLevel;
  rule: HygieneRule | null;
  /** Prompt tokens per call over the last completed turn; null before one completed. */
  watch_number: number | null;
  /** The same over the turn in progress so far. */
  current_per_call: number | null;
  /** Per-turn watch numbers, oldest first. */
  trend: number[];
  turns: number;
  calls_this_turn: number;
  retries_this_turn: number;
  empty_this_turn: number;
  messages: number | null;
  stored_bytes: number | null;
  history_bytes: number | null;
  resumes_in_window: number;
  /** The resume still waiting for its first token (epoch ms). */
  resume_pending_since: number | null;
  model: string | null;
  envelope: EnvelopeReadout | null;
  findings: { rule: HygieneRule; level: HygieneLevel; since: number; reason: string }[];
}

/** `now`: the readout's time (the resume window ends there); defaults to the latest input. */
export function readout(s: HygieneState, k: HygieneOptions, book?: EnvelopeBook, now = s.last_ts): HygieneReadout {
  const t = s.turn;
  const cur = t === null ? null : turnNumbers(t);
  const env = book !== undefined && s.model !== null ? envelopeOf(book, s.model) : null;
  const findings: HygieneReadout['findings'] = [];
  s.findings.forEach((f, i) => {
    if (f !== null) findings.push({ rule: HYGIENE_RULES[i], level: f.level, since: f.since, reason: f.reason });
  });
  return {
    session_id: s.session_id,
    level: s.level,
    rule: s.rule,
    watch_number: s.trend.length > 0 ? s.trend[s.trend.length - 1].per_call : null,
    current_per_call: cur !== null && cur.calls > 0 ? Math.round(cur.tokens / cur.calls) : null,
    trend: s.trend.map((e) => e.per_call),
    turns: s.turns,
    calls_this_turn: cur?.calls ?? 0,
    retries_this_turn: retriesOf(t),
    empty_this_turn: t?.empty ?? 0,
    messages: s.stats?.messages ?? null,
    stored_bytes: s.stats?.stored_bytes ?? null,
    history_bytes: s.stats?.history_bytes ?? null,
    resumes_in_window: resumesWithin(s, now, k.resume_window),
    resume_pending_since: s.resume_at,
    model: s.model,
    envelope: env === null ? null : readoutOf(env, k),
    findings,
  };
}

/** The incident report's hygiene section: plain ASCII lines, numbers only. */
export function report(s: HygieneState, k: HygieneOptions, book?: EnvelopeBook, now = s.last_ts): string {
  const r = readout(s, k, book, now);
  const out: string[] = [];
  const head = r.rule === null ? 'ok' : `${r.level} (${r.rule}, action ${actionOf(r.rule, r.level)})`;
  out.push(`Session hygiene of ${r.session_id}: ${head}`);
  for (const f of r.findings) out.push(`  ${f.level.padEnd(8)} ${f.rule} since ${iso(f.since)}: ${f.reason}`);
  out.push(
    `Watch number (prompt tokens per call, last completed turn): ${r.watch_number === null ? 'none yet' : tok(r.watch_number)}; warn at ${tok(k.per_call_warn)}, retire at ${tok(k.per_call_retire)}`,
  );
  if (r.trend.length > 0) out.push(`Trend over the last ${r.trend.length} of ${r.turns} turns: ${trendText(s.trend)}`);
  out.push(
    `This turn: ${r.calls_this_turn} calls${r.current_per_call === null ? '' : ` at ${tok(r.current_per_call)} per call`}, ${r.retries_this_turn} retries, ${r.empty_this_turn} empty generations`,
  );
  if (s.stats !== null) {
    out.push(
      `Bulk at ${iso(s.stats.at)}: ${s.stats.messages} messages (ceiling ${k.message_ceiling}), ${size(s.stats.stored_bytes)} stored (ceiling ${size(k.bytes_ceiling)})${s.stats.history_bytes === null ? '' : `, history ${size(s.stats.history_bytes)}`}; process ${s.stats.live ? 'live' : 'not answering'}`,
    );
  }
  out.push(`Resumes in the last ${span(k.resume_window)}: ${r.resumes_in_window}`);
  if (r.resume_pending_since !== null)
    out.push(`Resume pending since ${iso(r.resume_pending_since)}, no first token yet`);
  const e = s.last_error;
  if (e !== null) {
    out.push(
      `Last terminal error at ${iso(e.at)}: status ${e.status ?? '-'}, code ${e.code ?? '-'}, type ${e.type ?? '-'}, at ${tok(e.prompt_tokens)} prompt tokens${e.model ? ` on ${e.model}` : ''}, ${size(e.image_bytes)} of images in that turn`,
    );
  }
  if (r.envelope !== null) {
    const v = r.envelope;
    out.push(
      `Envelope of ${v.model}: largest clean prompt ${tok(v.effective)} over ${v.clean_calls} clean calls; nominal ${v.nominal === null ? 'not configured' : tok(v.nominal)}; ${v.failures} terminal errors`,
    );
  }
  return out.map((l) => l.replace(/[^\x20-\x7e]/g, '?')).join('\n');
}
