import Fastify, { type FastifyInstance } from 'fastify';
import { AppError } from '../core/errors.ts';
import { createLogger, type Logger } from '../core/logger.ts';
import type { HookBridge } from '../core/sensor.ts';
import { httpTransport } from '../sensors/shared/client.ts';
import { hookEndpoint } from './routes/hooks.ts';

// `vigil relay`: the hook endpoint on this machine for a service that runs elsewhere (a
// team's Vigil on Redis). The agents' hooks post their raw payloads here over loopback;
// the relay reduces each one in memory exactly as the service's own endpoint does
// (service/routes/hooks.ts, sensors/shared/hook-host.ts), drops it, and forwards only
// the reduced events to the service, with this user's session keys and the ingestion
// token; the service's directives come back in its answers and become the hooks'
// answers. Observe-only calls wait for the session's next answered call, so a tool call
// costs one request to the service. It binds loopback only.

export interface RelayOptions {
  /** The service's base URL (http or https). */
  to: string;
  /** The loopback port the hooks post to (vigil install --url). */
  port: number;
  bridges: ReadonlyMap<string, HookBridge>;
  env: NodeJS.ProcessEnv;
  version: string;
  /** Per request to the service (ms). */
  timeoutMs?: number;
  logger?: Logger;
}

export interface Relay {
  app: FastifyInstance;
  address: string;
  close(): Promise<void>;
}

/** Builds and starts the relay on 127.0.0.1:`port`. */
export async function startRelay(o: RelayOptions): Promise<Relay> {
  const logger = o.logger ?? createLogger();
  const token = o.env.VIGIL_INGEST_TOKEN || undefined;
  const app = Fastify({ logger: false });
  const to = o.to.replace(/\/+$/, '');
  app.get('/health', async () => {
    let service: string;
    try {
      const r = await fetch(`${to}/health`, {
        signal: AbortSignal.timeout(2_000),
        ...(token ? { headers: { authorization: `Bearer ${token}` } } : {}),
      });
      await r.body?.cancel();
      service = r.ok ? 'answers' : `answers ${r.status}`;
    } catch {
      service = 'not answering';
    }
    return { relay: true, version: o.version, to, service, sensors: [...o.bridges.keys()] };
  });
  await app.register(
    hookEndpoint({
      bridges: o.bridges,
      transport: httpTransport({ url: to, ...(token ? { token } : {}), timeoutMs: o.timeoutMs ?? 2_500 }),
      env: o.env,
      version: o.version,
      bodyLimit: 33_554_432,
      onError: (sensor, kind) => logger.warn({ sensor, kind }, 'a hook bridge failed: the hook got no opinion'),
    }),
  );
  let address: string;
  try {
    address = await app.listen({ host: '127.0.0.1', port: o.port });
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'EADDRINUSE')
      throw new AppError(
        'CONFIG_INVALID',
        `cannot listen on 127.0.0.1:${o.port}: address in use (a vigil serve or another relay there?)`,
      );
    throw e;
  }
  logger.info(
    { address, to, sensors: [...o.bridges.keys()] },
    `vigil relay listening on ${address}, forwarding to ${to}`,
  );
  return { app, address, close: () => app.close() };
}
