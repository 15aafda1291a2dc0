import type { Command } from 'commander';
import { CommanderError } from 'commander';
import { z } from 'zod';
import { createRegistry } from '../builtins.ts';
import { createLogger } from '../core/logger.ts';
import { VERSION } from '../core/paths.ts';
import { Port, parseArgs } from './args.ts';

// `vigil relay`: the hook endpoint on this machine for a service elsewhere, run here or
// kept running by the user's service manager (relay-unit.ts).
export function relayCommand(
  program: Command,
  env: NodeJS.ProcessEnv,
  io: { out: (s: string) => void; err: (s: string) => void },
): void {
  program
    .command('relay')
    .description(
      "the hook endpoint on this machine for a Vigil service elsewhere: the agents' hooks post here, the relay reduces each payload in memory and forwards the events",
    )
    .option(
      '--to <url>',
      'the Vigil service the events go to (http:// or https://; VIGIL_INGEST_TOKEN is sent when set)',
    )
    .option(
      '--port <n>',
      'the loopback port the hooks post to (default 7411: vigil install --url http://127.0.0.1:<n>)',
    )
    .option('--install', 'keep it running: a systemd user unit (Linux) or a launchd agent (macOS), started now')
    .option('--no-start', 'with --install: write the unit, do not start it')
    .option('--uninstall', 'stop the unit --install wrote and remove it')
    .action(async (raw) => {
      const a = parseArgs(
        z
          .strictObject({
            to: z.url({ protocol: /^https?$/, error: 'an http:// or https:// URL' }).optional(),
            port: Port.default(7411),
            install: z.boolean().optional(),
            start: z.boolean().default(true),
            uninstall: z.boolean().optional(),
          })
          .refine((o) => !(o.install && o.uninstall), {
            message: 'give --install or --uninstall, not both',
            path: ['uninstall'],
          })
          .refine((o) => o.uninstall || o.to, { message: 'required: the service URL', path: ['to'] }),
        raw,
        'relay',
      );
      if (a.install || a.uninstall) {
        const { relayUnit, installRelayUnit, uninstallRelayUnit } = await import('./relay-unit.ts');
        const { PACKAGE_ROOT } = await import('../core/paths.ts');
        const { join } = await import('node:path');
        const home = env.HOME || (await import('node:os')).homedir();
        const u = relayUnit({
          to: a.to ?? 'http://127.0.0.1:7411',
          port: a.port,
          home,
          env,
          platform: process.platform,
          node: process.execPath,
          script: join(PACKAGE_ROOT, 'bin', 'vigil.mjs'),
        });
        if (!u) {
          io.err(
            `vigil relay: no service manager Vigil knows on ${process.platform}: run vigil relay --to URL yourself\n`,
          );
          throw new CommanderError(1, 'vigil.relay', 'no unit');
        }
        for (const line of a.install ? installRelayUnit(u, { start: a.start }) : uninstallRelayUnit(u))
          io.out(`${line}\n`);
        if (a.install)
          io.out(`the hooks post to it when installed with: vigil install <agent> --url http://127.0.0.1:${a.port}\n`);
        return;
      }
      const { startRelay } = await import('../service/relay.ts');
      const relay = await startRelay({
        to: a.to as string,
        port: a.port,
        bridges: createRegistry().hooks,
        env,
        version: VERSION,
        logger: createLogger(),
      });
      const stop = async () => {
        await relay.close();
        process.exit(0);
      };
      process.once('SIGINT', () => void stop());
      process.once('SIGTERM', () => void stop());
    });
}
