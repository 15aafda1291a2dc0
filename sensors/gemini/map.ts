import { z } from 'zod';
import type { PromptEvent, ToolEvent } from '../../core/wire.ts';
import { judgeLanded, type LandedTracker } from '../shared/landed.ts';
import { normalizeCall, resultFingerprint, sanitizeTarget } from '../shared/normalize.ts';

// Gemini CLI 0.61 hook payloads -> progress events (docs/gemini.md). Pure: no I/O, no
// clock. Nothing of a call's content survives: arguments become a fingerprint and a
// coarse target (sensors/shared/normalize.ts), results an exit code, a landed flag
// (sensors/shared/landed.ts) and a result fingerprint.
//
// Identity: one session_id for the run. A subagent's calls carry its parent's
// session_id and nothing that marks them; they fire between the BeforeTool and the
// AfterTool of the parent's invoke_agent call, so the bridge names the child
// `<session>.<agent name>-<n>` for that span (subagents run one at a time).

const Id = z
  .string()
  .min(1)
  .max(100)
  .regex(/^[\x21-\x7e]+$/, 'printable ASCII without spaces');

export const HookPayloadSchema = z.looseObject({
  session_id: Id,
  hook_event_name: z.string().min(1).max(64),
  transcript_path: z.string().max(4096).optional(),
  cwd: z.string().max(4096).optional(),
  stop_hook_active: z.boolean().optional(),
});
export type HookPayload = z.output<typeof HookPayloadSchema>;

export const ToolPayloadSchema = z.looseObject({
  ...HookPayloadSchema.shape,
  hook_event_name: z.enum(['BeforeTool', 'AfterTool']),
  tool_name: z.string().min(1).max(200),
  tool_input: z.unknown().optional(),
  tool_response: z.unknown().optional(),
});
export type ToolPayload = z.output<typeof ToolPayloadSchema>;

export interface Who {
  session_id: string;
  parent_session_id?: string;
  agent?: string;
}

/** Gemini tool names -> the canonical names and argument shapes the shared rules read. */
export function canonicalCall(name: string, input: unknown): { tool: string; args: unknown } {
  const a = (input !== null && typeof input === 'object' ? input : {}) as Record<string, unknown>;
  switch (name) {
    case 'read_file':
      return { tool: 'read', args: { file_path: a.file_path, offset: a.start_line, limit: a.end_line } };
    case 'run_shell_command':
      return { tool: 'bash', args: { command: a.command } };
    case 'replace':
      return { tool: 'edit', args: { file_path: a.file_path } };
    case 'write_file':
      return { tool: 'write', args: { file_path: a.file_path } };
    case 'grep_search':
      return { tool: 'grep', args: { pattern: a.pattern, path: a.dir_path ?? a.path, include: a.include } };
    case 'glob':
      return { tool: 'glob', args: { pattern: a.pattern, path: a.dir_path ?? a.path } };
    case 'list_directory':
      return { tool: 'list', args: { path: a.dir_path ?? a.path, ignore: a.ignore } };
    case 'invoke_agent':
      return { tool: 'task', args: { subagent_type: a.agent_name } };
    case 'web_fetch':
      return { tool: 'webfetch', args: a };
    default:
      return {
        tool: sanitizeTarget(name.toLowerCase())
          .replace(/[^\x21-\x7e]/g, '_')
          .slice(0, 64),
        args: input,
      };
  }
}

interface Response {
  llmContent?: unknown;
  returnDisplay?: unknown;
  error?: { type?: unknown } | null;
}

/** The exit code: a shell's "Exit Code: N" (an exit 1 carries no `error`), else 1 on an error, 0 otherwise. */
export function exitOf(tool: string, r: Response | undefined): number | null {
  const text = typeof r?.llmContent === 'string' ? r.llmContent : '';
  if (tool === 'bash') {
    const m = /^Exit Code: (-?\d{1,10})$/m.exec(text);
    if (m) return Number(m[1]);
    if (/^Signal: /m.test(text)) return null;
  }
  return r?.error ? 1 : 0;
}

