import { describe, expect, it } from 'vitest';
import { opencodeActions, sessionLookup } from './opencode.ts';

// The adapter over ctx.client (the v1 SDK client): what it asks opencode, and how it
// reads the `{data, error, response}` results.

type Call = { name: string; opts: any };

function fakeClient(o: { status?: unknown[]; messages?: unknown; fail?: string } = {}) {
  const calls: Call[] = [];
  let statusIdx = 0;
  const res = (name: string, opts: any, data: unknown) => {
    calls.push({ name, opts });
    if (o.fail === name)
      return Promise.resolve({ error: { name: 'UnknownError' }, response: new Response(null, { status: 500 }) });
    return Promise.resolve({ data, response: new Response(null, { status: 200 }) });
  };
  const client = {
    session: {
      abort: (opts: any) => res('abort', opts, true),
      get: (opts: any) => res('get', opts, { id: opts.path.id, parentID: 'ses_parent' }),
      status: (opts: any) => res('status', opts, o.status?.[Math.min(statusIdx++, (o.status?.length ?? 1) - 1)] ?? {}),
      summarize: (opts: any) => res('summarize', opts, true),
      messages: (opts: any) => res('messages', opts, o.messages ?? []),
    },
    tui: { showToast: (opts: any) => res('showToast', opts, true) },
  };
  return { client: client as never, calls };
}

describe('opencode actions over ctx.client', () => {
  it('summarizes with the model and the auto flag in the body (absent from the v1 types), with a timeout', async () => {
    const { client, calls } = fakeClient();
    await opencodeActions(client).summarize('ses_a', { providerID: 'fake', modelID: 'loop-model' }, true);
    expect(calls[0].name).toBe('summarize');
    expect(calls[0].opts.path).toEqual({ id: 'ses_a' });
    expect(calls[0].opts.body).toEqual({ providerID: 'fake', modelID: 'loop-model', auto: true });
    expect(calls[0].opts.signal).toBeInstanceOf(AbortSignal);
  });

  it('aborts and toasts with a timeout on each call, and throws when opencode answers an error', async () => {
    const { client, calls } = fakeClient();
    const a = opencodeActions(client);
    await a.abort('ses_a');
    await a.toast({ title: 'Vigil', message: 'loop', variant: 'warning' });
    expect(calls.map((c) => c.name)).toEqual(['abort', 'showToast']);
    expect(calls[1].opts.body).toEqual({ title: 'Vigil', message: 'loop', variant: 'warning' });
    expect(calls.every((c) => c.opts.signal instanceof AbortSignal)).toBe(true);
    await expect(opencodeActions(fakeClient({ fail: 'abort' }).client).abort('ses_a')).rejects.toThrow(
      'abort answered 500',
    );
  });

  it('waits while the session is busy, returns once it is absent from /session/status', async () => {
    const { client, calls } = fakeClient({ status: [{ ses_a: { type: 'busy' } }, { ses_a: { type: 'busy' } }, {}] });
    await opencodeActions(client).waitIdle('ses_a', 10_000);
    expect(calls.filter((c) => c.name === 'status')).toHaveLength(3);
  });

  it("takes the model of the session's last assistant message", async () => {
    const messages = [
      { info: { role: 'user', model: { providerID: 'x', modelID: 'y' } } },
      { info: { role: 'assistant', providerID: 'old', modelID: 'm1' } },
      { info: { role: 'assistant', providerID: 'fake', modelID: 'loop-model' } },
      { info: { role: 'user' } },
    ];
    const { client, calls } = fakeClient({ messages });
    expect(await opencodeActions(client).lastModel('ses_a')).toEqual({ providerID: 'fake', modelID: 'loop-model' });
    expect(calls[0].opts.query).toEqual({ limit: 20 });
    expect(await opencodeActions(fakeClient().client).lastModel('ses_a')).toBeUndefined();
  });

  it('looks a session up with GET /session/{id}', async () => {
    const { client, calls } = fakeClient();
    const info = await sessionLookup(client)('ses_child', AbortSignal.timeout(1000));
    expect(info).toEqual({ id: 'ses_child', parentID: 'ses_parent' });
    expect(calls[0].opts.path).toEqual({ id: 'ses_child' });
  });
});
