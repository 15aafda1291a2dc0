// The `cap` context limit, enforced on the request itself: the oldest turns of the
// conversation are cut until the prompt fits. Works on the wire shapes a router
// carries: OpenAI chat completions (`messages` with system, user, assistant and tool
// roles), Anthropic messages (`system` apart, tool results in user messages) and OpenAI
// Responses (`input` items: messages, reasoning, calls and their outputs by call_id;
// `instructions` apart), what Codex sends.
//
// What is kept: the leading system/developer messages and the first user message (the
// task; with Responses every message before the first answer, as Codex puts its
// context there), and the newest turns. A turn is cut whole: an assistant message goes
// with the tool results that answer it, so no tool result is left without its call.

/** A rough prompt size: JSON bytes / 4 (the usual chars-per-token estimate). */
export function estimateTokens(body: unknown): number {
  return Math.ceil(JSON.stringify(body ?? '').length / 4);
}

export type CapResult =
  | { kind: 'fits'; tokens: number }
  | { kind: 'cut'; body: Record<string, unknown>; turns: number; before: number; after: number }
  /** Even with every older turn cut the prompt is over the cap. */
  | { kind: 'over'; tokens: number };

interface Msg {
  role?: unknown;
  content?: unknown;
}

const isToolResult = (m: Msg): boolean => {
  if (m.role === 'tool' || m.role === 'function') return true;
  // Anthropic: a user message carrying tool_result blocks answers the assistant before it.
  return (
    m.role === 'user' &&
    Array.isArray(m.content) &&
    m.content.some((b) => (b as { type?: unknown } | null)?.type === 'tool_result')
  );
};

interface Item {
  type?: unknown;
  role?: unknown;
  call_id?: unknown;
}

const isMessage = (i: Item) => i.type === 'message' || (i.type === undefined && typeof i.role === 'string');

/**
 * Where the turns of a Responses `input` start: the head is every message before the
 * first answer; a turn may start at any item that is not a call's output, except where
 * a call before it is answered after it (parallel calls and their outputs stay
 * together) or a reasoning item just before it (it goes with what it reasoned).
 */
function responsesTurns(items: Item[]): { head: number; starts: number[] } {
  let head = 0;
  while (head < items.length && isMessage(items[head]) && items[head]?.role !== 'assistant') head++;
  // open[i] > 0: a call before i has its output at i or later
  const open = new Array<number>(items.length + 1).fill(0);
  const callAt = new Map<unknown, number>();
  items.forEach((it, i) => {
    if (typeof it?.call_id !== 'string') return;
    const c = callAt.get(it.call_id);
    if (c === undefined) callAt.set(it.call_id, i);
    else if (c < i) {
      open[c + 1]++;
      open[i + 1]--;
    }
  });
  const starts: number[] = [];
  let depth = 0;
  for (let i = 0; i < items.length; i++) {
    depth += open[i];
    if (i < head) continue;
    const output = typeof items[i]?.type === 'string' && String(items[i].type).endsWith('_output');
    const afterReasoning = i > head && items[i - 1]?.type === 'reasoning';
    if (starts.length === 0 || (!output && !afterReasoning && depth === 0)) starts.push(i);
  }
  return { head, starts };
}

/**
 * The body cut to fit `max` tokens (estimated as the gate does), or why it cannot be.
 * Pure: the input body is not changed; a cut returns a shallow copy with new messages
 * (or input items).
 */
export function capBody(body: unknown, max: number): CapResult {
  const tokens = estimateTokens(body);
  if (tokens <= max) return { kind: 'fits', tokens };
  const b = body as { messages?: unknown; input?: unknown } | null;
  if (!b || typeof b !== 'object') return { kind: 'over', tokens };
  const key = Array.isArray(b.messages) ? 'messages' : Array.isArray(b.input) ? 'input' : undefined;
  if (!key) return { kind: 'over', tokens };
  const msgs = b[key] as Msg[];
  let head = 0;
  let starts: number[] = [];
  if (key === 'input') ({ head, starts } = responsesTurns(msgs as Item[]));
  else {
    // The head: system messages, then the first user message.
    while (head < msgs.length && (msgs[head]?.role === 'system' || msgs[head]?.role === 'developer')) head++;
    if (head < msgs.length && msgs[head]?.role === 'user' && !isToolResult(msgs[head])) head++;
    // Turns after the head: each starts at a message that is not a tool result.
    for (let i = head; i < msgs.length; i++) if (!isToolResult(msgs[i]) || starts.length === 0) starts.push(i);
  }
  if (starts.length < 2) return { kind: 'over', tokens };
  // Bytes each turn adds to the JSON (its messages and their commas).
  const size = (from: number, to: number) => {
    let n = 0;
    for (let i = from; i < to; i++) n += JSON.stringify(msgs[i] ?? null).length + 1;
    return n;
  };
  let bytes = JSON.stringify(body).length;
  const limit = max * 4;
  let cut = 0; // turns cut, oldest first; the newest turn always stays
  while (bytes > limit && cut < starts.length - 1) {
    bytes -= size(starts[cut], starts[cut + 1]);
    cut++;
  }
  if (bytes > limit) return { kind: 'over', tokens };
  const kept = [...msgs.slice(0, head), ...msgs.slice(starts[cut])];
  const out = { ...(body as Record<string, unknown>), [key]: kept };
  return { kind: 'cut', body: out, turns: cut, before: tokens, after: estimateTokens(out) };
}
