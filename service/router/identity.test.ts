import type { FastifyRequest } from 'fastify';
import { describe, expect, it } from 'vitest';
import { sensors } from '../../builtins.ts';
import { identityOf } from '../router.ts';

// The gate's identity of a model request from each sensor's declared header table
// (core/sensor.ts `gate`): the headers each agent was seen sending.
const req = (headers: Record<string, string>, body: unknown = { model: 'm' }) =>
  ({ headers, body }) as unknown as FastifyRequest;

describe('identityOf: one table of header names per sensor', () => {
  it("Codex: the thread-id is the conversation, a subagent's parent its x-codex-parent-thread-id", () => {
    const root = '01a23306-8d85-7212-b9c5-15c92585db4a';
    const child = '01a23306-8fbb-7ec3-8045-3140400f7a22';
    expect(identityOf(req({ 'session-id': root, 'thread-id': root }), sensors)).toEqual({
      conversation: root,
      model: 'm',
    });
    expect(
      identityOf(req({ 'session-id': root, 'thread-id': child, 'x-codex-parent-thread-id': root }), sensors),
    ).toEqual({ conversation: child, parent: root, model: 'm' });
  });

  it("Claude Code: session id, a subagent's <session>.<agent id> under it; opencode: x-session-id", () => {
    expect(identityOf(req({ 'x-claude-code-session-id': 's1', 'x-claude-code-agent-id': 'a9' }), sensors)).toEqual({
      conversation: 's1.a9',
      parent: 's1',
      model: 'm',
    });
    expect(identityOf(req({ 'x-session-id': 'ses_1' }), sensors)).toEqual({ conversation: 'ses_1', model: 'm' });
  });

  it('the router headers win; a request naming no conversation (Gemini CLI) has no identity', () => {
    expect(
      identityOf(req({ 'x-router-conversation': 'c', 'thread-id': 't', 'x-codex-parent-thread-id': 'p' }), sensors),
    ).toEqual({ conversation: 'c', model: 'm' });
    expect(identityOf(req({ 'user-agent': 'GeminiCLI/0.61.0', 'x-goog-api-key': 'k' }), sensors)).toBeUndefined();
    expect(identityOf(req({ 'thread-id': 't' }), [])).toBeUndefined();
  });
});
