import { type Explained } from '../core/config.ts';
import { AppError } from '../core/errors.ts';
import { redactUrl } from '../core/redact.ts';
import type { ChannelStatus } from '../core/vigil.ts';

// The commands that read a running service (`status`, `sessions`, `knobs`) talk to its
// HTTP API like any client: the same routes the admin page uses.

export const DEFAULT_URL = 'http://127.0.0.1:7411';

export interface Remote {
  url: string;
  token?: string;
}

/** GET/DELETE/PATCH a JSON route; a service that does not answer is one clear line. */
export async function call<T>(r: Remote, method: string, path: string, body?: unknown): Promise<T> {
  let res: Response;
  try {
    res = await fetch(new URL(path, r.url), {
      method,
      headers: {
        ...(r.token ? { authorization: `Bearer ${r.token}` } : {}),
        ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
      },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
      signal: AbortSignal.timeout(10_000),
    });
  } catch (e) {
    const code = (e as { cause?: { code?: string } }).cause?.code ?? (e as Error).name;
    throw new AppError('STORE_UNAVAILABLE', `no answer from ${redactUrl(r.url)} (${code}): is vigil serve running?`);
  }
  const text = await res.text();
  let json: unknown;
  try {
    json = text ? JSON.parse(text) : undefined;
  } catch {
    json = text;
  }
  if (!res.ok) {
    const msg = (json as { message?: string } | undefined)?.message ?? text.slice(0, 200);
    const hint = res.status === 401 || res.status === 403 ? ' (set VIGIL_ADMIN_TOKEN)' : '';
    throw new AppError('BAD_INPUT', `${method} ${path}: ${res.status} ${msg}${hint}`);
  }
  return json as T;
}

/** A plain text table: a header row, columns padded, the last column free. */
export function table(head: string[], rows: (string | number | null | undefined)[][]): string {
  const cells = rows.map((r) => r.map((c) => (c === null || c === undefined || c === '' ? '-' : String(c))));
  const widths = head.map((h, i) => Math.max(h.length, ...cells.map((r) => (r[i] ?? '').length)));
  const line = (r: string[]) =>
    `${r
      .map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i])))
      .join('  ')
      .trimEnd()}\n`;
  return line(head) + cells.map(line).join('');
}

/** `12:00:05` for today, else the date too; `-` for nothing. */
export function when(at: number | string | null | undefined, now = Date.now()): string {
  if (at === null || at === undefined) return '-';
  const d = new Date(at);
  if (Number.isNaN(d.getTime())) return '-';
  const iso = d.toISOString();
  return new Date(now).toISOString().slice(0, 10) === iso.slice(0, 10) ? iso.slice(11, 19) : iso.slice(0, 19);
}

/** `42s`, `5m`, `3h`, `2d` ago. */
export function ago(at: number | string | null | undefined, now = Date.now()): string {
  if (at === null || at === undefined) return '-';
  const s = Math.max(0, Math.round((now - new Date(at).getTime()) / 1000));
  if (Number.isNaN(s)) return '-';
  return s < 90
    ? `${s}s`
    : s < 5400
      ? `${Math.round(s / 60)}m`
      : s < 172_800
        ? `${Math.round(s / 3600)}h`
        : `${Math.round(s / 86_400)}d`;
}

export function cut(s: unknown, n: number): string {
  const t = s === null || s === undefined ? '' : String(s);
  return t.length > n ? `${t.slice(0, n - 3)}...` : t;
}

/** `modes.mode = auto_recover  (runtime; file: warn)` */
export function sourceLine(k: Explained): string {
  const v = typeof k.value === 'string' ? k.value : JSON.stringify(k.value);
  const below = Object.entries(k.overrides ?? {})
    .map(([s, x]) => `${s}: ${typeof x === 'string' ? x : JSON.stringify(x)}`)
    .join(', ');
  return `${k.path} = ${v}  (${k.source}${below ? `; overrides ${below}` : ''})`;
}

export function channelLine(
  c: Pick<ChannelStatus, 'name' | 'type' | 'enabled' | 'ready' | 'reason' | 'source'>,
): string {
  const state = !c.enabled ? 'disabled' : c.ready ? 'ready' : `NOT READY: ${c.reason}`;
  return `${c.name} (${c.type}, from ${c.source}): ${state}`;
}
