import { join } from 'node:path';
import type { Layer } from '../core/config.ts';
import type { VigilConfig } from '../core/config-schema.ts';
import { AppError } from '../core/errors.ts';
import { createLogger, type Logger } from '../core/logger.ts';
import { stateDir, VERSION } from '../core/paths.ts';
import type { Vigil } from '../core/vigil.ts';
import { createVigil } from '../index.ts';
import { buildServer } from './server.ts';

export { VERSION };

/** `vigil serve`: the service with the config's defaults (memory backend unless Redis is configured). */
export async function serve(o: { configFile?: string; extra?: Layer[] }): Promise<void> {
  const logger = createLogger();
  const vigil = await createVigil({
    configFile: o.configFile,
    extra: o.extra,
    logger,
    defaultSpoolFile: (cfg) => defaultSpoolFile(cfg, process.env),
  });
  const { host, port } = vigil.config.server;
  let address: string;
  try {
    const app = await buildServer(vigil, { logger: true, version: VERSION, host });
    address = await app.listen({ host, port });
    const stop = async (sig: string) => {
      logger.info({ sig }, 'shutting down');
      await app.close();
      await vigil.close();
      process.exit(0);
    };
    process.once('SIGINT', () => void stop('SIGINT'));
    process.once('SIGTERM', () => void stop('SIGTERM'));
  } catch (e) {
    await vigil.close().catch(() => {});
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'EADDRINUSE') throw new AppError('CONFIG_INVALID', `cannot listen on ${host}:${port}: address in use`);
    if (code === 'EADDRNOTAVAIL' || code === 'EACCES' || code === 'ENOTFOUND') {
      throw new AppError('CONFIG_INVALID', `cannot listen on ${host}:${port} (${code})`);
    }
    throw e;
  }
  await startupReport(vigil, logger, address);
}

/**
 * Where `vigil serve` on the memory backend keeps the alerts a clean stop could not
 * deliver: $XDG_STATE_HOME/vigil/alert-spool-<port>.json, one file per port, so two
 * services on one machine keep their own. Port 0 (a new port each start) has none: no
 * later start could tell it is the same service.
 */
export function defaultSpoolFile(cfg: VigilConfig, env: NodeJS.ProcessEnv): string | undefined {
  const port = cfg.server.port;
  return port === 0 ? undefined : join(stateDir(env), `alert-spool-${port}.json`);
}

/**
 * What an operator needs at start, in a few lines: where it listens, the backend,
 * each channel and whether it can deliver here, and every knob not at its default
 * with where that value comes from (a runtime value saved in the store says so loudly).
 */
export async function startupReport(vigil: Vigil, logger: Logger, address: string): Promise<void> {
  const channels = await vigil.channelStatus();
  logger.info(
    {
      address,
      backend: vigil.store.backend,
      mode: vigil.mode().type,
      channels: channels.map((c) => `${c.name}:${!c.enabled ? 'disabled' : c.ready ? 'ready' : 'not ready'}`),
      detectors: [...vigil.detectors.keys()],
    },
    `vigil listening on ${address}`,
  );
  for (const c of channels) {
    if (c.enabled && !c.ready) {
      logger.warn(
        { channel: c.name, type: c.type, reason: c.reason },
        `channel ${c.name} cannot deliver here (${c.reason}); its alerts will fail. Disable it (enabled: false) or remove it ({name: ${c.name}, remove: true} in the config file)`,
      );
    }
    if (c.runtime) logger.warn({ channel: c.name, runtime: c.runtime }, `channel ${c.name}: runtime toggles in effect`);
  }
  for (const k of vigil.knobs.overridden()) {
    const line = { knob: k.path, value: k.value, source: k.source, ...(k.overrides ? { overrides: k.overrides } : {}) };
    if (k.source === 'runtime') {
      logger.warn(line, `knob ${k.path} is set at run time (saved in the store); reset: DELETE /knobs/${k.path}`);
    } else logger.info(line, `knob ${k.path} from ${k.source}`);
  }
}
