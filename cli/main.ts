import 'reflect-metadata';
import { Command, CommanderError } from 'commander';
import { stringify as toYaml } from 'yaml';
import { z } from 'zod';
import { createRegistry, installers } from '../builtins.ts';
import { ConfigError, type Explained, type Layer, loadConfigWithPlugins } from '../core/config.ts';
import { duration } from '../core/duration.ts';
import { isAppError } from '../core/errors.ts';
import { createLogger } from '../core/logger.ts';
import { VERSION } from '../core/paths.ts';
import { displayConfig } from '../core/redact.ts';
import { inspectConfig } from '../core/vigil.ts';
import { createVigil } from '../index.ts';
import { Port, parseArgs } from './args.ts';
import { completionScript } from './completion.ts';
import { installCommands } from './install.ts';
import { relayCommand } from './relay.ts';
import { call, channelLine, DEFAULT_URL, type Remote, sourceLine } from './remote.ts';
import { statusCommands } from './status.ts';

export interface Io {
  out: (s: string) => void;
  err: (s: string) => void;
  /** Whether stderr is a terminal (progress bars). */
  tty?: boolean;
  env?: NodeJS.ProcessEnv;
}

const ConfigArg = z.string().min(1).optional();
const UrlArg = z.url({ protocol: /^https?$/, error: 'an http(s) URL of a running vigil serve' });

/**
 * The layers between the config file and an overlay: HOST and PORT from the
 * environment, then --host and --port. Each keeps its name as its source.
 */
function serverLayers(flags: { host?: string; port?: number }, env: NodeJS.ProcessEnv): Layer[] {
  const e = parseArgs(
    z.object({ HOST: z.string().min(1).optional(), PORT: Port.optional() }),
    { HOST: env.HOST || undefined, PORT: env.PORT || undefined },
    'environment',
  );
  const layers: Layer[] = [];
  if (e.HOST !== undefined || e.PORT !== undefined) {
    layers.push({
      source: 'env',
      raw: { server: { ...(e.HOST ? { host: e.HOST } : {}), ...(e.PORT !== undefined ? { port: e.PORT } : {}) } },
    });
  }
  if (flags.host !== undefined || flags.port !== undefined) {
    layers.push({ source: 'flag', raw: { server: { ...flags } } });
  }
  return layers;
}

function remoteOf(raw: { url?: string }, env: NodeJS.ProcessEnv, cmd: string): Remote {
  const a = parseArgs(z.object({ url: UrlArg }), { url: raw.url ?? env.VIGIL_URL ?? DEFAULT_URL }, cmd);
  return { url: a.url, token: env.VIGIL_ADMIN_TOKEN || undefined };
}

