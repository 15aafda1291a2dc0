import { type Logger, pino } from 'pino';

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
  level?: string;
  /** Where to write; defaults to stdout. Tests pass a stream to capture lines. */
  destination?: NodeJS.WritableStream;
}

export function createLogger(opts: LoggerOptions = {}): Logger {
  const level = opts.level ?? process.env.VIGIL_LOG_LEVEL ?? 'info';
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
    (opts.destination as never) ?? pino.destination(1),
  );
}

/** A logger that drops everything: the default in tests and library use. */
export function silentLogger(): Logger {
  return pino({ level: 'silent' });
}
