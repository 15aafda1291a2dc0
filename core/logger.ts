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
  'headers["x-vigil-admin-token"]',
  'headers["x-vigil-token"]',
  'headers["x-vigil-session-key"]',
  '*.headers["x-vigil-admin-token"]',
  '*.headers["x-vigil-token"]',
  '*.headers["x-vigil-session-key"]',
];

/**
 * Secret values known at run time (read from the `*_env` variables at config load).
 * Any log string that contains one is scrubbed, so a secret embedded in an error
 * message or a URL cannot reach the log even under a key we did not foresee.
 */
const secretValues = new Set<string>();
/** The same, longest first: a whole URL is replaced before its path could be. */
let byLength: string[] = [];

/** Shortest value or part scrubbed: shorter ones would match ordinary words. */
const MIN_SECRET = 6;
/** A path segment this long is a token on its own (a Slack webhook's last segment is 24). */
const TOKEN_SEGMENT = 16;

/**
 * The parts of a secret URL that give it away alone, since a receiver may quote them
 * back (a 400 body naming the request path): the path (with its leading slash, and
 * without it when it has several segments), every token-long segment, the query and
 * each query value, the password. Not the host, which names a provider, not a secret.
 * Empty for a value that is not a URL.
 */
export function significantParts(value: string): string[] {
  if (!/^[a-z][a-z0-9+.-]*:\/\/[^/\s]/i.test(value) || !URL.canParse(value)) return [];
  const u = new URL(value);
  const out: string[] = [];
  const both = (encoded: string) => {
    out.push(encoded);
    try {
      out.push(decodeURIComponent(encoded));
    } catch {
      // not valid percent-encoding: the encoded form alone
    }
  };
  const path = u.pathname;
  if (path.length >= MIN_SECRET + 2) {
    both(path);
    if (path.indexOf('/', 1) > 0) both(path.slice(1));
  }
  for (const seg of path.split('/')) if (seg.length >= TOKEN_SEGMENT) both(seg);
  if (u.search.length > 1) {
    both(u.search);
    both(u.search.slice(1));
    for (const [, v] of u.searchParams) out.push(v);
  }
  if (u.password) both(u.password);
  return [...new Set(out)].filter((p) => p.length >= MIN_SECRET);
}

export function registerSecret(value: string | undefined): void {
  if (!value || value.length < MIN_SECRET) return;
  const before = secretValues.size;
  secretValues.add(value);
  for (const p of significantParts(value)) secretValues.add(p);
  if (secretValues.size !== before) byLength = [...secretValues].sort((a, b) => b.length - a.length);
}

export function scrub(s: string): string {
  if (secretValues.size === 0) return s;
  let out = s;
  for (const v of byLength) if (out.includes(v)) out = out.split(v).join('[REDACTED]');
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
