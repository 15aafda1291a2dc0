import { describe, expect, it } from 'vitest';
import { CHILD, captured, ROOT } from '../fixtures/captured.ts';
import { identityHeaders, SessionBook, sessionInfoOf, slugAgent } from './identity.ts';

const lines = captured();
const events = lines.filter((l) => l.hook === 'event').map((l) => l.input.event);

describe('slugAgent', () => {
  it("slugs agent names to the router's charset", () => {
    expect(slugAgent('build')).toBe('build');
    expect(slugAgent('Sisyphus-Junior')).toBe('sisyphus-junior');
    expect(slugAgent('  Prometheus (Planner) ')).toBe('prometheus-planner');
    expect(slugAgent('multimodal_looker')).toBe('multimodal-looker');
    expect(slugAgent('\u00c4rger 2')).toBe('rger-2');
    expect(slugAgent('x'.repeat(100))).toHaveLength(64);
    expect(slugAgent('---')).toBeUndefined();
    expect(slugAgent(undefined)).toBeUndefined();
    expect(slugAgent(42)).toBeUndefined();
  });
});

describe('SessionBook', () => {
  it('learns parent, agent and model from the captured session.created / session.updated events', () => {
    const book = new SessionBook();
    for (const e of events) book.learnSession(sessionInfoOf(e));
    expect(book.parentOf(ROOT)).toBeNull();
    expect(book.parentOf(CHILD)).toBe(ROOT);
    expect(book.get(CHILD).agent).toBe('general');
    expect(book.get(ROOT).model).toEqual({ providerID: 'fake', modelID: 'loop-model' });
    expect(book.rootOf(CHILD)).toBe(ROOT);
    expect(book.rootOf('ses_unknown')).toBe('ses_unknown');
  });

  it('ignores events that carry no session info', () => {
    const book = new SessionBook();
    for (const e of events)
      if (e.type !== 'session.created' && e.type !== 'session.updated') book.learnSession(sessionInfoOf(e));
    expect(book.parentOf(ROOT)).toBeUndefined();
  });

  it('looks an unknown session up once and caches the answer', async () => {
    let calls = 0;
    const book = new SessionBook({
      lookup: async (id) => {
        calls++;
        return { id, parentID: ROOT, agent: 'general' };
      },
    });
    expect(await book.resolveParent(CHILD)).toBe(ROOT);
    expect(await book.resolveParent(CHILD)).toBe(ROOT);
    expect(calls).toBe(1);
    expect(book.get(CHILD).agent).toBe('general');
  });

  it('never waits past the lookup timeout: the header is skipped, a late answer still fills the cache', async () => {
    let release: () => void = () => {};
    const gate = new Promise<void>((r) => (release = r));
    const book = new SessionBook({
      lookupTimeoutMs: 20,
      lookup: async (id) => {
        await gate;
        return { id, parentID: ROOT };
      },
    });
    expect(await book.resolveParent(CHILD)).toBeUndefined();
    release();
    await new Promise((r) => setTimeout(r, 10));
    expect(book.parentOf(CHILD)).toBe(ROOT);
  });

  it('does not ask again right after a failed lookup', async () => {
    let calls = 0;
    let now = 1_000;
    const book = new SessionBook({
      now: () => now,
      retryAfterMs: 30_000,
      lookup: async () => {
        calls++;
        throw new Error('opencode answered 500');
      },
    });
    expect(await book.resolveParent(CHILD)).toBeUndefined();
    expect(await book.resolveParent(CHILD)).toBeUndefined();
    expect(calls).toBe(1);
    now += 30_001;
    await book.resolveParent(CHILD);
    expect(calls).toBe(2);
  });

  it('stays bounded', () => {
    const book = new SessionBook({ max: 10 });
    for (let i = 0; i < 100; i++) book.learnSession({ id: `ses_${i}`, parentID: 'ses_root' });
    expect(book.parentOf('ses_0')).toBeUndefined();
    expect(book.parentOf('ses_99')).toBe('ses_root');
  });
});

describe('identityHeaders', () => {
  it('names the conversation, the slugged agent, the parent and the plugin version (captured chat.headers input)', () => {
    const h = lines.find((l) => l.hook === 'chat.headers' && l.input.sessionID === CHILD)!;
    expect(identityHeaders(h.input.sessionID, h.input.agent, ROOT, 'vigil-opencode/1.2.3+abc')).toEqual({
      'X-Router-Conversation': CHILD,
      'X-Router-Agent': 'general',
      'X-Router-Parent': ROOT,
      'X-Vigil-Plugin': 'vigil-opencode/1.2.3+abc',
    });
  });

  it('skips the parent header for a root or an unknown parent', () => {
    expect(identityHeaders(ROOT, 'build', null, 'p/1')).not.toHaveProperty('X-Router-Parent');
    expect(identityHeaders(ROOT, 'build', undefined, 'p/1')).not.toHaveProperty('X-Router-Parent');
    expect(identityHeaders(ROOT, undefined, undefined, 'p/1')).not.toHaveProperty('X-Router-Agent');
  });
});
