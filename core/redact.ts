import type { VigilConfig } from './config-schema.ts';

// Redaction: what Vigil prints of a config or a URL, secrets masked.

const SECRET_KEY = /(secret|token|password|passwd|api[_-]?key|routing[_-]?key|authorization|auth)$/i;
const REDACTED = '[REDACTED]';

/**
 * A URL fit to print: user and password, and every query value, masked (query values
 * carry tokens more often than not). Anything that is not a URL comes back unchanged.
 */
export function redactUrl(v: string): string {
  if (!/^[a-z][a-z0-9+.-]*:\/\//i.test(v)) return v;
  let out = v.replace(/^([a-z][a-z0-9+.-]*:\/\/)[^/?#\s]*@/i, `$1${REDACTED}@`);
  out = out.replace(/([?&][^=&#\s]+)=[^&#\s]*/g, `$1=${REDACTED}`);
  return out;
}

/**
 * The effective config for display: values under secret-looking keys, every header
 * value (`headers`), credentials and query values in URLs are masked. Names of env
 * variables (`*_env` options, `headers_env` values) are kept: they are not secrets.
 */
export function redactConfig(cfg: unknown): unknown {
  const walk = (v: unknown, key: string, inEnvMap: boolean, inHeaders: boolean): unknown => {
    if (Array.isArray(v)) return v.map((x) => walk(x, key, inEnvMap, inHeaders));
    if (v && typeof v === 'object') {
      const o: Record<string, unknown> = {};
      for (const [k, x] of Object.entries(v)) o[k] = walk(x, k, key.endsWith('_env'), key === 'headers');
      return o;
    }
    if (typeof v !== 'string') return v;
    if (key.endsWith('_env') || inEnvMap) return v;
    if (inHeaders || SECRET_KEY.test(key)) return REDACTED;
    return redactUrl(v);
  };
  return walk(cfg, '', false, false);
}

/** A value at a config path, masked as redactConfig would mask it there. */
export function redactAt(path: readonly string[], v: unknown): unknown {
  let wrapped: unknown = v;
  for (let i = path.length - 1; i >= 0; i--) wrapped = { [path[i]]: wrapped };
  let out = redactConfig(wrapped);
  for (const k of path) out = (out as Record<string, unknown>)[k];
  return out;
}

/** Flattens channel entries back to the shape an operator writes (for display). */
export function displayConfig(cfg: VigilConfig): unknown {
  const channels = cfg.notifications.channels.map(({ options, ...common }) => ({ ...common, ...options }));
  return redactConfig({ ...cfg, notifications: { ...cfg.notifications, channels } });
}
