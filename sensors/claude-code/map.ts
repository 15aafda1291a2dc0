// zod/mini: the hook bundle starts on every tool call, and the classic build is most of its size.
import { z } from 'zod/mini';
import type { AssistantEvent, PromptEvent, ToolEvent } from '../../core/wire.ts';
import { judgeLanded, type LandedTracker } from '../shared/landed.ts';
import { normalizeCall, resultFingerprint, sanitizeTarget, textFingerprint } from '../shared/normalize.ts';
import { sessionKey } from './identity.ts';

// Claude Code 2.1 hook payloads -> progress events (docs/claude-code.md). Pure: no I/O,
// no clock. Nothing of a call's content survives: arguments become a fingerprint and a
// coarse target (the same normalisation as every sensor: sensors/shared/normalize.ts),
// outputs an exit code, a landed flag (sensors/shared/landed.ts) and a result
// fingerprint; a prompt becomes the fact that a turn started.

export { sessionKey } from './identity.ts';

const Id = z
  .string()
  .check(z.minLength(1), z.maxLength(100), z.regex(/^[\x21-\x7e]+$/, 'printable ASCII without spaces'));
const Str = (min: number, max: number) => z.string().check(z.minLength(min), z.maxLength(max));

/** The fields every hook payload has (Claude Code sends more; only these are read). */
const Common = {
  session_id: Id,
  hook_event_name: Str(1, 64),
  transcript_path: z.optional(Str(0, 4096)),
  cwd: z.optional(Str(0, 4096)),
  prompt_id: z.optional(Id),
  /** Present only in a subagent's payloads (the main thread's have no such key). */
  agent_id: z.optional(Id),
  agent_type: z.optional(Str(1, 200)),
};

export const ToolPayloadSchema = z.looseObject({
  ...Common,
  hook_event_name: z.enum(['PreToolUse', 'PostToolUse', 'PostToolUseFailure']),
  tool_name: Str(1, 200),
  tool_input: z.optional(z.unknown()),
  tool_use_id: Id,
  tool_response: z.optional(z.unknown()),
  error: z.optional(z.string()),
  is_interrupt: z.optional(z.boolean()),
});
export type ToolPayload = z.output<typeof ToolPayloadSchema>;

export const HookPayloadSchema = z.looseObject({ ...Common, stop_hook_active: z.optional(z.boolean()) });
export type HookPayload = z.output<typeof HookPayloadSchema>;

/** Claude Code tool names -> the canonical names the shared rules know; others lowercased. */
const CANONICAL: Record<string, string> = {
  Read: 'read',
  Bash: 'bash',
  Edit: 'edit',
  MultiEdit: 'multiedit',
  Write: 'write',
  NotebookEdit: 'edit',
  Grep: 'grep',
  Glob: 'glob',
  LS: 'list',
  Agent: 'task',
  Task: 'task',
  WebFetch: 'webfetch',
};

export const canonicalTool = (name: string): string =>
  CANONICAL[name] ??
  sanitizeTarget(name.toLowerCase())
    .replace(/[^\x21-\x7e]/g, '_')
    .slice(0, 64);

/** A failed call's exit: Bash puts `Exit code N` first in `error`; any other failure is 1; an interrupt unknown. */
export function exitOfFailure(error: string | undefined, interrupted: boolean | undefined): number | null {
  if (interrupted) return null;
  const m = /^Exit code (-?\d{1,10})\b/.exec(error ?? '');
  return m ? Number(m[1]) : 1;
}

interface PatchHunk {
  lines?: unknown;
}

/** Added and removed lines of an Edit/Write `structuredPatch` (the landed rule's `filediff`). */
function patchCounts(patch: unknown): { additions: number; deletions: number } {
  let additions = 0;
  let deletions = 0;
  if (Array.isArray(patch)) {
    for (const h of patch as PatchHunk[]) {
      if (!Array.isArray(h?.lines)) continue;
      for (const l of h.lines) {
        if (typeof l !== 'string') continue;
        if (l.startsWith('+')) additions++;
        else if (l.startsWith('-')) deletions++;
      }
    }
  }
  return { additions, deletions };
}

/**
 * The result metadata the landed rules read: a non-empty `structuredPatch` is a change;
 * a Write that created a file changed it too (its patch is empty).
 */
function landedMetadata(tool: string, response: unknown): Record<string, unknown> | undefined {
  if (tool !== 'edit' && tool !== 'multiedit' && tool !== 'write') return undefined;
  const r = (response ?? {}) as { structuredPatch?: unknown; type?: unknown };
  if (tool === 'write' && r.type === 'create') return { diff: 'created' };
  return { filediff: patchCounts(r.structuredPatch) };
}

/** What the model was shown, as far as the result fingerprint needs it; undefined when there is no stable text. */
function outputText(tool: string, p: ToolPayload): string | undefined {
  if (p.hook_event_name === 'PostToolUseFailure') return p.error ?? '';
  const r = p.tool_response;
  if (typeof r === 'string') return r;
  if (!r || typeof r !== 'object') return undefined;
  const o = r as { stdout?: unknown; stderr?: unknown; file?: { content?: unknown } };
  if (tool === 'bash' && typeof o.stdout === 'string')
    return `${o.stdout}${typeof o.stderr === 'string' ? o.stderr : ''}`;
  if (tool === 'read' && typeof o.file?.content === 'string') return o.file.content;
  return undefined;
}

