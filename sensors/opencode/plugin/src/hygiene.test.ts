import { describe, expect, it } from 'vitest';
import { type ProgressEvent, ProgressEventSchema } from '../../../../core/wire.ts';
import { textFingerprint } from '../../../shared/normalize.ts';
import { imageBytes, type SessionBulk, sessionBulk } from '../../convert.ts';
import { HygieneSensor } from './hygiene.ts';
import { SessionBook } from './identity.ts';

// The session-hygiene facts from opencode 1.18 bus events and chat.message, shaped as
// the verified 1.18.33 payloads (message.updated `{info}`, message.part.updated
// `{part, time}`, message.part.delta `{messageID, field, delta}`, session.status
// `{sessionID, status}`). Every event must pass the service's strict schema and carry
// no text.

const S = 'ses_hyg';
const SECRET = 'SECRET-TEXT do not send';
let clock = 1_796_000_000_000;
const now = () => clock;

function sensor(o: { history?: boolean; bulk?: SessionBulk; statsMs?: number } = {}) {
  const book = new SessionBook();
  book.learnSession({ id: S, parentID: null, agent: 'build' });
  const lookups: string[] = [];
  const h = new HygieneSensor({
    book,
    now,
    statsMs: o.statsMs ?? 5_000,
    hasHistory: async (id) => {
      lookups.push(id);
      return o.history;
    },
    measure: async () => o.bulk,
  });
  const out: ProgressEvent[] = [];
  const bus = (type: string, properties: unknown) => out.push(...h.busEvent({ type, properties }));
  const prompt = async (id: string, created = clock) =>
    out.push(
      ...(await h.chatMessage(
        { sessionID: S },
        {
          message: { id, role: 'user', sessionID: S, time: { created } },
          parts: [{ type: 'text', text: SECRET }],
        },
        false,
      )),
    );
  return { h, out, bus, prompt, lookups };
}

const info = (id: string, extra: Record<string, unknown> = {}) => ({
  id,
  sessionID: S,
  role: 'assistant',
  modelID: 'loop-model',
  providerID: 'fake',
  tokens: { input: 1000, output: 20, reasoning: 0, cache: { read: 9000, write: 0 } },
  time: { created: clock },
  ...extra,
});

/** One model step as opencode publishes it: created, output (text or a tool), finished. */
function step(t: ReturnType<typeof sensor>, id: string, o: { text?: string; tool?: boolean; finish?: string } = {}) {
  t.bus('message.updated', { sessionID: S, info: info(id) });
  if (o.text !== undefined) {
    t.bus('message.part.updated', {
      part: { id: `prt_${id}`, sessionID: S, messageID: id, type: 'text', text: '' },
      time: clock,
    });
    if (o.text)
      t.bus('message.part.delta', { sessionID: S, messageID: id, partID: `prt_${id}`, field: 'text', delta: o.text });
  }
  if (o.tool) {
    t.bus('message.part.updated', {
      part: {
        id: `prt_t${id}`,
        sessionID: S,
        messageID: id,
        type: 'tool',
        callID: 'c1',
        tool: 'read',
        state: { status: 'running' },
      },
      time: clock,
    });
  }
  clock += 1_000;
  t.bus('message.updated', {
    sessionID: S,
    info: info(id, {
      time: { created: clock - 1_000, completed: clock },
      finish: o.finish ?? (o.tool ? 'tool-calls' : 'stop'),
    }),
  });
}

const valid = (evs: ProgressEvent[]) => {
  for (const e of evs) ProgressEventSchema.parse(e);
  expect(JSON.stringify(evs)).not.toContain('SECRET');
};

