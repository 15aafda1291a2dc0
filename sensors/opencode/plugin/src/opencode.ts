import type { PluginInput } from '@opencode-ai/plugin';
import { type SessionBulk, sessionBulk } from '../../convert.ts';
import type { OpencodeActions } from './directives.ts';
import type { ModelRef, SessionLookup } from './identity.ts';

// opencode's server API as the plugin uses it, through ctx.client (the v1 SDK client).
// ctx.client, not a bare fetch to ctx.serverUrl: opencode builds it with the project
// directory and the server's own auth headers (OPENCODE_SERVER_PASSWORD), so the calls
// reach the right instance on a secured server too. Every call has a timeout.

type Client = PluginInput['client'];
type Result = { error?: unknown; response?: Response; data?: unknown };

const CALL_MS = 5_000;
/**
 * summarize with `auto: true` answers only when the resumed agent loop ends, so its
 * timeout is long: whether dropping the connection would cancel the loop is not
 * something to find out in production.
 */
const SUMMARIZE_MS = 6 * 3_600_000;

function check(r: Result, what: string): unknown {
  if (r.error !== undefined || (r.response && !r.response.ok)) {
    throw new Error(`${what} answered ${r.response?.status ?? 'an error'}`);
  }
  return r.data;
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

export function opencodeActions(client: Client): OpencodeActions {
  return {
    async toast(t) {
      check(await client.tui.showToast({ body: t, signal: AbortSignal.timeout(CALL_MS) }), 'show-toast');
    },
    async abort(id) {
      check(await client.session.abort({ path: { id }, signal: AbortSignal.timeout(CALL_MS) }), 'abort');
    },
    async status(id) {
      const r = await client.session.status({ signal: AbortSignal.timeout(CALL_MS) });
      const all = check(r, 'session.status') as Record<string, { type?: string }> | undefined;
      if (!all) return undefined;
      const t = all[id]?.type;
      // An idle session is absent from the list.
      return t === undefined || t === 'idle' ? 'idle' : t === 'retry' ? 'retry' : 'busy';
    },
    async prompt(id, text) {
      check(
        await client.session.promptAsync({
          path: { id },
          body: { parts: [{ type: 'text', text }] },
          signal: AbortSignal.timeout(CALL_MS),
        }),
        'prompt_async',
      );
    },
    async waitIdle(id, maxMs) {
      const until = Date.now() + maxMs;
      while (Date.now() < until) {
        const r = await client.session.status({ signal: AbortSignal.timeout(CALL_MS) }).catch(() => undefined);
        const st = (r?.data as Record<string, { type?: string }> | undefined)?.[id];
        if (r?.data && (!st || st.type === 'idle')) return;
        await sleep(250);
      }
    },
    async summarize(id, model, auto) {
      // The v1 SDK types predate `auto`; the client sends the body as given.
      const body = { providerID: model.providerID, modelID: model.modelID, auto } as {
        providerID: string;
        modelID: string;
      };
      check(
        await client.session.summarize({ path: { id }, body, signal: AbortSignal.timeout(SUMMARIZE_MS) }),
        'summarize',
      );
    },
    async fresh(title, brief) {
      const s = check(
        await client.session.create({ body: { title }, signal: AbortSignal.timeout(CALL_MS) }),
        'session.create',
      ) as { id?: unknown } | undefined;
      if (typeof s?.id !== 'string') throw new Error('session.create answered no id');
      check(
        await client.session.promptAsync({
          path: { id: s.id },
          body: { parts: [{ type: 'text', text: brief }] },
          signal: AbortSignal.timeout(CALL_MS),
        }),
        'prompt_async',
      );
      return s.id;
    },
    async lastModel(id) {
      const r = await client.session.messages({
        path: { id },
        query: { limit: 20 },
        signal: AbortSignal.timeout(CALL_MS),
      });
      const list = check(r, 'messages') as
        | { info?: { role?: string; providerID?: unknown; modelID?: unknown } }[]
        | undefined;
      for (const m of [...(list ?? [])].reverse()) {
        const i = m.info;
        if (i?.role === 'assistant' && typeof i.providerID === 'string' && typeof i.modelID === 'string') {
          return { providerID: i.providerID, modelID: i.modelID } satisfies ModelRef;
        }
      }
      return undefined;
    },
  };
}

/** The parent lookup for chat.headers: `GET /session/{id}` (its info has parentID). */
export function sessionLookup(client: Client): SessionLookup {
  return async (id, signal) => check(await client.session.get({ path: { id }, signal }), 'session.get');
}

/** Bounds of the one read of a resumed session's stored messages (it may be many MB). */
const MEASURE_MS = 15_000;

/**
 * Whether a session this process never saw has history: its newest messages (the
 * prompt being created may already be among them) include another one.
 */
export function historyLookup(client: Client) {
  return async (id: string, messageID: string | undefined): Promise<boolean | undefined> => {
    const r = await client.session.messages({
      path: { id },
      query: { limit: 2 },
      signal: AbortSignal.timeout(CALL_MS),
    });
    const list = check(r, 'messages') as { info?: { id?: unknown } }[] | undefined;
    if (!Array.isArray(list)) return undefined;
    return list.some((m) => m.info?.id !== messageID);
  };
}

/** A resumed session's bulk: one read of its stored messages, measured (counts and sizes), nothing kept. */
export function bulkMeasure(client: Client) {
  return async (id: string): Promise<SessionBulk | undefined> => {
    const r = await client.session.messages({ path: { id }, signal: AbortSignal.timeout(MEASURE_MS) });
    const list = check(r, 'messages');
    return Array.isArray(list) ? sessionBulk(list) : undefined;
  };
}

/**
 * A warning a person sees: a toast in the opencode window and a line in opencode's own
 * log (`service=vigil`), where `opencode serve` without a window keeps it.
 */
export function opencodeNotice(client: Client): (message: string) => Promise<void> {
  return async (message) => {
    // Each on its own: one failing (no window, an older server) must not stop the other.
    const calls = [
      () =>
        client.tui.showToast({
          body: { title: 'Vigil', message, variant: 'warning', duration: 15_000 },
          signal: AbortSignal.timeout(CALL_MS),
        }),
      () =>
        client.app.log({ body: { service: 'vigil', level: 'warn', message }, signal: AbortSignal.timeout(CALL_MS) }),
    ];
    await Promise.allSettled(calls.map(async (call) => call()));
  };
}
