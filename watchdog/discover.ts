import { readFileSync } from 'node:fs';
import { createOpencodeClient, type OpencodeClient } from '@opencode-ai/sdk/v2';
import { z } from 'zod';

// Step 1 of a tick: find the opencode servers worth watching. Candidates are the
// configured URLs plus whatever rc-servers.json lists (written by a third-party
// session-registry plugin, not by opencode: its shape is not ours, so any reasonable
// form is accepted and junk is skipped). Each is probed with GET /global/health under a
// short timeout; only servers that answer are read.

const MAX_RC_SERVERS = 32;

/** Loopback-or-not does not matter here; only http(s) URLs with a host, normalised without a trailing slash. */
export function normalizeUrl(u: unknown): string | null {
  if (typeof u !== 'string' || u.length > 2048) return null;
  let url: URL;
  try {
    url = new URL(u.trim());
  } catch {
    return null;
  }
  if ((url.protocol !== 'http:' && url.protocol !== 'https:') || !url.hostname) return null;
  if (url.username || url.password) return null; // no credentials in a URL we log
  return `${url.protocol}//${url.host}${url.pathname.replace(/\/+$/, '')}`;
}

const URL_KEYS = ['serverUrl', 'serverURL', 'server_url', 'url', 'baseUrl', 'baseURL'];

function urlOf(entry: unknown): string | null {
  if (typeof entry === 'string') return normalizeUrl(entry);
  if (entry === null || typeof entry !== 'object') return null;
  const o = entry as Record<string, unknown>;
  for (const k of URL_KEYS) {
    const u = normalizeUrl(o[k]);
    if (u) return u;
  }
  // {hostname, port} as some registries write it
  if ((typeof o.port === 'number' || typeof o.port === 'string') && /^\d{1,5}$/.test(String(o.port))) {
    const host = typeof o.hostname === 'string' ? o.hostname : typeof o.host === 'string' ? o.host : '127.0.0.1';
    return normalizeUrl(`http://${host.includes(':') ? `[${host}]` : host}:${o.port}`);
  }
  return null;
}

/**
 * The server URLs in an rc-servers.json document: `[{serverUrl}]`, `{servers: [...]}`,
 * `{<id>: {serverUrl}}`, or plain URL strings. Unknown shapes and bad entries are
 * skipped; the result is deduplicated and bounded.
 */
export function parseRcServers(doc: unknown): string[] {
  let entries: unknown[] = [];
  if (Array.isArray(doc)) entries = doc;
  else if (doc !== null && typeof doc === 'object') {
    const o = doc as Record<string, unknown>;
    const list = o.servers ?? o.sessions ?? o.instances;
    if (Array.isArray(list)) entries = list;
    else if (list !== null && typeof list === 'object') entries = Object.values(list);
    else entries = urlOf(o) ? [o] : Object.values(o);
  } else if (typeof doc === 'string') entries = [doc];
  const out = new Set<string>();
  for (const e of entries) {
    const u = urlOf(e);
    if (u) out.add(u);
    if (out.size >= MAX_RC_SERVERS) break;
  }
  return [...out];
}

/** rc-servers.json, or [] when it is missing or not JSON. */
export function readRcServers(path: string): string[] {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch {
    return [];
  }
  try {
    return parseRcServers(JSON.parse(text));
  } catch {
    return [];
  }
}

/** Configured first, then rc-servers.json, without duplicates. */
export function candidateServers(configured: readonly string[], rcFile: string): string[] {
  const out = new Set<string>();
  for (const u of [...configured.map(normalizeUrl), ...readRcServers(rcFile)]) if (u) out.add(u);
  return [...out];
}

/** A fetch that gives up after `ms` (opencode may accept a connection and never answer, pitfall 1). */
export function timedFetch(ms: number): typeof fetch {
  return ((input: RequestInfo | URL, init?: RequestInit) =>
    fetch(input, { ...init, signal: AbortSignal.timeout(ms) })) as typeof fetch;
}

export function opencodeClient(baseUrl: string, timeoutMs: number): OpencodeClient {
  return createOpencodeClient({ baseUrl, fetch: timedFetch(timeoutMs) });
}

/** The fields of GET /global/health the watchdog relies on; anything else passes through. */
export const HealthSchema = z.looseObject({ healthy: z.literal(true), version: z.string().max(64) });

export type Probe =
  | { url: string; state: 'up'; version: string }
  /** It answered, but not as opencode 1.x does: the watchdog would be blind there. */
  | { url: string; state: 'odd'; why: string }
  | { url: string; state: 'down' };

export async function probe(url: string, timeoutMs: number): Promise<Probe> {
  const c = opencodeClient(url, timeoutMs);
  let r: Awaited<ReturnType<OpencodeClient['global']['health']>>;
  try {
    r = await c.global.health();
  } catch (e) {
    // the SDK throws for a non-JSON body and for text/html answers
    return { url, state: 'odd', why: `GET /global/health: ${short(e)}` };
  }
  if (!r.response) return { url, state: 'down' };
  if (!r.response.ok) return { url, state: 'odd', why: `GET /global/health answered ${r.response.status}` };
  const h = HealthSchema.safeParse(r.data);
  if (!h.success) return { url, state: 'odd', why: `GET /global/health: unexpected shape (${fieldsOf(h.error)})` };
  return { url, state: 'up', version: h.data.version.replace(/[^\x21-\x7e]/g, '?') };
}

export function probeAll(urls: readonly string[], timeoutMs: number): Promise<Probe[]> {
  return Promise.all(urls.map((u) => probe(u, timeoutMs)));
}

/** The paths of a zod error's issues and what was expected: never the received values. */
export function fieldsOf(e: z.ZodError, max = 3): string {
  const seen = new Set<string>();
  for (const i of e.issues) {
    let path = '';
    for (const p of i.path) path += typeof p === 'number' ? `[${p}]` : path ? `.${String(p)}` : String(p);
    path ||= '(root)';
    const values = 'values' in i && Array.isArray(i.values) ? i.values.map(String).join(', ').slice(0, 80) : '';
    const exp = values
      ? ` expected one of ${values}`
      : 'expected' in i && typeof i.expected === 'string'
        ? ` expected ${i.expected}`
        : ` ${i.code}`;
    seen.add(`${path}${exp}`);
    if (seen.size >= max) break;
  }
  return [...seen].join('; ');
}

/**
 * An error's message, one short ASCII line. A JSON parse error quotes the body it
 * choked on, so it is reduced to its name: no byte of what opencode sent gets out.
 */
export function short(e: unknown): string {
  if (e instanceof SyntaxError) return 'not JSON';
  const m = e instanceof Error ? e.message : String(e);
  return m.replace(/[^\x20-\x7e]/g, '?').slice(0, 160);
}

/**
 * A converter or reader issue as one line for the heartbeat and the blind alert. Their
 * messages name fields and types, but a JSON parse error quotes the row it choked on and
 * a status check quotes the value: quoted material and parentheses go.
 */
export function issueText(i: { where: string; field: string; message: string }): string {
  const msg = i.message
    .replace(/\([^)]*\)/g, '')
    .replace(/(["'`]).*?\1/g, '"?"')
    .trim();
  return `${i.where}: ${i.field}: ${msg}`.replace(/[^\x20-\x7e]/g, '?').slice(0, 200);
}
