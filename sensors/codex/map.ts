import { z } from 'zod';
import type { AssistantEvent, PromptEvent, ToolEvent } from '../../core/wire.ts';
import { judgeLanded, type LandedTracker } from '../shared/landed.ts';
import { normalizeCall, resultFingerprint, sanitizeTarget, textFingerprint } from '../shared/normalize.ts';

// Codex CLI 0.169 hook payloads and rollout lines -> progress events (docs/codex.md).
// Pure: no I/O, no clock. Nothing of a call's content survives: arguments become a
// fingerprint and a coarse target (sensors/shared/normalize.ts), outputs an exit code,
// a landed flag (sensors/shared/landed.ts) and a result fingerprint.
//
// Identity: Codex uses one id per thread everywhere (hook session_id, the thread-id
// request header, the rollout's session_meta). A subagent's hooks carry the root's
// session_id plus agent_id (the child's thread id): the child is its own Vigil
// session, named by its thread id, with the payload's session as its parent; that
// is also what the router gate reads from thread-id and x-codex-parent-thread-id.

const Id = z
  .string()
  .min(1)
  .max(100)
  .regex(/^[\x21-\x7e]+$/, 'printable ASCII without spaces');

const Common = {
  session_id: Id,
  hook_event_name: z.string().min(1).max(64),
  transcript_path: z.string().max(4096).optional(),
  cwd: z.string().max(4096).optional(),
  turn_id: Id.optional(),
  model: z.string().max(150).optional(),
  /** Only in a subagent thread's payloads: the child's thread id. */
  agent_id: Id.optional(),
  agent_type: z.string().min(1).max(200).optional(),
  agent_transcript_path: z.string().max(4096).optional(),
};

export const HookPayloadSchema = z.looseObject({
  ...Common,
  source: z.string().max(40).optional(),
  stop_hook_active: z.boolean().optional(),
});
export type HookPayload = z.output<typeof HookPayloadSchema>;

export const ToolPayloadSchema = z.looseObject({
  ...Common,
  hook_event_name: z.enum(['PreToolUse', 'PostToolUse']),
  tool_name: z.string().min(1).max(200),
  tool_input: z.unknown().optional(),
  tool_use_id: Id,
  tool_response: z.unknown().optional(),
});
export type ToolPayload = z.output<typeof ToolPayloadSchema>;

/** The text Codex gives the model for a call a PreToolUse hook denied. */
const BLOCKED = 'Command blocked by PreToolUse hook:';

/** The Vigil session of a payload: the thread it ran in (a subagent's own). */
export const sessionOf = (p: { session_id: string; agent_id?: string }): string => p.agent_id ?? p.session_id;

const cleanName = (s: string) =>
  s
    .replace(/[^\x20-\x7e]/g, '?')
    .trim()
    .slice(0, 64) || '?';

export function who(p: { session_id: string; agent_id?: string; agent_type?: string }) {
  return {
    session_id: sessionOf(p),
    ...(p.agent_id && p.agent_id !== p.session_id ? { parent_session_id: p.session_id } : {}),
    ...(p.agent_id && p.agent_type ? { agent: cleanName(p.agent_type) } : {}),
  };
}

/**
 * Codex tool names (hook names, or the model's in a rollout) -> the canonical names the
 * shared rules know, and the arguments in the shape they read.
 */
export function canonicalCall(name: string, input: unknown): { tool: string; args: unknown } {
  const a = (input !== null && typeof input === 'object' ? input : {}) as Record<string, unknown>;
  switch (name) {
    case 'Bash':
      return { tool: 'bash', args: { command: a.command } };
    case 'exec_command':
      return { tool: 'bash', args: { command: a.cmd } };
    case 'shell_command':
      return { tool: 'bash', args: { command: a.command } };
    case 'apply_patch':
      // the hook has the patch text in `command`, the rollout in the custom call's input
      return { tool: 'patch', args: { patchText: typeof input === 'string' ? input : a.command } };
    default:
      return {
        tool: sanitizeTarget(name.toLowerCase())
          .replace(/[^\x21-\x7e]/g, '_')
          .slice(0, 64),
        args: input,
      };
  }
}

/**
 * The exit code in a call's output text: a command's "Process exited with code N", a
 * patch's leading "Exit code: N". Undefined when the text has neither (the text itself
 * is never kept).
 */
export function exitInText(text: string): number | undefined {
  const m =
    /^Process exited with code (-?\d{1,10})$/m.exec(text) ?? /^Exit code: (-?\d{1,10})$/m.exec(text.slice(0, 200));
  return m ? Number(m[1]) : undefined;
}

