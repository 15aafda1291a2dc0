import { Writable } from 'node:stream';
import { type Logger, pino } from 'pino';
import { AppError } from './errors.ts';

export type { Logger };

// Keys whose values are secrets wherever they appear in a log object.
const REDACT_PATHS = [
  'secret',
  'token',
  'password',
  'authorization',
  'auth_token',
  'routing_key',
  '*.secret',
  '*.token',
  '*.password',
  '*.authorization',
  '*.Authorization',
  '*.auth_token',
  '*.routing_key',
  'headers.authorization',
  'req.headers.authorization',
  'req.headers["x-vigil-admin-token"]',
];

/**
 * Secret values known at run time (read from the `*_env` variables at config load).
 * Any log string that contains one is scrubbed, so a secret embedded in an error
 * message or a URL cannot reach the log even under a key we did not foresee.
 */
const secretValues = new Set<string>();

export function registerSecret(value: string | undefined): void {
  if (value && value.length >= 6) secretValues.add(value);
}

export function scrub(s: string): string {
  if (secretValues.size === 0) return s;
  let out = s;
  for (const v of secretValues) if (out.includes(v)) out = out.split(v).join('[REDACTED]');
  return out;
}

function scrubDeep(v: unknown, depth = 0): unknown {
  if (typeof v === 'string') return scrub(v);
  if (depth > 4 || v === null || typeof v !== 'object') return v;
  if (v instanceof Error) return { type: v.name, message: scrub(v.message), code: (v as { code?: unknown }).code };
  if (Array.isArray(v)) return v.map((x) => scrubDeep(x, depth + 1));
  const o: Record<string, unknown> = {};
  for (const [k, x] of Object.entries(v)) o[k] = scrubDeep(x, depth + 1);
  return o;
}

export interface LoggerOptions {
  /** pino level; default $VIGIL_LOG_LEVEL, else info. */
  level?: string;
  /** Where to write; defaults to stdout. Tests pass a stream to capture lines. */
  destination?: NodeJS.WritableStream;
  /** json (one object per line) or pretty (one readable line); default $VIGIL_LOG_FORMAT, else pretty on a terminal. */
  format?: 'json' | 'pretty';
}

export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;

/** The level and format from options and env, checked: a typo in VIGIL_LOG_LEVEL names itself. */
export function logSettings(opts: LoggerOptions = {}, env: NodeJS.ProcessEnv = process.env) {
  const level = opts.level ?? env.VIGIL_LOG_LEVEL ?? 'info';
  if (!(LOG_LEVELS as readonly string[]).includes(level)) {
    throw new AppError('CONFIG_INVALID', `VIGIL_LOG_LEVEL: "${level}" is not one of ${LOG_LEVELS.join(', ')}`);
  }
  const format = opts.format ?? env.VIGIL_LOG_FORMAT ?? (process.stdout.isTTY ? 'pretty' : 'json');
  if (format !== 'json' && format !== 'pretty') {
    throw new AppError('CONFIG_INVALID', `VIGIL_LOG_FORMAT: "${format}" is not json or pretty`);
  }
  return { level, format: format as 'json' | 'pretty' };
}

export function createLogger(opts: LoggerOptions = {}): Logger {
  const { level, format } = logSettings(opts);
  const out = (opts.destination ?? pino.destination(1)) as NodeJS.WritableStream;
  return pino(
    {
      name: 'vigil',
      level,
      redact: { paths: REDACT_PATHS, censor: '[REDACTED]' },
      formatters: { log: (o) => (secretValues.size ? (scrubDeep(o) as Record<string, unknown>) : o) },
      hooks: {
        logMethod(args, method) {
          if (secretValues.size) for (let i = 0; i < args.length; i++) args[i] = scrubDeep(args[i]) as never;
          return method.apply(this, args);
        },
      },
    },
    (format === 'pretty' ? prettyStream(out) : out) as never,
  );
}

const LEVEL_NAMES: Record<number, string> = {
  10: 'TRACE',
  20: 'DEBUG',
  30: 'INFO',
  40: 'WARN',
  50: 'ERROR',
  60: 'FATAL',
};
const OMIT = new Set(['level', 'time', 'pid', 'hostname', 'name', 'msg']);

/** One pino JSON line as a readable one: `12:00:01.250 WARN  message key=value ...`. */
export function prettyLine(json: string): string {
  let o: Record<string, unknown>;
  try {
    o = JSON.parse(json);
  } catch {
    return json.endsWith('\n') ? json : `${json}\n`;
  }
  const t = typeof o.time === 'number' ? new Date(o.time).toISOString().slice(11, 23) : '';
  const lv = (LEVEL_NAMES[o.level as number] ?? String(o.level)).padEnd(5);
  const rest = Object.entries(o)
    .filter(([k]) => !OMIT.has(k))
    .map(([k, v]) => `${k}=${typeof v === 'string' && !/\s/.test(v) ? v : JSON.stringify(v)}`)
    .join(' ');
  return `${t} ${lv} ${String(o.msg ?? '')}${rest ? `  ${rest}` : ''}\n`;
}

/** A stream that turns pino's JSON lines into prettyLine()s on `out` (no pino-pretty needed). */
export function prettyStream(out: NodeJS.WritableStream): Writable {
  let buf = '';
  return new Writable({
    write(chunk, _enc, cb) {
      buf += String(chunk);
      let i = buf.indexOf('\n');
      while (i >= 0) {
        out.write(prettyLine(buf.slice(0, i)));
        buf = buf.slice(i + 1);
        i = buf.indexOf('\n');
      }
      cb();
    },
  });
}

/** A logger that drops everything: the default in tests and library use. */
export function silentLogger(): Logger {
  return pino({ level: 'silent' });
}