describe('assistant events', () => {
  it('one per finished model step: tokens, finish, visible output; a re-delivery counts once', () => {
    const t = sensor();
    step(t, 'msg_a1', { tool: true });
    step(t, 'msg_a2', { text: 'the answer' });
    t.bus('message.updated', { sessionID: S, info: info('msg_a2', { time: { created: 1, completed: clock } }) });
    expect(t.out.map((e) => e.kind)).toEqual(['assistant', 'assistant']);
    expect(t.out[1]).toMatchObject({
      kind: 'assistant',
      session_id: S,
      agent: 'build',
      call_id: 'msg_a2',
      model: 'fake/loop-model',
      input_tokens: 1000,
      cache_read_tokens: 9000,
      output_tokens: 20,
      finish: 'stop',
      visible_output: true,
    });
    expect(t.out[0]).toMatchObject({ finish: 'tool-calls', visible_output: true });
    valid(t.out);
  });

  it('a step that only talked carries the fingerprint of its text (streamed or whole); a step with a tool call none', () => {
    const t = sensor();
    step(t, 'msg_t1', { text: `All done. ${SECRET}` });
    step(t, 'msg_t2', { text: `All done. ${SECRET}`, tool: true });
    // the same text again, now whole in a part update (and wrapped differently)
    t.bus('message.updated', { sessionID: S, info: info('msg_t3') });
    t.bus('message.part.updated', {
      part: { id: 'prt_t3', sessionID: S, messageID: 'msg_t3', type: 'text', text: `All done.\n  ${SECRET}` },
      time: clock,
    });
    t.bus('message.part.updated', {
      part: { id: 'prt_s3', sessionID: S, messageID: 'msg_t3', type: 'text', text: 'injected', synthetic: true },
      time: clock,
    });
    t.bus('message.updated', {
      sessionID: S,
      info: info('msg_t3', { time: { created: clock, completed: clock + 5 }, finish: 'stop' }),
    });
    step(t, 'msg_t4', { text: 'Something else.' });
    const [a, b, c, d] = t.out.map((e) => (e.kind === 'assistant' ? e.text_fingerprint : 'x'));
    expect(a).toBe(textFingerprint(`All done. ${SECRET}`));
    expect(b).toBeUndefined();
    expect(c).toBe(a);
    expect(d).not.toBe(a);
    valid(t.out);
  });

  it('an empty generation: finished with no text and no tool call (reasoning is not visible)', () => {
    const t = sensor();
    t.bus('message.updated', { sessionID: S, info: info('msg_e') });
    t.bus('message.part.updated', {
      part: { id: 'prt_r', sessionID: S, messageID: 'msg_e', type: 'reasoning', text: 'thinking' },
    });
    t.bus('message.part.updated', {
      part: { id: 'prt_x', sessionID: S, messageID: 'msg_e', type: 'text', text: '  ' },
    });
    t.bus('message.updated', {
      sessionID: S,
      info: info('msg_e', { time: { created: 1, completed: clock }, finish: 'stop' }),
    });
    expect(t.out).toHaveLength(1);
    expect(t.out[0]).toMatchObject({ kind: 'assistant', visible_output: false, finish: 'stop' });
  });

  it("an error: its name and provider status code, never its message or the provider's body", () => {
    const t = sensor();
    t.bus('message.updated', {
      sessionID: S,
      info: info('msg_x', {
        error: {
          name: 'APIError',
          data: { message: SECRET, statusCode: 400, responseBody: SECRET, isRetryable: false },
        },
      }),
    });
    expect(t.out[0]).toMatchObject({
      kind: 'assistant',
      error_name: 'APIError',
      error_code: '400',
      visible_output: false,
    });
    valid(t.out);
    // a name that is not a code is not sent as one
    t.bus('message.updated', { sessionID: S, info: info('msg_y', { error: { name: 'Some sentence here' } }) });
    expect(t.out[1]).toMatchObject({ error_name: 'UnknownError' });
  });
});

