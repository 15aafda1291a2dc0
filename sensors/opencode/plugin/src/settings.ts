import type { Trouble } from './client.ts';

// Where the plugin reports, and with which token: the plugin options in opencode.json
// (`"plugin": [["file:///.../vigil.js", {"url": "...", "token_env": "..."}]]`) win over
// the environment (VIGIL_URL, VIGIL_INGEST_TOKEN), which wins over the default
// `vigil serve` address. A router that embeds Vigil mounts the sensors' routes under a
// prefix (vigil/router's vigilIngest): the URL then includes it, e.g.
// http://127.0.0.1:8080/vigil. Checked by hand, not with zod: the bundle carries no
// dependency, and these are two strings.

export const DEFAULT_URL = 'http://127.0.0.1:7411';

export interface Settings {
  url: string;
  token?: string;
  /** Where the URL came from, for the warning when nothing answers there. */
  from: 'option' | 'env' | 'default';
}

const OPTION_KEYS = new Set(['url', 'token_env']);

/** The settings, or an error naming the bad option or variable. */
export function settingsOf(
  options: Record<string, unknown> | undefined,
  env: Record<string, string | undefined>,
): Settings {
  const o = options ?? {};
  for (const k of Object.keys(o)) {
    if (!OPTION_KEYS.has(k)) throw new Error(`vigil plugin option "${k}": unknown (known: url, token_env)`);
  }
  const check = (v: unknown, where: string): string => {
    if (typeof v !== 'string') throw new Error(`${where}: not a string`);
    let u: URL;
    try {
      u = new URL(v);
    } catch {
      throw new Error(`${where}: not a URL`);
    }
    if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new Error(`${where}: not an http(s) URL`);
    if (u.username || u.password) throw new Error(`${where}: no credentials in the URL (use token_env)`);
    return v.replace(/\/+$/, '');
  };
  if (o.token_env !== undefined && (typeof o.token_env !== 'string' || !/^[A-Za-z_][A-Za-z0-9_]*$/.test(o.token_env))) {
    throw new Error('vigil plugin option "token_env": the name of an environment variable');
  }
  const tokenVar = (o.token_env as string | undefined) ?? 'VIGIL_INGEST_TOKEN';
  const token = env[tokenVar] || undefined;
  if (o.url !== undefined) return { url: check(o.url, 'vigil plugin option "url"'), token, from: 'option' };
  if (env.VIGIL_URL) return { url: check(env.VIGIL_URL, 'VIGIL_URL'), token, from: 'env' };
  return { url: DEFAULT_URL, token, from: 'default' };
}

/** The one-line warning a person sees in opencode when the reports go nowhere. */
export function troubleMessage(t: Trouble, from: Settings['from']): string {
  const where = from === 'option' ? 'the plugin option url' : from === 'env' ? 'VIGIL_URL' : 'VIGIL_URL (unset)';
  if (t.kind === 'unauthorized' && t.detail.includes('SESSION_KEY_MISMATCH')) {
    return `Vigil at ${t.url} refused a session's reports: it is bound to another sensor key (SESSION_KEY_MISMATCH). Was the sensor secret (VIGIL_SENSOR_SECRET_FILE, ~/.local/state/vigil/sensor-secret) replaced?`;
  }
  if (t.kind === 'unauthorized') {
    return `Vigil at ${t.url} refused the plugin (${t.detail}): set VIGIL_INGEST_TOKEN to the service's ingestion token.`;
  }
  const what = t.kind === 'not_vigil' ? `is not Vigil (${t.detail})` : `does not answer (${t.detail})`;
  return `Vigil at ${t.url} ${what}: tool calls are not being judged. Set ${where} to where Vigil listens: vigil serve, or the router's mount (e.g. http://127.0.0.1:8080/vigil).`;
}
