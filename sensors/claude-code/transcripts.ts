import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { basename, join } from 'node:path';
import {
  byTime,
  type InputIssue,
  type InputReader,
  type InputSessionInfo,
  type LoadedInput,
  type ReplayInput,
} from '../../core/replay.ts';
import { type LandedTracker, newLandedTracker } from '../shared/landed.ts';
import { sessionKey } from './identity.ts';
import { assistantEvents, type ToolPayload, toolEvent } from './map.ts';

// Claude Code transcripts -> replay inputs, so `vigil replay` judges an operator's own
// history the way the hooks report it live (docs/claude-code.md): the same mapping
// (map.ts) on the same facts. A transcript is `~/.claude/projects/<dir>/<session>.jsonl`;
// a subagent's is `<dir>/<session>/subagents/agent-<id>.jsonl` (+ `.meta.json` with its
// agentType). A tool call is an assistant `tool_use` block and the user line with its
// `tool_result`: `toolUseResult` is the hook's tool_response (main thread only), the
// result's text its error when `is_error`. Calls a hook denied never ran (no
// PostToolUse fired live): they are left out.

/** Whether PATH is, or holds, Claude Code transcripts (a line with `sessionId` and a Claude Code `version`). */
export function isClaudeTranscripts(path: string): boolean {
  const files = transcriptFiles(path, 50);
  return files.some((f) => {
    const head = readHead(f);
    return /"sessionId":"[^"]+"/.test(head) && /"userType":"external"|"entrypoint":"/.test(head);
  });
}

function readHead(f: string): string {
  try {
    return readFileSync(f, 'utf8').slice(0, 64 * 1024);
  } catch {
    return '';
  }
}

function transcriptFiles(path: string, max = Number.POSITIVE_INFINITY): string[] {
  if (!existsSync(path)) return [];
  if (statSync(path).isFile()) return path.endsWith('.jsonl') ? [path] : [];
  const out: string[] = [];
  const walk = (d: string, depth: number) => {
    if (depth > 5 || out.length >= max) return;
    for (const e of readdirSync(d, { withFileTypes: true })) {
      const p = join(d, e.name);
      if (e.isDirectory()) walk(p, depth + 1);
      else if (e.name.endsWith('.jsonl')) out.push(p);
    }
  };
  walk(path, 0);
  return out;
}

interface Line {
  type?: string;
  timestamp?: string;
  sessionId?: string;
  agentId?: string;
  cwd?: string;
  toolUseResult?: unknown;
  message?: { content?: unknown };
}

const textOf = (c: unknown): string =>
  typeof c === 'string'
    ? c
    : Array.isArray(c)
      ? c.map((x) => (typeof x?.text === 'string' ? x.text : '')).join('')
      : '';

/**
 * One transcript's inputs (tool calls and model calls), each with its time. `text` is the
 * file's content when the caller read it (the watchdog reads only a big file's tail).
 */
export function transcriptInputs(
  file: string,
  trackers: Map<string, LandedTracker>,
  issues: InputIssue[],
  text: string = readFileSync(file, 'utf8'),
): ReplayInput[] {
  const uses = new Map<string, { name: string; input: unknown }>();
  const out: ReplayInput[] = [];
  let ids: { session_id: string; agent_id?: string; agent_type?: string } | undefined;
  const agentType = (agent: string) => {
    try {
      const meta = JSON.parse(readFileSync(file.replace(/\.jsonl$/, '.meta.json'), 'utf8')) as { agentType?: unknown };
      return typeof meta.agentType === 'string' ? meta.agentType : undefined;
    } catch {
      return agent ? 'subagent' : undefined;
    }
  };
  text.split('\n').forEach((raw, n) => {
    if (!raw.startsWith('{')) return;
    let l: Line;
    try {
      l = JSON.parse(raw) as Line;
    } catch {
      issues.push({ where: `${basename(file)}:${n + 1}`, field: 'line', message: 'not JSON' });
      return;
    }
    if (!l.sessionId) return;
    if (!ids) {
      const t = l.agentId ? agentType(l.agentId) : undefined;
      ids = { session_id: l.sessionId, ...(l.agentId ? { agent_id: l.agentId } : {}), ...(t ? { agent_type: t } : {}) };
    }
    const ts = Date.parse(l.timestamp ?? '') || 0;
    const content = Array.isArray(l.message?.content) ? (l.message?.content as Record<string, unknown>[]) : [];
    if (l.type === 'assistant') {
      for (const c of content) {
        if (c.type === 'tool_use' && typeof c.id === 'string' && typeof c.name === 'string') {
          uses.set(c.id, { name: c.name, input: c.input });
        }
      }
      return;
    }
    if (l.type !== 'user') return;
    for (const c of content) {
      if (c.type !== 'tool_result' || typeof c.tool_use_id !== 'string') continue;
      const use = uses.get(c.tool_use_id);
      if (!use) continue;
      const result = textOf(c.content);
      if (c.is_error === true && /^PreToolUse:\S+ hook error:/.test(result)) continue;
      const base = { ...ids, session_id: l.sessionId, cwd: l.cwd, tool_name: use.name, tool_input: use.input };
      const p: ToolPayload =
        c.is_error === true
          ? { ...base, hook_event_name: 'PostToolUseFailure', tool_use_id: c.tool_use_id, error: result }
          : {
              ...base,
              hook_event_name: 'PostToolUse',
              tool_use_id: c.tool_use_id,
              tool_response: l.toolUseResult ?? result,
            };
      const key = sessionKey(l.sessionId, ids?.agent_id);
      const r = toolEvent(p, trackers.get(key) ?? newLandedTracker(), ts);
      if (!r) continue;
      trackers.set(key, r.tracker);
      out.push({ type: 'progress', event: r.event });
    }
  });
  if (ids) for (const a of assistantEvents(text, ids, 0)) out.push({ type: 'progress', event: a });
  return out;
}

/** Every transcript under PATH (a file, a project folder, or ~/.claude/projects), merged by time. */
export function loadClaudeTranscripts(path: string): LoadedInput {
  const issues: InputIssue[] = [];
  const trackers = new Map<string, LandedTracker>();
  const all: ReplayInput[] = [];
  const sessions = new Map<string, InputSessionInfo>();
  for (const f of transcriptFiles(path)) {
    for (const i of transcriptInputs(f, trackers, issues)) {
      all.push(i);
      if (i.type === 'progress') {
        const e = i.event;
        if (!sessions.has(e.session_id)) {
          sessions.set(e.session_id, {
            ...(e.agent ? { agent: e.agent } : {}),
            ...(e.parent_session_id ? { parent: e.parent_session_id } : {}),
          });
        }
      }
    }
  }
  return { kind: 'claude-code', inputs: byTime(all), issues, sessions };
}

/** `vigil replay` of Claude Code transcripts. */
export const claudeCodeReader: InputReader = {
  kind: 'claude-code',
  claims: (p) => isClaudeTranscripts(p.path),
  load(path, opts) {
    const loaded = loadClaudeTranscripts(path);
    for (const i of loaded.issues) opts.onIssue?.(i);
    return loaded;
  },
};
