import { Ollama } from 'ollama';
import type { ToolEvent } from '../core/wire.ts';
import { short, timedFetch } from './discover.ts';

// Step 4 of a tick: a local model's second opinion, only on sessions the judge flagged
// (a healthy tick costs zero inference), only when local_compute.enabled and
// watchdog.local_llm_enabled. The model sees a DIGEST built from the converter's tool
// events alone (tool names, coarse targets, exit codes, landed flags, counts), never
// arguments, outputs or prompts. Its answer is recorded beside the deterministic
// verdict; it never replaces it, and a failing model never breaks the tick.

export const DIGEST_CALLS = 60;

export interface SecondOpinion {
  model: string;
  looping: boolean;
  reason: string;
}

const line = (e: ToolEvent) =>
  `${e.tool}${e.target ? ` ${e.target}` : ''} exit=${e.exit === null || e.exit === undefined ? '-' : e.exit}${e.landed ? ' landed' : ''}`;

/** Tool names, targets and exit codes: the last `max` calls as lines, plus counts over the whole session. */
export function buildDigest(events: readonly ToolEvent[], max = DIGEST_CALLS): string {
  const counts = new Map<string, number>();
  let failed = 0;
  let landed = 0;
  for (const e of events) {
    const k = `${e.tool}${e.target ? ` ${e.target}` : ''}`;
    counts.set(k, (counts.get(k) ?? 0) + 1);
    if (e.exit !== 0 && e.exit !== null && e.exit !== undefined) failed++;
    if (e.landed) landed++;
  }
  const top = [...counts]
    .filter(([, n]) => n > 1)
    .sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1))
    .slice(0, 5)
    .map(([k, n]) => `${k} x${n}`);
  const last = events.slice(-max);
  const out = [
    `tool calls: ${events.length}, landed changes: ${landed}, failed calls: ${failed}, distinct targets: ${counts.size}`,
    `most repeated: ${top.length ? top.join(', ') : 'none'}`,
    `last ${last.length} calls, oldest first:`,
    ...last.map(line),
  ];
  return out.join('\n').replace(/[^\x20-\x7e\n]/g, '?');
}

export const SYSTEM_PROMPT =
  'You review a digest of a coding agent session: tool names, coarse targets (paths, command names) and exit ' +
  'codes, nothing else. "landed" marks a change that reached disk (an edit with a diff, a commit, a check that ' +
  'passed after failing). Looping without progress means repeating the same calls, re-reading without editing, ' +
  'or retrying failing commands while nothing lands.';

export const QUESTION = 'Is this agent looping without progress? Answer yes or no, with a one-line reason.';

export function buildMessages(digest: string): { role: 'system' | 'user'; content: string }[] {
  return [
    { role: 'system', content: SYSTEM_PROMPT },
    { role: 'user', content: `${QUESTION}\n\n${digest}\n\n${QUESTION}` },
  ];
}

/**
 * The model's yes/no and one-line reason, or null when the answer says neither. Robust
 * to reasoning blocks (<think>), markdown, "Answer:" prefixes, punctuation and case;
 * falls back to "(not) looping" phrases, and to a lone yes or no word anywhere.
 */
export function parseYesNo(text: string): { looping: boolean; reason: string } | null {
  const clean = text
    .replace(/<think>[\s\S]*?(<\/think>|$)/gi, ' ')
    .replace(/[*_`#>"]/g, ' ')
    .replace(/[^\x20-\x7e\n]/g, ' ');
  const lines = clean
    .split('\n')
    .map((l) => l.trim())
    .filter(Boolean);
  const reasonFrom = (i: number, rest: string) => {
    const r = rest.replace(/^[\s.,:;!)\]-]+/, '').trim() || lines[i + 1] || '';
    return r.replace(/\s+/g, ' ').slice(0, 200);
  };
  for (let i = 0; i < lines.length; i++) {
    if (/^(yes|no)\s*(or|\/)\s*(yes|no)\b/i.test(lines[i])) continue; // the question echoed back
    const m = /^(?:(?:final\s+)?answer\s*[:-]?\s*|verdict\s*[:-]?\s*|\(?[a-z]\)\s*)?(yes|no)\b(.*)$/i.exec(lines[i]);
    if (m) return { looping: m[1].toLowerCase() === 'yes', reason: reasonFrom(i, m[2]) };
  }
  const all = lines.join(' ');
  if (/\b(?:not|isn't|is not|no longer)\s+(?:stuck\s+)?looping\b/i.test(all))
    return { looping: false, reason: all.slice(0, 200) };
  if (/\b(?:is|appears to be|seems to be)\s+(?:stuck\s+)?looping\b/i.test(all))
    return { looping: true, reason: all.slice(0, 200) };
  const yes = /\byes\b/i.test(all);
  const no = /\bno\b/i.test(all);
  if (yes !== no) return { looping: yes, reason: all.slice(0, 200) };
  return null;
}

export interface AskOptions {
  host: string;
  model: string;
  timeoutMs: number;
}

export type AskResult = { ok: true; opinion: SecondOpinion } | { ok: false; error: string };

/** One /api/chat call through the ollama client; every failure is a value, never a throw. */
export async function askModel(digest: string, o: AskOptions): Promise<AskResult> {
  // the client's non-streaming calls take no signal: the timeout lives in its fetch
  const client = new Ollama({
    host: o.host,
    fetch: timedFetch(o.timeoutMs),
  });
  try {
    const r = await client.chat({
      model: o.model,
      messages: buildMessages(digest),
      stream: false,
      options: { temperature: 0, num_predict: 120 },
    });
    const text = typeof r?.message?.content === 'string' ? r.message.content : '';
    const p = parseYesNo(text);
    if (!p) return { ok: false, error: 'answer was neither yes nor no' };
    return { ok: true, opinion: { model: o.model.slice(0, 200), looping: p.looping, reason: p.reason } };
  } catch (e) {
    const name = (e as Error)?.name;
    return { ok: false, error: name === 'TimeoutError' ? 'timed out' : short(e) };
  }
}
