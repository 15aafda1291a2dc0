// Claude Code's conversation identity, one rule for the hooks and the router:
// every hook payload and every model request carries the parent session's id
// (`session_id`, header `x-claude-code-session-id`); a subagent's add its agent id
// (`agent_id`, header `x-claude-code-agent-id`). A subagent is its own Vigil session,
// `<session>.<agent id>`, child of the session.

/** A subagent's Vigil session id: the parent session and the agent id. */
export function sessionKey(session: string, agent?: string | null): string {
  return agent ? `${session}.${agent}` : session;
}

export const SESSION_HEADER = 'x-claude-code-session-id';
export const AGENT_HEADER = 'x-claude-code-agent-id';

/** The gate identity of a Claude Code model request, from its headers; undefined when it has none. */
export function identityFromHeaders(
  get: (name: string) => string | undefined,
): { conversation: string; parent?: string } | undefined {
  const session = get(SESSION_HEADER);
  if (!session) return undefined;
  const agent = get(AGENT_HEADER);
  return agent ? { conversation: sessionKey(session, agent), parent: session } : { conversation: session };
}
