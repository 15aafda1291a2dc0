import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { FastifyPluginAsync } from 'fastify';
import { AppError } from '../../core/errors.ts';
import type { HookBridge } from '../../core/sensor.ts';
import { HOOK_KEY_HEADER, loadSensorSecret, sensorSecretFile } from '../../core/session-key.ts';
import type { VigilTransport } from '../../sensors/shared/client.ts';
import { HookHost } from '../../sensors/shared/hook-host.ts';
import { isLoopbackPeer } from '../auth.ts';

// The local hook endpoint, POST /hooks/<sensor>: the hooks of Claude Code (type http),
// Codex CLI and Gemini CLI (a curl command) post each raw payload here. The payload is
// handed to the sensor's bridge in memory (sensors/shared/hook-host.ts) and dropped;
// only the reduced events go on, through the same sensor routes, tokens and session
// keys as any sensor. It answers loopback peers only and needs this user's hook key;
// its body is read as bytes (never through the JSON parser, whose errors quote the
// text) and never logged.

export interface HookEndpointOptions {
  /** The bridges by sensor name (the registry's). */
  bridges: ReadonlyMap<string, HookBridge>;
  /** How the reduced events reach Vigil: this process (injectTransport) or a service elsewhere. */
  transport: VigilTransport;
  /** Where the sensor secret (session keys, the hook key) and the bridges' state folder are read from. */
  env: NodeJS.ProcessEnv;
  version: string;
  bodyLimit: number;
  onError?: (sensor: string, kind: string) => void;
}

/**
 * The sensor secret of `env` (made when absent, as every sensor of this user does) and
 * the bridges' state folder. Throws naming the file when the secret cannot be read.
 */
export function hookSetup(env: NodeJS.ProcessEnv): { secret: Buffer; stateDir: string } {
  const file = sensorSecretFile(env);
  try {
    return {
      secret: loadSensorSecret(file, { create: true }),
      stateDir: env.VIGIL_HOOK_STATE_DIR || join(tmpdir(), 'vigil-hooks'),
    };
  } catch (e) {
    throw new AppError('CONFIG_INVALID', `the hook endpoint has no sensor secret at ${file}: ${(e as Error).message}`);
  }
}

/** A request to fastify's own routes without a socket (`app.inject`). */
export type Inject = (r: {
  method: 'GET' | 'POST';
  url: string;
  headers: Record<string, string>;
  payload?: string;
}) => Promise<{ statusCode: number; json(): unknown }>;

/** The service answering its own sensor routes, in process (the same routes, tokens and checks as over HTTP). */
export function injectTransport(inject: Inject, token: string | undefined): VigilTransport {
  return {
    async request(method, path, headers, body) {
      try {
        const r = await inject({
          method,
          url: path,
          headers: {
            ...headers,
            ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
            ...(token ? { authorization: `Bearer ${token}` } : {}),
          },
          ...(body !== undefined ? { payload: JSON.stringify(body) } : {}),
        });
        return r.statusCode < 300 ? r.json() : undefined;
      } catch {
        return undefined;
      }
    },
  };
}

export const hookEndpoint =
  (o: HookEndpointOptions): FastifyPluginAsync =>
  async (app) => {
    // Made at the first hook call: a service no hook reaches never reads the secret.
    let host: HookHost | undefined;
    const hostOf = () => {
      host ??= new HookHost({
        bridges: o.bridges,
        transport: o.transport,
        ...hookSetup(o.env),
        version: o.version,
        ...(o.onError ? { onError: o.onError } : {}),
      });
      return host;
    };
    // a clean stop sends what observe-only calls left queued
    app.addHook('onClose', async () => {
      await host?.close();
    });
    // In this plugin only: any body is bytes, whatever its content type (curl sends a form type).
    app.removeAllContentTypeParsers();
    app.addContentTypeParser('*', { parseAs: 'buffer', bodyLimit: o.bodyLimit }, (_req, body, done) =>
      done(null, body),
    );
    app.post<{ Params: { sensor: string } }>(
      '/hooks/:sensor',
      {
        config: { auth: 'hook' },
        bodyLimit: o.bodyLimit,
        schema: { hide: true },
        // Before the body is read: a peer off this machine, a wrong key or an unknown
        // sensor is refused without its payload ever being buffered.
        onRequest: async (req) => {
          if (!isLoopbackPeer(req.socket.remoteAddress))
            throw new AppError(
              'HOOK_NOT_LOOPBACK',
              'the hook endpoint answers hooks on this machine only (loopback); a sensor elsewhere runs `vigil relay` beside its agent',
            );
          const key = req.headers[HOOK_KEY_HEADER];
          const r = hostOf().refusal(req.params.sensor, typeof key === 'string' ? key : undefined);
          if (r?.refused) throw new AppError(r.refused.code as 'NOT_FOUND' | 'HOOK_KEY_MISMATCH', r.refused.message);
        },
      },
      async (req, reply) => {
        const r = await hostOf().reduce(req.params.sensor, Buffer.isBuffer(req.body) ? req.body : '');
        reply.code(r.status);
        return r.body ? reply.type('application/json').send(r.body) : reply.send('');
      },
    );
  };