export function buildProgram(io: Io = defaultIo()): Command {
  const env = io.env ?? process.env;
  const program = new Command('vigil')
    .description('Catch coding agents that spend without progress.')
    .version(`vigil ${VERSION}`, '-v, --version', 'print the version')
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
        z.strictObject({ host: z.string().min(1).optional(), port: Port.optional(), config: ConfigArg }),
        raw,
        'serve',
      );
      const { serve } = await import('../service/serve.ts');
      await serve({ configFile: a.config, extra: serverLayers({ host: a.host, port: a.port }, env) });
    });

  relayCommand(program, env, io);

  const config = program.command('config').description('configuration');
  config
    .command('check')
    .description(
      'validate the config as serve does and print it (secrets redacted), where each value comes from, and the channels (exit 1 on errors)',
    )
    .option('--config <path>', 'config overlay file (env VIGIL_CONFIG)')
    .action(async (raw) => {
      const a = parseArgs(z.strictObject({ config: ConfigArg }), raw, 'config check');
      try {
        // Exactly what serve validates: plugins loaded, channels and detectors built.
        const r = await inspectConfig({
          registry: createRegistry(),
          configFile: a.config,
          extra: serverLayers({}, env),
          env,
        });
        io.out(toYaml(displayConfig(r.config as never)));
        io.out('\n# values not at their default, and where they come from\n');
        io.out(`# runtime state saved in the store: ${r.runtime}\n`);
        for (const k of r.knobs) io.out(`${sourceLine(k)}\n`);
        if (!r.knobs.length) io.out('(none: every knob is at its default)\n');
        io.out('\n# channels\n');
        for (const c of r.channels) {
          io.out(
            `${channelLine(c)}${r.toggles[c.name] ? `  runtime toggles: ${JSON.stringify(r.toggles[c.name])}` : ''}\n`,
          );
        }
        if (!r.channels.length) io.out('(none: alerts go nowhere)\n');
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
      const vigil = await createVigil({ configFile: a.config, env, logger: createLogger({ level: 'warn' }) });
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

  statusCommands(program, env, io.out, remoteOf);

  program
    .command('report')
    .description(
      'the ledger of a running service: loops caught, what they cost before the flag and the action, still open',
    )
    .option('--url <url>', `the service (env VIGIL_URL; default ${DEFAULT_URL})`)
    .option('--since <duration>', 'the window back from now', '24h')
    .option('--by <group>', 'group the loops by session, tree, agent, model or day', 'model')
    .option('--limit <n>', 'list at most this many loops (the summary counts all)', '50')
    .option('--json', 'what GET /ledger answers, as one JSON line')
    .action(async (raw) => {
      const { GROUPS, report } = await import('./report.ts');
      const a = parseArgs(
        z.strictObject({
          url: z.string().optional(),
          since: duration(),
          by: z.enum(GROUPS),
          limit: z.coerce.number().int().min(1).max(100_000),
          json: z.boolean().optional(),
        }),
        raw,
        'report',
      );
      await report(remoteOf(a, env, 'report'), a, io.out);
    });

  const knobs = program.command('knobs').description('runtime knobs of a running service');
  knobs
    .command('show', { isDefault: true })
    .description('every knob not at its default and where its value comes from (default, file, env, overlay, runtime)')
    .option('--url <url>', `the service (env VIGIL_URL; default ${DEFAULT_URL})`)
    .action(async (raw) => {
      const r = remoteOf(parseArgs(z.strictObject({ url: z.string().optional() }), raw, 'knobs'), env, 'knobs');
      const k = await call<{ _sources: Explained[] }>(r, 'GET', '/knobs');
      for (const e of k._sources) io.out(`${sourceLine(e)}\n`);
      if (!k._sources.length) io.out('every knob is at its default\n');
    });
  knobs
    .command('reset')
    .description('drop runtime knobs so the config applies again: the named ones (modes.mode, progress), or all')
    .argument('[knob...]', 'dotted knob paths or sections; none: every runtime knob')
    .option('--url <url>', `the service (env VIGIL_URL; default ${DEFAULT_URL})`)
    .action(async (names: string[], raw) => {
      const a = parseArgs(
        z.strictObject({
          url: z.string().optional(),
          knob: z.array(z.string().regex(/^[a-z0-9_-]+(\.[a-z0-9_-]+)*$/i, 'a dotted knob path such as modes.mode')),
        }),
        { ...raw, knob: names },
        'knobs reset',
      );
      const r = remoteOf(a, env, 'knobs reset');
      const done: string[] = [];
      if (!a.knob.length) done.push(...(await call<{ reset: string[] }>(r, 'DELETE', '/knobs')).reset);
      for (const k of a.knob) {
        done.push(...(await call<{ reset: string[] }>(r, 'DELETE', `/knobs/${encodeURIComponent(k)}`)).reset);
      }
      io.out(done.length ? `reset: ${done.join(', ')}\n` : 'nothing to reset: no runtime value was set\n');
    });

  installCommands(program, installers, io, env);

  program
    .command('completion')
    .description('print a shell completion script: eval "$(vigil completion bash)"')
    .argument('<shell>', 'bash, zsh or fish')
    .action((shell: string) => {
      const a = parseArgs(z.strictObject({ shell: z.enum(['bash', 'zsh', 'fish']) }), { shell }, 'completion');
      io.out(completionScript(program, a.shell));
    });

  program
    .command('replay')
    .description('replay recorded history through the judge: a JSONL file, an opencode export folder, or opencode.db')
    .argument('<input>', 'JSONL file of progress events / request records, export folder, or opencode.db')
    .option('--json', 'one JSON line per session')
    .option('--labels <file>', 'JSON {session: "loop" | "ok"}: score the verdicts')
    .option('--sweep [grid]', 'replay a grid of thresholds against the labels (optional JSON grid file)')
    .option('--knobs <file>', 'YAML or JSON: the progress section or a whole config')
    .option(
      '--ledger',
      'through the whole kernel per mode: what each flagged stretch cost to the flag and to the action',
    )
    .option('--mode <mode...>', 'with --ledger: the response modes to compare (default: warn auto_recover)')
    .action(async (input, raw) => {
      const a = parseArgs(
        z.strictObject({
          input: z.string().min(1),
          json: z.boolean().optional(),
          labels: z.string().min(1).optional(),
          sweep: z.union([z.boolean(), z.string().min(1)]).optional(),
          knobs: z.string().min(1).optional(),
          ledger: z.boolean().optional(),
          mode: z.array(z.string().regex(/^[a-z][a-z0-9_-]*$/, 'a mode name such as auto_recover')).optional(),
        }),
        { input, ...raw },
        'replay',
      );
      const { replay } = await import('./replay.ts');
      const code = await replay(a, {
        stdout: { write: io.out },
        stderr: { write: io.err, isTTY: io.tty ?? false },
      });
      if (code !== 0) throw new CommanderError(code, 'vigil.replay', 'replay finished with problems');
    });

  const watchdog = program.command('watchdog').description('the watchdog timer: an independent sensor that reports');
  watchdog
    .command('tick')
    .description('one tick: judge the opencode sessions active since the last tick and report them (never acts)')
    .option('--config <path>', 'config overlay file (env VIGIL_CONFIG)')
    .action(async (raw) => {
      const a = parseArgs(z.strictObject({ config: ConfigArg }), raw, 'watchdog tick');
      const { runTick } = await import('../watchdog/tick.ts');
      const cfg = await loadConfigWithPlugins({ registry: createRegistry(), file: a.config, env });
      const r = await runTick({ config: cfg, logger: createLogger({ level: env.VIGIL_LOG_LEVEL ?? 'warn' }) });
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

function defaultIo(): Io {
  return {
    out: (s: string) => process.stdout.write(s),
    err: (s: string) => process.stderr.write(s),
    tty: process.stderr.isTTY === true,
  };
}

/** Runs the CLI; expected failures print one line (no stack trace) and give the exit code. */
export async function main(argv: string[], io: Io = defaultIo()): Promise<number> {
  const program = buildProgram(io);
  try {
    await program.parseAsync(argv, { from: 'user' });
    return 0;
  } catch (e) {
    if (e instanceof CommanderError) {
      if (e.code === 'commander.helpDisplayed' || e.code === 'commander.version' || e.code === 'commander.help')
        return 0;
      if (e.code.startsWith('vigil.')) {
        if (e.code === 'vigil.args') io.err(`${e.message}\n`);
        return e.exitCode;
      }
      return e.exitCode || 2;
    }
    if (e instanceof ConfigError) {
      io.err(`config invalid:\n  ${e.problems.join('\n  ')}\n`);
      return 1;
    }
    if (isAppError(e)) {
      io.err(`vigil: ${e.message}\n`);
      return 1;
    }
    // Anything else is a bug: the stack helps whoever reports it.
    io.err(`vigil: ${(e as Error).stack ?? String(e)}\n`);
    return 1;
  }
}

const isMain = process.argv[1] && /vigil(\.mjs)?$|cli\/main\.ts$/.test(process.argv[1]);
if (isMain) {
  const args = process.argv.slice(2);
  const code = await main(args);
  // serve and relay keep running; everything else exits with its code.
  const stays =
    args[0] === 'serve' || (args[0] === 'relay' && !args.includes('--install') && !args.includes('--uninstall'));
  if (code !== 0 || !stays) process.exit(code);
}
