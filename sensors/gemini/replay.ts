import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { byTime, type InputReader, type LoadedInput, type ReplayInput } from '../../core/replay.ts';
import type { AssistantEvent, ProgressEvent } from '../../core/wire.ts';
import { type LandedTracker, newLandedTracker } from '../shared/landed.ts';
import { textFingerprint } from '../shared/normalize.ts';
import { type ToolPayload, toolEvent } from './map.ts';

// A Gemini CLI chat file (`~/.gemini/tmp/<project>/chats/session-*.jsonl`, a subagent's
// in `chats/<parent session>/<id>.jsonl`) as the progress events its live hooks would
// have sent: the mapping is map.ts's `toolEvent`, fed the chat record's call (name, args,
// the function response the model got, the display) in the AfterTool payload's shape.
// The file is an append log: a later line with the same id replaces the earlier one.

export interface ChatSession {
  session: string;
  parent?: string;
  events: ProgressEvent[];
}

/** True when `head` (a file's first bytes) is a Gemini chat file's header line. */
export const isChat = (head: string): boolean => /^\{"sessionId":"[^"]+","projectHash":/.test(head);

interface ToolCall {
  id?: string;
  name?: string;
  args?: unknown;
  result?: { functionResponse?: { response?: { output?: unknown; error?: unknown } } }[];
  resultDisplay?: unknown;
  status?: string;
  timestamp?: string;
}

interface Rec {
  id?: string;
  type?: string;
  timestamp?: string;
  content?: unknown;
  tokens?: { input?: number; output?: number; cached?: number; thoughts?: number };
  model?: string;
  toolCalls?: ToolCall[];
}

const num = (v: unknown) => (typeof v === 'number' && v >= 0 ? Math.floor(v) : 0);

/** `parent`: a subagent's chat file sits in a folder named by its parent session. */
export function chatSession(text: string, parent?: string): ChatSession | undefined {
  const lines = text.split('\n').filter((l) => l.startsWith('{'));
  let header: { sessionId?: unknown; kind?: unknown; directories?: unknown };
  try {
    header = JSON.parse(lines[0] ?? '');
  } catch {
    return undefined;
  }
  if (typeof header.sessionId !== 'string') return undefined;
  const session = header.kind === 'subagent' && parent ? `${parent}.${header.sessionId.slice(0, 8)}` : header.sessionId;
  const cwd =
    Array.isArray(header.directories) && typeof header.directories[0] === 'string' ? header.directories[0] : undefined;
  const recs = new Map<string, Rec>();
  const put = (r: Rec) => {
    if (r && typeof r.id === 'string') recs.set(r.id, r);
  };
  for (const l of lines.slice(1)) {
    let j: Rec & { $set?: { messages?: unknown } };
    try {
      j = JSON.parse(l);
    } catch {
      continue;
    }
    if (j.$set && Array.isArray(j.$set.messages)) for (const m of j.$set.messages) put(m as Rec);
    else put(j);
  }
  const who = {
    session_id: session,
    ...(header.kind === 'subagent' && parent ? { parent_session_id: parent } : {}),
  };
  const events: ProgressEvent[] = [];
  let tr: LandedTracker = newLandedTracker();
  let turns = 0;
  for (const r of recs.values()) {
    const ts = Date.parse(r.timestamp ?? '') || 0;
    if (r.type === 'user') {
      // a prompt; function responses come back as user records too, without text
      if (
        typeof r.content === 'string' ||
        (Array.isArray(r.content) && r.content.some((c) => typeof c?.text === 'string'))
      )
        events.push({ kind: 'prompt', ...who, call_id: String(r.id).slice(0, 100), resume: turns++ > 0, ts });
      continue;
    }
    if (r.type !== 'gemini') continue;
    const calls = r.toolCalls ?? [];
    const text = typeof r.content === 'string' ? r.content : '';
    if (r.tokens) {
      const a: AssistantEvent = {
        kind: 'assistant',
        ...who,
        call_id: String(r.id).slice(0, 100),
        ...(r.model && /^[\x21-\x7e]{1,100}$/.test(r.model) ? { model: `google/${r.model}` } : {}),
        input_tokens: Math.max(0, num(r.tokens.input) - num(r.tokens.cached)),
        output_tokens: num(r.tokens.output),
        reasoning_tokens: num(r.tokens.thoughts),
        cache_read_tokens: num(r.tokens.cached),
        cache_write_tokens: 0,
        finish: calls.length ? 'tool_calls' : 'stop',
        visible_output: calls.length > 0 || text.trim().length > 0,
        ...(calls.length === 0 && textFingerprint(text) ? { text_fingerprint: textFingerprint(text) } : {}),
        ts,
      };
      events.push(a);
    }
    for (const c of calls) {
      if (typeof c.name !== 'string' || typeof c.id !== 'string' || !c.result) continue;
      const resp = c.result[0]?.functionResponse?.response;
      const p: ToolPayload = {
        session_id: session,
        hook_event_name: 'AfterTool',
        ...(cwd ? { cwd } : {}),
        tool_name: c.name,
        tool_input: c.args,
        tool_response: {
          llmContent: typeof resp?.output === 'string' ? resp.output : '',
          returnDisplay: c.resultDisplay,
          ...(c.status === 'error' || resp?.error ? { error: { type: 'error' } } : {}),
        },
      };
      const t = toolEvent(p, who, c.id.slice(0, 100), tr, Date.parse(c.timestamp ?? '') || ts);
      tr = t.tracker;
      events.push(t.event);
    }
  }
  events.sort((a, b) => a.ts - b.ts);
  return { session, ...(who.parent_session_id ? { parent: who.parent_session_id } : {}), events };
}

/** Gemini CLI chat files under `dir` (a main session's, and subagents' in a folder named by their parent). */
function chatFiles(dir: string): { file: string; parent?: string }[] {
  const out: { file: string; parent?: string }[] = [];
  const walk = (d: string, depth: number, parent?: string) => {
    if (depth > 4) return;
    for (const e of readdirSync(d, { withFileTypes: true })) {
      if (e.isDirectory()) walk(join(d, e.name), depth + 1, /^[0-9a-f-]{36}$/.test(e.name) ? e.name : undefined);
      else if (e.name.endsWith('.jsonl') && (parent || /^session-.*\.jsonl$/.test(e.name)))
        out.push({ file: join(d, e.name), ...(parent ? { parent } : {}) });
    }
  };
  walk(dir, 0);
  return out.sort((a, b) => a.file.localeCompare(b.file));
}

/** `vigil replay` of one chat file, or a folder holding them (a project's chats/, ~/.gemini/tmp): merged by time. */
export const geminiReader: InputReader = {
  kind: 'gemini',
  claims: (p) => (p.dir ? chatFiles(p.path).length > 0 : isChat(p.head)),
  load(path, opts): LoadedInput {
    const out: LoadedInput = { kind: 'gemini', inputs: [], issues: [], sessions: new Map() };
    const all: ReplayInput[] = [];
    const files = statSync(path).isDirectory() ? chatFiles(path) : [{ file: path }];
    files.forEach((f, n) => {
      const s = chatSession(readFileSync(f.file, 'utf8'), f.parent);
      if (!s) {
        const i = { where: f.file, field: 'sessionId', message: 'not a Gemini CLI chat file (no header line)' };
        out.issues.push(i);
        opts.onIssue?.(i);
        return;
      }
      out.sessions.set(s.session, s.parent ? { parent: s.parent } : {});
      for (const e of s.events) all.push({ type: 'progress', event: e });
      opts.onProgress?.(n + 1, files.length);
    });
    out.inputs = byTime(all);
    return out;
  },
};