describe('retry, image', () => {
  it('retry: one event per attempt from session.status, never its message', () => {
    const t = sensor();
    const retry = (attempt: number) =>
      t.bus('session.status', {
        sessionID: S,
        status: { type: 'retry', attempt, message: SECRET, next: clock + 2_000 },
      });
    retry(1);
    retry(1);
    retry(2);
    t.bus('session.status', { sessionID: S, status: { type: 'busy' } });
    expect(t.out.map((e) => (e.kind === 'retry' ? e.attempt : e.kind))).toEqual([1, 2]);
    expect(t.out[0]).toMatchObject({ kind: 'retry', next: clock + 2_000 });
    valid(t.out);
  });

  it('image: the decoded size of an image file part or a tool attachment, once per part', () => {
    const b64 = Buffer.alloc(3_000, 7).toString('base64');
    expect(imageBytes({ type: 'file', mime: 'image/png', url: `data:image/png;base64,${b64}` })).toBe(3_000);
    expect(imageBytes({ type: 'file', mime: 'text/plain', url: 'data:text/plain;base64,AAAA' })).toBeUndefined();
    expect(imageBytes({ type: 'file', mime: 'image/png', url: 'file:///tmp/x.png' })).toBeUndefined();
    const t = sensor();
    const part = {
      id: 'prt_img',
      sessionID: S,
      messageID: 'msg_u',
      type: 'file',
      mime: 'image/png',
      url: `data:image/png;base64,${b64}`,
    };
    t.bus('message.part.updated', { part });
    t.bus('message.part.updated', { part });
    t.bus('message.part.updated', {
      part: {
        id: 'prt_tool',
        sessionID: S,
        messageID: 'msg_t',
        type: 'tool',
        state: {
          status: 'completed',
          attachments: [{ id: 'prt_att', type: 'file', mime: 'image/jpeg', url: `data:image/jpeg;base64,${b64}` }],
        },
      },
    });
    expect(t.out.map((e) => (e.kind === 'image' ? [e.call_id, e.bytes] : e.kind))).toEqual([
      ['prt_img', 3_000],
      ['prt_att', 3_000],
    ]);
    expect(JSON.stringify(t.out)).not.toContain(b64.slice(0, 40));
  });
});

describe('prompts and the restore watch', () => {
  it('a new session: the first prompt is no resume; after a finished turn the next one is', async () => {
    const t = sensor();
    t.bus('session.created', { sessionID: 'ses_new', info: { id: S } });
    await t.prompt('msg_u1');
    step(t, 'msg_a1', { text: 'done' });
    t.bus('session.idle', { sessionID: S });
    clock += 60_000;
    await t.prompt('msg_u2', clock);
    const prompts = t.out.filter((e) => e.kind === 'prompt');
    expect(prompts.map((e) => e.kind === 'prompt' && [e.call_id, e.resume])).toEqual([
      ['msg_u1', false],
      ['msg_u2', true],
    ]);
    expect(prompts[1].ts).toBe(clock);
    expect(t.lookups).toEqual([]);
    valid(t.out);
  });

  it('a prompt while a step is running is no resume; a session never seen is looked up once', async () => {
    const t = sensor({ history: true });
    await t.prompt('msg_u1');
    expect(t.lookups).toEqual([S]);
    expect(t.out.at(-1)).toMatchObject({ kind: 'prompt', resume: true });
    t.bus('message.updated', { sessionID: S, info: info('msg_run') });
    await t.prompt('msg_u2');
    expect(t.out.at(-1)).toMatchObject({ kind: 'prompt', resume: false });
    expect(t.lookups).toEqual([S]);
  });

  it('a continuation turn is left to the marker; the same message twice is one prompt', async () => {
    const t = sensor({ history: false });
    const msg = { message: { id: 'msg_c', time: { created: clock } }, parts: [] };
    expect(await t.h.chatMessage({ sessionID: S }, msg, true)).toEqual([]);
    expect(await t.h.chatMessage({ sessionID: S }, { ...msg, message: { id: 'msg_p' } }, false)).toHaveLength(1);
    expect(await t.h.chatMessage({ sessionID: S }, { ...msg, message: { id: 'msg_p' } }, false)).toEqual([]);
  });

  it('session_stats while a resume waits for its first token: measured bulk, the newest output before it', async () => {
    const bulk: SessionBulk = {
      messages: 3_662,
      stored_bytes: 18_200_000,
      history_bytes: 1_930_000,
      updated_at: clock - 3_600_000,
    };
    const t = sensor({ history: true, bulk, statsMs: 5_000 });
    const resumeAt = clock;
    await t.prompt('msg_r', resumeAt);
    await new Promise((r) => setTimeout(r, 0)); // the measurement settles
    const first = t.h.drain();
    expect(first).toHaveLength(1);
    expect(first[0]).toMatchObject({
      kind: 'session_stats',
      session_id: S,
      messages: 3_662,
      stored_bytes: 18_200_000,
      history_bytes: 1_930_000,
      updated_at: resumeAt - 3_600_000,
      live: true,
    });
    expect(t.h.pending()).toBe(true);
    clock += 2_000;
    expect(t.h.due(clock)).toEqual([]); // at most every statsMs
    clock += 4_000;
    expect(t.h.due(clock)).toHaveLength(1);
    // the step starts: opencode creates its message before calling the provider; no first token yet
    t.bus('message.updated', { sessionID: S, info: info('msg_slow') });
    clock += 6_000;
    expect(t.h.due(clock)).toHaveLength(1);
    // the first token arrives: the watch is over, no more readings
    t.bus('message.part.delta', { sessionID: S, messageID: 'msg_slow', partID: 'p', field: 'text', delta: 'hi' });
    expect(t.h.pending()).toBe(false);
    clock += 60_000;
    expect(t.h.due(clock)).toEqual([]);
    valid(first);
  });

  it('the stalled step aborted, or the loop idle: the watch is over (no first token is coming)', async () => {
    const bulk: SessionBulk = { messages: 10, stored_bytes: 10_000, history_bytes: 10_000, updated_at: clock - 60_000 };
    const t = sensor({ history: true, bulk, statsMs: 0 });
    await t.prompt('msg_r1', clock);
    await new Promise((r) => setTimeout(r, 0));
    expect(t.h.drain()).toHaveLength(1);
    t.bus('message.updated', { sessionID: S, info: info('msg_stuck') });
    clock += 5_000;
    t.bus('message.updated', {
      sessionID: S,
      info: info('msg_stuck', {
        tokens: { input: 0, output: 0, reasoning: 0, cache: { read: 0, write: 0 } },
        time: { created: clock - 5_000, completed: clock },
        error: { name: 'MessageAbortedError', data: { message: 'Aborted' } },
      }),
    });
    expect(t.out.at(-1)).toMatchObject({ kind: 'assistant', error_name: 'MessageAbortedError', visible_output: false });
    expect(t.h.pending()).toBe(false);
    await t.prompt('msg_r2', clock + 1_000);
    expect(t.h.pending()).toBe(true);
    t.bus('session.idle', { sessionID: S });
    expect(t.h.pending()).toBe(false);
  });

  it('no reading without a measurement: nothing is concluded on a guess', async () => {
    const t = sensor({ history: true, bulk: undefined });
    await t.prompt('msg_r');
    await new Promise((r) => setTimeout(r, 0));
    clock += 60_000;
    expect([...t.h.drain(), ...t.h.due(clock)]).toEqual([]);
  });
});

