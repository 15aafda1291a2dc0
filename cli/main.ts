import 'reflect-metadata';
import { Command, CommanderError } from 'commander';
import { stringify as toYaml } from 'yaml';
import { z } from 'zod';
import { createRegistry } from '../builtins.ts';
import { ConfigError, displayConfig, loadConfigWithPlugins } from '../core/config.ts';
import { duration } from '../core/duration.ts';
import { isAppError } from '../core/errors.ts';
import { createLogger } from '../core/logger.ts';
import { checkConfig } from '../core/vigil.ts';
import { createVigil } from '../index.ts';

// Every command validates its arguments with zod and names the bad one.
function parseArgs<T extends z.ZodType>(schema: T, raw: unknown, cmd: string): z.output<T> {
  const r = schema.safeParse(raw);
  if (!r.success) {
    const msg = r.error.issues
      .map((i) => `--${String(i.path[0] ?? '?').replace(/_/g, '-')}: ${i.message}`)
      .join('\n  ');
    throw new CommanderError(2, 'vigil.args', `${cmd}: invalid arguments:\n  ${msg}`);
  }
  return r.data;
}

const ConfigArg = z.string().min(1).optional();

export function buildProgram(io: { out: (s: string) => void; err: (s: string) => void } = defaultIo()): Command {
  const program = new Command('vigil')
    .description('Catch coding agents that spend without progress.')
    .exitOverride()
    .configureOutput({ writeOut: io.out, writeErr: io.err });

  program
    .command('serve')
    .description('run the Vigil service (HTTP API, judge, notifier)')
    .option('--host <addr>', 'bind address (env HOST; default from config, 127.0.0.1)')
    .option('--port <n>', 'port (env PORT; default from config, 7411)')
    .option('--config <path>', 'config overlay file (env VIGIL_CONFIG)')
    .action(async (raw) => {
      const a = parseArgs(
        z.strictObject({
          host: z.string().min(1).optional(),
          port: z.coerce.number().int().min(0).max(65535).optional(),
          config: ConfigArg,
        }),
        { host: raw.host ?? process.env.HOST, port: raw.port ?? process.env.PORT, config: raw.config },
        'serve',
      );
      const { serve } = await import('../service/serve.ts');
      await serve({ host: a.host, port: a.port, configFile: a.config });
    });

  const config = program.command('config').description('configuration');
  config
    .command('check')
    .description('validate the config and print it with secrets redacted (exit 1 on errors)')
    .option('--config <path>', 'config overlay file (env VIGIL_CONFIG)')
    .action(async (raw) => {
      const a = parseArgs(z.strictObject({ config: ConfigArg }), raw, 'config check');
      try {
        // Exactly what serve validates: plugins loaded, channels and detectors built.
        const cfg = await checkConfig({ registry: createRegistry(), configFile: a.config });
        io.out(toYaml(displayConfig(cfg)));
        io.out('config ok\n');
      } catch (e) {
        if (e instanceof ConfigError) {
          io.err(`config invalid:\n  ${e.problems.join('\n  ')}\n`);
          throw new CommanderError(1, 'vigil.config', 'config invalid');
        }
        throw e;
      }
    });

  const alert = program.command('alert').description('alerts');
  alert
    .command('test')
    .description('send a test alert through the real pipeline and report delivered or the failure reason')
    .requiredOption('--channel <name>', 'channel name from notifications.channels')
    .option('--config <path>', 'config overlay file (env VIGIL_CONFIG)')
    .option('--timeout <duration>', 'how long to wait for the outcome', '60s')
    .action(async (raw) => {
      const a = parseArgs(
        z.strictObject({ channel: z.string().min(1), config: ConfigArg, timeout: duration() }),
        raw,
        'alert test',
      );
      const vigil = await createVigil({ configFile: a.config, logger: createLogger({ level: 'warn' }) });
      try {
        const { job_id } = await vigil.notifier.sendTest(a.channel);
        const r = await vigil.notifier.waitForOutcome(job_id, a.timeout);
        if (!r) {
          io.err(`channel "${a.channel}": no outcome within ${a.timeout} ms (still queued)\n`);
          throw new CommanderError(1, 'vigil.alert', 'no outcome');
        }
        if (r.outcome === 'delivered') {
          io.out(`channel "${a.channel}" (${r.type}): delivered (attempts: ${r.attempts})\n`);
        } else {
          io.err(`channel "${a.channel}" (${r.type}): ${r.outcome} after ${r.attempts} attempt(s): ${r.reason}\n`);
          throw new CommanderError(1, 'vigil.alert', 'not delivered');
        }
      } finally {
        await vigil.close();
      }
    });

  program
    .command('replay')
    .description('replay recorded history through the judge: a JSONL file, an opencode export folder, or opencode.db')
    .argument('<input>', 'JSONL file of progress events / request records, export folder, or opencode.db')
    .option('--json', 'one JSON line per session')
    .option('--labels <file>', 'JSON {session: "loop" | "ok"}: score the verdicts')
    .option('--sweep [grid]', 'replay a grid of thresholds against the labels (optional JSON grid file)')
    .option('--knobs <file>', 'YAML or JSON: the progress section or a whole config')
    .action(async (input, raw) => {
      const a = parseArgs(
        z.strictObject({
          input: z.string().min(1),
          json: z.boolean().optional(),
          labels: z.string().min(1).optional(),
          sweep: z.union([z.boolean(), z.string().min(1)]).optional(),
          knobs: z.string().min(1).optional(),
        }),
        { input, ...raw },
        'replay',
      );
      const { replayCommand } = await import('../detectors/no-progress/replay/replay.ts');
      const code = await replayCommand(a, { stdout: process.stdout, stderr: process.stderr });
      if (code !== 0) throw new CommanderError(code, 'vigil.replay', 'replay finished with problems');
    });

  const watchdog = program.command('watchdog').description('the watchdog timer: an independent sensor that reports');
  watchdog
    .command('tick')
    .description('one tick: judge the opencode sessions active since the last tick and report them (never acts)')
    .option('--config <path>', 'config overlay file (env VIGIL_CONFIG)')
    .action(async (raw) => {
      const a = parseArgs(z.strictObject({ config: ConfigArg }), raw, 'watchdog tick');
      const { runTick } = await import('../opencode/watchdog/tick.ts');
      const cfg = await loadConfigWithPlugins({ registry: createRegistry(), file: a.config });
      const r = await runTick({ config: cfg, logger: createLogger({ level: process.env.VIGIL_LOG_LEVEL ?? 'warn' }) });
      const line = `watchdog tick: ${r.status} servers=${r.servers} sessions=${r.sessions} flagged=${r.flagged} model_calls=${r.model_calls} service=${r.service}${r.alerted ? ' alerted' : ''}${r.error ? ` (${r.error})` : ''}\n`;
      // skipped, idle and blind are normal outcomes for a timer; only a failed tick is an error
      if (r.status === 'error') {
        io.err(line);
        throw new CommanderError(1, 'vigil.watchdog', 'watchdog tick failed');
      }
      io.out(line);
    });

  return program;
}