/** What the model is shown of a command, without Codex's own header lines (chunk id, wall time...). */
export function outputBody(text: string): string {
  const i = text.indexOf('\nOutput:\n');
  return i >= 0 && /^(Chunk ID|Exit code|Wall time|Process exited)/.test(text) ? text.slice(i + 9) : text;
}

/** Added and removed lines of an apply_patch text (the landed rule's `filediff`). */
function patchCounts(text: string): { additions: number; deletions: number } {
  let additions = 0;
  let deletions = 0;
  for (const l of text.split('\n')) {
    if (l.startsWith('***')) continue;
    if (l.startsWith('+')) additions++;
    else if (l.startsWith('-')) deletions++;
  }
  return { additions, deletions };
}

export interface FinishedCall {
  ids: { session_id: string; agent_id?: string; agent_type?: string };
  /** Codex's name for the tool (hook or rollout). */
  name: string;
  input: unknown;
  call_id: string;
  cwd?: string;
  /** The output text the model got (read for the exit code and the result fingerprint only). */
  output?: string;
  /** The exit code when known apart from the text (the rollout's CommandExecution). */
  exit?: number | null;
}

/** A finished call -> a tool event and the session's new landed tracker. */
export function toolEvent(
  c: FinishedCall,
  tr: LandedTracker,
  ts: number,
): { event: ToolEvent; tracker: LandedTracker } {
  const { tool, args } = canonicalCall(c.name, c.input);
  const facts = normalizeCall(tool, args, { cwd: c.cwd });
  const out = c.output;
  const blocked = out?.startsWith(BLOCKED) === true;
  const exit = c.exit !== undefined ? c.exit : out === undefined ? null : (exitInText(out) ?? (blocked ? 1 : null));
  // A command's output in the hook carries no exit line: without one it ran (0 unless told).
  const known = exit ?? (tool === 'bash' || tool === 'patch' ? null : 0);
  const status = blocked || (known !== null && known !== 0) ? 'error' : 'completed';
  const patchText = tool === 'patch' ? (args as { patchText?: unknown }).patchText : undefined;
  const { landed, tracker } = judgeLanded(tr, {
    tool,
    status,
    exit: known,
    metadata: tool === 'patch' && typeof patchText === 'string' ? { filediff: patchCounts(patchText) } : undefined,
    facts,
  });
  return {
    event: {
      kind: 'tool',
      ...who(c.ids),
      tool,
      call_id: c.call_id,
      fingerprint: facts.fingerprint,
      target: facts.target,
      exit: known,
      landed,
      ...(out !== undefined ? { result_fingerprint: resultFingerprint(known, outputBody(out)) } : {}),
      ts,
    },
    tracker,
  };
}

/** UserPromptSubmit (or SubagentStart for the child) -> a turn starts. Never the prompt. */
export function promptEvent(p: HookPayload, resumed: boolean, ts: number): PromptEvent {
  return { kind: 'prompt', ...who(p), ...(p.turn_id ? { call_id: p.turn_id } : {}), resume: resumed, ts };
}

// ---------------------------------------------------------------------------
// rollouts: $CODEX_HOME/sessions/YYYY/MM/DD/rollout-*.jsonl

const Usage = z.looseObject({
  input_tokens: z.number().int().min(0).optional(),
  cached_input_tokens: z.number().int().min(0).optional(),
  cache_write_input_tokens: z.number().int().min(0).optional(),
  output_tokens: z.number().int().min(0).optional(),
  reasoning_output_tokens: z.number().int().min(0).optional(),
});

const Line = z.looseObject({ timestamp: z.string().optional(), type: z.string(), payload: z.unknown() });

export interface RolloutCall {
  call_id: string;
  name: string;
  input: unknown;
  output?: string;
  exit?: number | null;
  ts: number;
}

export interface Rollout {
  /** session_meta: the thread, its root, its parent, its cwd, a subagent's nickname. */
  thread?: string;
  root?: string;
  parent?: string;
  cwd?: string;
  agent?: string;
  calls: RolloutCall[];
  models: AssistantEvent[];
  prompts: { ts: number; turn?: string }[];
}

const CODE = /^[A-Za-z0-9_.:/-]{1,64}$/;

/**
 * The calls of a rollout that ran and finished: an output is written. A call a hook
 * denied never ran (its output is Codex's refusal), so it is left out, live and in replay.
 */
export const finishedCalls = (r: Rollout): (RolloutCall & { output: string })[] =>
  r.calls.filter((c): c is RolloutCall & { output: string } => c.output !== undefined && !c.output.startsWith(BLOCKED));

