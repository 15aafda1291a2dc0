import { appendFileSync } from 'node:fs';
import type { Hooks, Plugin, PluginInput } from '@opencode-ai/plugin';
import { loadSensorSecret, sensorSecretFile, sessionKey } from '../../../../core/session-key.ts';
import type { Log } from './client.ts';
import { PluginCore } from './core.ts';
import { SessionBook } from './identity.ts';
import { bulkMeasure, historyLookup, opencodeActions, opencodeNotice, sessionLookup } from './opencode.ts';
import { type Settings, settingsOf, troubleMessage } from './settings.ts';
import { PLUGIN_ID } from './version.ts';

// The hook shell: opencode 1.18 loads this file from a plugin directory and calls every
// exported function as a plugin `(ctx) => hooks`, so this module exports exactly one
// (helpers stay unexported). Each hook is wrapped: a failure here must never fail or
// slow the agent's session. The one deliberate throw: tool.execute.before refuses a
// blocked tree's tool call (a hard stop holds without a router; the model sees why).
//
// Where it reports: the plugin option `url` (opencode.json), else VIGIL_URL, else
// http://127.0.0.1:7411 (src/settings.ts); the token from VIGIL_INGEST_TOKEN (or the
// variable the option `token_env` names). When nothing answers there it says so once,
// in a toast and in opencode's log. Env: VIGIL_PLUGIN_LOG (a file for debug lines; off
// by default: opencode owns the terminal), VIGIL_POLL_MS (directive poll, default
// 3000), VIGIL_STATS_MS (session_stats of a resume waiting for its first token,
// default 10000), VIGIL_PLUGIN_DISABLED=1 (load as a no-op). Every request carries the
// key of each session it names, derived from the user's sensor secret (created on first
// use: $XDG_STATE_HOME/vigil/sensor-secret, or VIGIL_SENSOR_SECRET_FILE), so only this
// sensor can stop, lift or read the directives of the sessions it reported first.

function fileLog(path: string | undefined): Log | undefined {
  if (!path) return undefined;
  return (level, msg, data) => {
    try {
      appendFileSync(path, `${JSON.stringify({ t: new Date().toISOString(), level, msg, ...data })}\n`);
    } catch {
      // a debug log must not break anything
    }
  };
}

/**
 * Each session's key from the sensor secret, or undefined when the secret cannot be
 * read or made (the reports then go without keys: fail open, said once in the log).
 */
function sessionSigner(env: Record<string, string | undefined>, log: Log | undefined) {
  const file = sensorSecretFile(env);
  try {
    const secret = loadSensorSecret(file, { create: true });
    return (id: string) => sessionKey(secret, id);
  } catch (err) {
    log?.('warn', 'no sensor secret: reports go without session keys', { file, err: String(err).slice(0, 200) });
    return undefined;
  }
}

function createCore(ctx: PluginInput, env: Record<string, string | undefined>, settings: Settings): PluginCore {
  const poll = Number(env.VIGIL_POLL_MS);
  const stats = Number(env.VIGIL_STATS_MS);
  const notice = opencodeNotice(ctx.client);
  const log = fileLog(env.VIGIL_PLUGIN_LOG);
  const signer = sessionSigner(env, log);
  return new PluginCore({
    book: new SessionBook({ lookup: sessionLookup(ctx.client) }),
    actions: opencodeActions(ctx.client),
    vigil: {
      url: settings.url,
      pluginId: PLUGIN_ID,
      ...(settings.token ? { token: settings.token } : {}),
      ...(signer ? { sessionKey: signer } : {}),
      onTrouble: (t) => void notice(troubleMessage(t, settings.from)),
    },
    cwd: ctx.directory,
    pollMs: Number.isFinite(poll) && poll >= 250 ? poll : 3_000,
    hygiene: {
      hasHistory: historyLookup(ctx.client),
      measure: bulkMeasure(ctx.client),
      statsMs: Number.isFinite(stats) && stats >= 250 ? stats : 10_000,
    },
    log,
  });
}

export const VigilPlugin: Plugin = async (ctx, options) => {
  if (process.env.VIGIL_PLUGIN_DISABLED === '1') return {};
  const log = fileLog(process.env.VIGIL_PLUGIN_LOG);
  let settings: Settings;
  try {
    settings = settingsOf(options, process.env);
  } catch (err) {
    // A bad option: say so where a person looks, and load as a no-op.
    void opencodeNotice(ctx.client)(`${(err as Error).message}; the Vigil plugin is off.`);
    return {};
  }
  const core = createCore(ctx, process.env, settings);
  log?.('debug', 'loaded', { plugin: PLUGIN_ID, directory: ctx.directory, url: settings.url, from: settings.from });
  const guard =
    <A extends unknown[]>(name: string, fn: (...a: A) => unknown) =>
    async (...a: A): Promise<void> => {
      try {
        await fn(...a);
      } catch (err) {
        log?.('warn', 'hook failed', { hook: name, err: String(err).slice(0, 200) });
      }
    };
  const hooks: Hooks = {
    // Not guarded: throwing is how a refused or stopped tree's tool call is refused (the
    // model gets the error). Nothing else here throws.
    'tool.execute.before': async (input: unknown) => {
      let refused: string | undefined;
      try {
        refused = core.onToolBefore(input);
      } catch (err) {
        log?.('warn', 'hook failed', { hook: 'tool.execute.before', err: String(err).slice(0, 200) });
      }
      if (refused !== undefined) throw new Error(refused);
    },
    event: guard('event', ({ event }: { event: unknown }) => core.onEvent(event)),
    'chat.message': guard('chat.message', (i: unknown, o: unknown) => core.onChatMessage(i, o)),
    'chat.params': guard('chat.params', (i: unknown) => core.onChatParams(i)),
    'chat.headers': guard('chat.headers', (i: unknown, o: unknown) => core.onChatHeaders(i, o)),
    'tool.execute.after': guard('tool.execute.after', (i: unknown, o: unknown) => core.onToolAfter(i, o)),
    'experimental.session.compacting': guard('compacting', (i: unknown, o: unknown) => core.onCompacting(i, o)),
    dispose: guard('dispose', () => core.dispose()),
  };
  return hooks;
};