function defaultIo() {
  return { out: (s: string) => process.stdout.write(s), err: (s: string) => process.stderr.write(s) };
}

export async function main(argv: string[]): Promise<number> {
  const program = buildProgram();
  try {
    await program.parseAsync(argv, { from: 'user' });
    return 0;
  } catch (e) {
    if (e instanceof CommanderError) {
      if (e.code === 'commander.helpDisplayed' || e.code === 'commander.version' || e.code === 'commander.help')
        return 0;
      if (e.code.startsWith('vigil.')) {
        if (e.code === 'vigil.args') process.stderr.write(`${e.message}\n`);
        return e.exitCode;
      }
      return e.exitCode || 2;
    }
    if (e instanceof ConfigError) {
      process.stderr.write(`config invalid:\n  ${e.problems.join('\n  ')}\n`);
      return 1;
    }
    process.stderr.write(`vigil: ${isAppError(e) ? e.message : ((e as Error).stack ?? String(e))}\n`);
    return 1;
  }
}

const isMain = process.argv[1] && /vigil(\.mjs)?$|cli\/main\.ts$/.test(process.argv[1]);
if (isMain) {
  const code = await main(process.argv.slice(2));
  // serve keeps running; everything else exits with its code.
  if (code !== 0 || !process.argv.slice(2).includes('serve')) process.exit(code);
}