/**
 * The facts of rollout lines (JSONL text, possibly cut at the start; lines that do not
 * parse are skipped): the calls with their outputs' exit codes, one assistant event per
 * model call (from its token_usage_record, with whether it answered visibly), the turns.
 * `ids` names the session the model calls are reported for.
 */
export function readRollout(
  text: string,
  ids: { session_id: string; agent_id?: string; agent_type?: string } | undefined,
  fallbackTs: number,
): Rollout {
  const r: Rollout = { calls: [], models: [], prompts: [] };
  const byId = new Map<string, RolloutCall>();
  let tools = 0;
  let said = '';
  let model: string | undefined;
  const pending: { response_id: string; usage: z.output<typeof Usage>; ts: number }[] = [];
  for (const raw of text.split('\n')) {
    if (!raw.startsWith('{')) continue;
    let j: unknown;
    try {
      j = JSON.parse(raw);
    } catch {
      continue;
    }
    const l = Line.safeParse(j);
    if (!l.success) continue;
    const ts = Date.parse(l.data.timestamp ?? '') || fallbackTs;
    const p = (l.data.payload ?? {}) as Record<string, any>;
    switch (l.data.type) {
      case 'session_meta': {
        if (typeof p.id === 'string') r.thread = p.id;
        if (typeof p.session_id === 'string') r.root = p.session_id;
        if (typeof p.parent_thread_id === 'string') r.parent = p.parent_thread_id;
        if (typeof p.cwd === 'string') r.cwd = p.cwd;
        const nick = p.source?.subagent?.thread_spawn?.agent_nickname;
        if (typeof nick === 'string') r.agent = cleanName(nick);
        break;
      }
      case 'turn_context':
        if (typeof p.model === 'string') model = p.model;
        break;
      case 'response_item': {
        if (p.type === 'function_call' || p.type === 'custom_tool_call') {
          let input: unknown = p.input;
          if (p.type === 'function_call') {
            try {
              input = JSON.parse(String(p.arguments ?? '{}'));
            } catch {
              input = {};
            }
          }
          const name = `${typeof p.namespace === 'string' ? p.namespace : ''}${String(p.name ?? '?')}`;
          if (typeof p.call_id !== 'string') break;
          const c: RolloutCall = { call_id: p.call_id, name, input, ts };
          byId.set(c.call_id, c);
          r.calls.push(c);
          tools++;
        } else if (p.type === 'function_call_output' || p.type === 'custom_tool_call_output') {
          const c = typeof p.call_id === 'string' ? byId.get(p.call_id) : undefined;
          if (!c) break;
          c.output = typeof p.output === 'string' ? p.output : JSON.stringify(p.output ?? '');
          c.ts = ts;
        } else if (p.type === 'message' && p.role === 'assistant' && Array.isArray(p.content)) {
          for (const x of p.content) if (typeof x?.text === 'string') said += x.text;
        }
        break;
      }
      case 'event_msg': {
        if (p.type === 'item_completed' && p.item?.type === 'CommandExecution' && typeof p.item.id === 'string') {
          const c = byId.get(p.item.id);
          if (c && (typeof p.item.exit_code === 'number' || p.item.exit_code === null)) c.exit = p.item.exit_code;
        } else if (p.type === 'task_started') {
          r.prompts.push({ ts, ...(typeof p.turn_id === 'string' ? { turn: p.turn_id } : {}) });
        }
        break;
      }
      case 'token_usage_record': {
        const u = Usage.safeParse(p.usage);
        if (typeof p.response_id !== 'string' || !u.success) break;
        pending.push({ response_id: p.response_id, usage: u.data, ts });
        const visible = tools > 0 || said.trim().length > 0;
        const tf = tools === 0 ? textFingerprint(said) : undefined;
        const u2 = u.data;
        const cached = u2.cached_input_tokens ?? 0;
        const m = model ? `openai/${model}`.replace(/[^\x21-\x7e]/g, '_') : undefined;
        r.models.push({
          kind: 'assistant',
          ...who(ids ?? { session_id: r.thread ?? '?' }),
          call_id: p.response_id.slice(0, 100),
          ...(m && CODE.test(m) ? { model: m } : {}),
          input_tokens: Math.max(0, (u2.input_tokens ?? 0) - cached),
          output_tokens: u2.output_tokens ?? 0,
          reasoning_tokens: u2.reasoning_output_tokens ?? 0,
          cache_read_tokens: cached,
          cache_write_tokens: u2.cache_write_input_tokens ?? 0,
          finish: tools > 0 ? 'tool_calls' : 'stop',
          visible_output: visible,
          ...(tf ? { text_fingerprint: tf } : {}),
          ts,
        });
        tools = 0;
        said = '';
        break;
      }
    }
  }
  return r;
}
