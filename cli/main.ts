import 'reflect-metadata';
import { Command, CommanderError } from 'commander';
import { stringify as toYaml } from 'yaml';
import { z } from 'zod';
import { createRegistry, installers } from '../builtins.ts';
import { ConfigError, displayConfig, type Explained, type Layer, loadConfigWithPlugins } from '../core/config.ts';
import { duration } from '../core/duration.ts';
import { isAppError } from '../core/errors.ts';
import { createLogger } from '../core/logger.ts';
import { VERSION } from '../core/paths.ts';
import type { ChannelStatus } from '../core/vigil.ts';
import { inspectConfig } from '../core/vigil.ts';
import { createVigil } from '../index.ts';
import { parseArgs } from './args.ts';
import { completionScript } from './completion.ts';
import { agentsText, installCommands, type SensorLive } from './install.ts';
import { ago, call, cut, DEFAULT_URL, type Remote, table, when } from './remote.ts';

export interface Io {
  out: (s: string) => void;
  err: (s: string) => void;
  /** Whether stderr is a terminal (progress bars). */
  tty?: boolean;
  env?: NodeJS.ProcessEnv;
}

const ConfigArg = z.string().min(1).optional();
const Port = z.coerce.number({ error: 'a port number (0-65535)' }).int().min(0).max(65535);
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

/** `modes.mode = auto_recover  (runtime; file: warn)` */
function sourceLine(k: Explained): string {
  const v = typeof k.value === 'string' ? k.value : JSON.stringify(k.value);
  const below = Object.entries(k.overrides ?? {})
    .map(([s, x]) => `${s}: ${typeof x === 'string' ? x : JSON.stringify(x)}`)
    .join(', ');
  return `${k.path} = ${v}  (${k.source}${below ? `; overrides ${below}` : ''})`;
}

