// The `cap` context limit, enforced on the request itself: the oldest turns of the
// conversation are cut until the prompt fits. Works on both wire shapes a router
// carries: OpenAI chat completions (`messages` with system, user, assistant and tool
// roles) and Anthropic messages (`system` apart, tool results in user messages).
//
// What is kept: the leading system/developer messages and the first user message (the
// task), and the newest turns. A turn is cut whole: an assistant message goes with the
// tool results that answer it, so no tool result is left without its call.

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

/**
 * The body cut to fit `max` tokens (estimated as the gate does), or why it cannot be.
 * Pure: the input body is not changed; a cut returns a shallow copy with new messages.
 */
export function capBody(body: unknown, max: number): CapResult {
  const tokens = estimateTokens(body);
  if (tokens <= max) return { kind: 'fits', tokens };
  const b = body as { messages?: unknown } | null;
  if (!b || typeof b !== 'object' || !Array.isArray(b.messages)) return { kind: 'over', tokens };
  const msgs = b.messages as Msg[];
  // The head: system messages, then the first user message.
  let head = 0;
  while (head < msgs.length && (msgs[head]?.role === 'system' || msgs[head]?.role === 'developer')) head++;
  if (head < msgs.length && msgs[head]?.role === 'user' && !isToolResult(msgs[head])) head++;
  // Turns after the head: each starts at a message that is not a tool result.
  const starts: number[] = [];
  for (let i = head; i < msgs.length; i++) if (!isToolResult(msgs[i]) || starts.length === 0) starts.push(i);
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
  const messages = [...msgs.slice(0, head), ...msgs.slice(starts[cut])];
  const out = { ...(body as Record<string, unknown>), messages };
  return { kind: 'cut', body: out, turns: cut, before: tokens, after: estimateTokens(out) };
}