describe('sessionBulk', () => {
  it('counts messages and bytes, the history since the last compaction, the newest model-side write', () => {
    const t0 = 1_796_000_000_000;
    const user = (id: string, at: number) => ({
      info: { id, role: 'user', time: { created: at } },
      parts: [{ type: 'text', text: 'x'.repeat(100) }],
    });
    const asst = (id: string, at: number, extra: Record<string, unknown> = {}) => ({
      info: { id, role: 'assistant', time: { created: at, completed: at + 500 }, ...extra },
      parts: [{ type: 'text', text: 'y'.repeat(200), time: { start: at, end: at + 400 } }],
    });
    const list = [
      user('u1', t0),
      asst('a1', t0 + 1_000),
      asst('s1', t0 + 2_000, { summary: true }),
      user('u2', t0 + 3_000),
      asst('a2', t0 + 4_000),
      // the resume's own prompt and the step it started: created, no output yet
      user('u3', t0 + 9_000),
      { info: { id: 'a3', role: 'assistant', time: { created: t0 + 9_100 } }, parts: [{ type: 'step-start' }] },
    ];
    const b = sessionBulk(list);
    const size = (x: unknown) => Buffer.byteLength(JSON.stringify(x));
    expect(b.messages).toBe(7);
    expect(b.stored_bytes).toBe(list.reduce((n, m) => n + size(m), 0));
    expect(b.history_bytes).toBe(list.slice(2).reduce((n, m) => n + size(m), 0));
    expect(b.updated_at).toBe(t0 + 4_500);
  });
});