function channelLine(c: Pick<ChannelStatus, 'name' | 'type' | 'enabled' | 'ready' | 'reason' | 'source'>): string {
  const state = !c.enabled ? 'disabled' : c.ready ? 'ready' : `NOT READY: ${c.reason}`;
  return `${c.name} (${c.type}, from ${c.source}): ${state}`;
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

  program
    .command('status')
    .description('a running service at a glance: health, channels, sessions by verdict, open alerts, failed deliveries')
    .option('--url <url>', `the service (env VIGIL_URL; default ${DEFAULT_URL})`)
    .action(async (raw) => {
      const r = remoteOf(parseArgs(z.strictObject({ url: z.string().optional() }), raw, 'status'), env, 'status');
      io.out(await statusText(r, env));
    });

  program
    .command('sessions')
    .description('the Sessions readout of a running service as a table, worst first')
    .option('--url <url>', `the service (env VIGIL_URL; default ${DEFAULT_URL})`)
    .option('--verdict <level>', 'only sessions at this verdict: ok, stalling or looping')
    .option('--limit <n>', 'at most this many rows', '50')
    .option('--json', 'the rows as JSON, one per line')
    .action(async (raw) => {
      const a = parseArgs(
        z.strictObject({
          url: z.string().optional(),
          verdict: z.enum(['ok', 'stalling', 'looping']).optional(),
          limit: z.coerce.number().int().min(1).max(10_000),
          json: z.boolean().optional(),
        }),
        raw,
        'sessions',
      );
      const rows = await call<Row[]>(remoteOf(a, env, 'sessions'), 'GET', '/sessions?limit=10000');
      const shown = sortRows(rows)
        .filter((x) => !a.verdict || x.verdict === a.verdict)
        .slice(0, a.limit);
      if (a.json) for (const x of shown) io.out(`${JSON.stringify(x)}\n`);
      else io.out(sessionsTable(shown, rows.length));
    });

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

interface Row {
  session: string;
  agent: string | null;
  root: string;
  verdict: 'ok' | 'stalling' | 'looping';
  stage: number;
  reason: string;
  last_event_at: string | null;
  [k: string]: unknown;
}

const RANK = { looping: 0, stalling: 1, ok: 2 } as const;

function sortRows(rows: Row[]): Row[] {
  return [...rows].sort(
    (a, b) =>
      RANK[a.verdict] - RANK[b.verdict] || String(b.last_event_at ?? '').localeCompare(String(a.last_event_at ?? '')),
  );
}

function sessionsTable(rows: Row[], total: number): string {
  const num = (v: unknown, digits = 0) => (typeof v === 'number' ? v.toFixed(digits) : null);
  const out = table(
    ['SESSION', 'AGENT', 'VERDICT', 'STAGE', 'TURNS', 'USD', 'TOP REPEATED', 'LAST', 'REASON'],
    rows.map((r) => [
      cut(r.session, 32),
      cut(r.agent, 20),
      r.verdict,
      r.stage || null,
      num(r.turns_since_landed),
      num(r.usd_since_landed, 2),
      r.top_target ? `${cut(r.top_target, 30)} x${r.top_count}` : null,
      ago(r.last_event_at),
      cut(r.reason, 70),
    ]),
  );
  return `${out}${rows.length < total ? `(${rows.length} of ${total} sessions)\n` : ''}`;
}

interface Health {
  ok: boolean;
  version: string;
  backend: string;
  redis: string;
  mode: string;
  queue_depth?: number | null;
  channels: ChannelStatus[];
  knobs: Explained[];
  watchdog: { last_tick_at: string; age_s: number; result: { status: string } } | null;
  sensors?: SensorLive[];
}

async function statusText(r: Remote, env: NodeJS.ProcessEnv): Promise<string> {
  // A relay on this machine (vigil relay): say so, then show the service it forwards to.
  const first = await call<Health | { relay: true; to: string; service: string }>(r, 'GET', '/health');
  if ('relay' in first && first.relay) {
    return `vigil relay at ${r.url}: forwarding the hooks' events to ${first.to} (${first.service})\n${await statusText({ ...r, url: first.to }, env)}`;
  }
  const h = first as Health;
  const [rows, alerts, deliveries] = await Promise.all([
    call<Row[]>(r, 'GET', '/sessions?limit=10000'),
    call<{ dedup_key: string; severity: string; title: string; updated_at: number }[]>(r, 'GET', '/alerts'),
    call<{ at: number; channel: string; outcome: string; reason?: string; title: string; test?: boolean }[]>(
      r,
      'GET',
      '/deliveries?limit=200',
    ),
  ]);
  let out = `vigil ${h.version} at ${r.url}: ${h.ok ? 'ok' : 'DEGRADED'} (backend ${h.backend}, redis ${h.redis}, mode ${h.mode}, queue ${h.queue_depth ?? '-'})\n`;
  out += `watchdog: ${h.watchdog ? `${h.watchdog.result.status}, last tick ${ago(h.watchdog.last_tick_at)} ago` : 'never reported'}\n`;
  out += `\nagents\n${await agentsText(installers, h.sensors ?? [], env, ago)}`;
  out += '\nchannels\n';
  for (const c of h.channels) {
    const last = c.last_delivery ? `; last ${c.last_delivery.outcome} ${ago(c.last_delivery.at)} ago` : '';
    out += `  ${channelLine(c)}${last}\n`;
  }
  if (!h.channels.length) out += '  (none: alerts go nowhere)\n';
  if (h.knobs.length) {
    out += '\nknobs not at their default\n';
    for (const k of h.knobs) out += `  ${sourceLine(k)}\n`;
  }
  const n = (v: string) => rows.filter((x) => x.verdict === v).length;
  out += `\nsessions: ${rows.length} (${n('looping')} looping, ${n('stalling')} stalling, ${n('ok')} ok)\n`;
  const flagged = sortRows(rows).filter((x) => x.verdict !== 'ok');
  if (flagged.length) out += sessionsTable(flagged.slice(0, 10), flagged.length).replace(/^/gm, '  ');
  out += `\nopen alerts: ${alerts.length}\n`;
  if (alerts.length) {
    out += table(
      ['SEVERITY', 'SINCE', 'INCIDENT', 'TITLE'],
      alerts.slice(0, 10).map((a) => [a.severity, when(a.updated_at), cut(a.dedup_key, 40), cut(a.title, 60)]),
    ).replace(/^/gm, '  ');
  }
  const failed = deliveries.filter((d) => d.outcome === 'failed').slice(0, 5);
  out += `\nrecent failed deliveries: ${failed.length}\n`;
  if (failed.length) {
    out += table(
      ['AT', 'CHANNEL', 'TITLE', 'REASON'],
      failed.map((d) => [when(d.at), d.channel, cut(`${d.test ? '[test] ' : ''}${d.title}`, 40), cut(d.reason, 80)]),
    ).replace(/^/gm, '  ');
  }
  return out;
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