/** The identity part of every event of a payload: the subagent is its own session, child of the payload's session. */
function who(p: { session_id: string; agent_id?: string; agent_type?: string }) {
  return {
    session_id: sessionKey(p.session_id, p.agent_id),
    ...(p.agent_id ? { parent_session_id: p.session_id } : {}),
    ...(p.agent_type ? { agent: cleanName(p.agent_type) } : {}),
  };
}

const cleanName = (s: string) =>
  s
    .replace(/[^\x20-\x7e]/g, '?')
    .trim()
    .slice(0, 64) || '?';

/** A finished tool call (PostToolUse or PostToolUseFailure) -> a tool event and the session's new landed tracker. */
export function toolEvent(
  p: ToolPayload,
  tr: LandedTracker,
  ts: number,
): { event: ToolEvent; tracker: LandedTracker } | null {
  if (p.hook_event_name === 'PreToolUse') return null;
  const tool = canonicalTool(p.tool_name);
  const facts = normalizeCall(tool, p.tool_input, { cwd: p.cwd });
  const failed = p.hook_event_name === 'PostToolUseFailure';
  const exit = failed ? exitOfFailure(p.error, p.is_interrupt) : 0;
  const status = failed ? 'error' : 'completed';
  const { landed, tracker } = judgeLanded(tr, {
    tool,
    status,
    exit,
    metadata: failed ? undefined : landedMetadata(tool, p.tool_response),
    facts,
  });
  const out = outputText(tool, p);
  return {
    event: {
      kind: 'tool',
      ...who(p),
      tool,
      call_id: p.tool_use_id,
      fingerprint: facts.fingerprint,
      target: facts.target,
      exit,
      landed,
      ...(out !== undefined ? { result_fingerprint: resultFingerprint(exit, out) } : {}),
      ts,
    },
    tracker,
  };
}

/** UserPromptSubmit -> a turn starts; `resume` when the session had a turn before. Never the prompt. */
export function promptEvent(p: HookPayload, resumed: boolean, ts: number): PromptEvent {
  return { kind: 'prompt', ...who(p), ...(p.prompt_id ? { call_id: p.prompt_id } : {}), resume: resumed, ts };
}

// ---------------------------------------------------------------------------
// transcripts: the model calls' usage (hook payloads carry none)

const Count = z.int().check(z.minimum(0));
const Usage = z.looseObject({
  input_tokens: z.optional(Count),
  output_tokens: z.optional(Count),
  cache_read_input_tokens: z.optional(z.nullable(Count)),
  cache_creation_input_tokens: z.optional(z.nullable(Count)),
});

/** An assistant line of a Claude Code transcript (one per content block; blocks of one response share `message.id`). */
const AssistantLine = z.looseObject({
  type: z.literal('assistant'),
  timestamp: z.optional(z.string()),
  agentId: z.optional(Id),
  message: z.looseObject({
    id: Id,
    model: z.optional(Str(1, 150)),
    stop_reason: z.optional(z.nullable(z.string())),
    usage: z.optional(Usage),
    content: z.optional(z.array(z.looseObject({ type: z.string(), text: z.optional(z.string()) }))),
  }),
});

interface Step {
  id: string;
  ts: number;
  model?: string;
  stop?: string;
  usage?: z.output<typeof Usage>;
  text: string;
  tools: number;
}

const CODE = /^[A-Za-z0-9_.:/-]{1,64}$/;

/**
 * The model calls in transcript lines (JSONL text, possibly cut at the start): one
 * assistant event per response, with its usage and finish, a text fingerprint when it
 * made no tool call. Lines that are not assistant lines, or do not parse, are skipped.
 */
export function assistantEvents(
  text: string,
  ids: { session_id: string; agent_id?: string; agent_type?: string },
  fallbackTs: number,
): AssistantEvent[] {
  const steps = new Map<string, Step>();
  for (const line of text.split('\n')) {
    if (!line.includes('"assistant"')) continue;
    let raw: unknown;
    try {
      raw = JSON.parse(line);
    } catch {
      continue;
    }
    const r = AssistantLine.safeParse(raw);
    if (!r.success) continue;
    const m = r.data.message;
    const s = steps.get(m.id) ?? { id: m.id, ts: Date.parse(r.data.timestamp ?? '') || fallbackTs, text: '', tools: 0 };
    if (m.model) s.model = m.model;
    if (m.stop_reason) s.stop = m.stop_reason;
    if (m.usage) s.usage = m.usage;
    for (const c of m.content ?? []) {
      if (c.type === 'text' && c.text) s.text += c.text;
      else if (c.type === 'tool_use') s.tools++;
    }
    steps.set(m.id, s);
  }
  return [...steps.values()].map((s) => {
    const u = s.usage ?? {};
    const visible = s.tools > 0 || s.text.trim().length > 0;
    const tf = s.tools === 0 ? textFingerprint(s.text) : undefined;
    const model = s.model ? `anthropic/${s.model}`.replace(/[^\x21-\x7e]/g, '_') : undefined;
    return {
      kind: 'assistant' as const,
      ...who(ids),
      call_id: s.id,
      ...(model ? { model } : {}),
      input_tokens: u.input_tokens ?? 0,
      output_tokens: u.output_tokens ?? 0,
      reasoning_tokens: 0,
      cache_read_tokens: u.cache_read_input_tokens ?? 0,
      cache_write_tokens: u.cache_creation_input_tokens ?? 0,
      ...(s.stop && CODE.test(s.stop) ? { finish: s.stop } : {}),
      visible_output: visible,
      ...(tf ? { text_fingerprint: tf } : {}),
      ts: s.ts,
    };
  });
}