/** What the model was shown, without lines that change from run to run (a shell's process group id). */
function outputText(tool: string, r: Response | undefined): string | undefined {
  if (!r) return undefined;
  if (tool === 'bash' && typeof r.returnDisplay === 'string') return r.returnDisplay;
  if (typeof r.llmContent === 'string') return r.llmContent.replace(/^Process Group PGID: \d+$/m, '');
  return undefined;
}

/** replace / write_file results: the diff's line counts (the landed rule's `filediff`). */
function landedMetadata(tool: string, r: Response | undefined): Record<string, unknown> | undefined {
  if (tool !== 'edit' && tool !== 'write') return undefined;
  const d = (r?.returnDisplay ?? {}) as { diffStat?: Record<string, unknown>; fileDiff?: unknown; isNewFile?: unknown };
  if (d.isNewFile === true) return { diff: 'created' };
  const n = (k: string) => (typeof d.diffStat?.[k] === 'number' ? (d.diffStat[k] as number) : 0);
  if (d.diffStat) return { filediff: { additions: n('model_added_lines'), deletions: n('model_removed_lines') } };
  return { diff: typeof d.fileDiff === 'string' ? d.fileDiff : '' };
}

/** An AfterTool -> a tool event and the session's new landed tracker. */
export function toolEvent(
  p: ToolPayload,
  who: Who,
  callId: string,
  tr: LandedTracker,
  ts: number,
): { event: ToolEvent; tracker: LandedTracker } {
  const { tool, args } = canonicalCall(p.tool_name, p.tool_input);
  const facts = normalizeCall(tool, args, { cwd: p.cwd });
  const r = (p.tool_response ?? undefined) as Response | undefined;
  const exit = exitOf(tool, r);
  const status = r?.error || (exit !== null && exit !== 0) ? 'error' : 'completed';
  const { landed, tracker } = judgeLanded(tr, {
    tool,
    status,
    exit,
    metadata: status === 'completed' ? landedMetadata(tool, r) : undefined,
    facts,
  });
  const out = outputText(tool, r);
  return {
    event: {
      kind: 'tool',
      ...who,
      tool,
      call_id: callId,
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

/** BeforeAgent -> a turn starts; never the prompt. */
export const promptEvent = (who: Who, callId: string, resumed: boolean, ts: number): PromptEvent => ({
  kind: 'prompt',
  ...who,
  call_id: callId,
  resume: resumed,
  ts,
});

export const childName = (s: string): string => s.replace(/[^A-Za-z0-9_-]/g, '_').slice(0, 40) || 'agent';

/** The user text Gemini CLI 0.61's loop detection puts into the conversation when it refuses a repeated call. */
const LOOP_NUDGE = 'System: Potential loop detected.';

/**
 * The nudges of Gemini CLI's own loop detection in a chat file's text (a tail may start
 * mid-line): the ids of the user records carrying its text, oldest first. Only the id
 * leaves here, never the text.
 */
export function loopNudges(text: string): string[] {
  const out: string[] = [];
  for (const line of text.split('\n')) {
    if (!line.includes('Potential loop detected')) continue;
    let r: unknown;
    try {
      r = JSON.parse(line);
    } catch {
      continue;
    }
    const rec = r as { id?: unknown; type?: unknown; content?: unknown };
    if (rec.type !== 'user' || typeof rec.id !== 'string' || !/^[\x21-\x7e]{1,100}$/.test(rec.id)) continue;
    const parts = Array.isArray(rec.content) ? rec.content : [];
    if (
      parts.some(
        (c) =>
          typeof (c as { text?: unknown })?.text === 'string' && (c as { text: string }).text.startsWith(LOOP_NUDGE),
      )
    )
      if (!out.includes(rec.id)) out.push(rec.id);
  }
  return out;
}
