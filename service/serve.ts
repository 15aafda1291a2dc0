import { createLogger } from '../core/logger.ts';
import { VERSION } from '../core/paths.ts';
import { createVigil } from '../index.ts';
import { buildServer } from './server.ts';

export { VERSION };

/** `vigil serve`: the service with the config's defaults (memory backend unless Redis is configured). */
export async function serve(o: { host?: string; port?: number; configFile?: string }): Promise<void> {
  const logger = createLogger();
  const vigil = await createVigil({ configFile: o.configFile, logger });
  const host = o.host ?? vigil.config.server.host;
  const port = o.port ?? vigil.config.server.port;
  const app = await buildServer(vigil, { logger: true, version: VERSION, host });
  const address = await app.listen({ host, port });
  logger.info(
    {
      address,
      backend: vigil.store.backend,
      channels: vigil.notifier.channels().map((c) => c.name),
      detectors: [...vigil.detectors.keys()],
    },
    `vigil listening on ${address}`,
  );
  const stop = async (sig: string) => {
    logger.info({ sig }, 'shutting down');
    await app.close();
    await vigil.close();
    process.exit(0);
  };
  process.once('SIGINT', () => void stop('SIGINT'));
  process.once('SIGTERM', () => void stop('SIGTERM'));
}
