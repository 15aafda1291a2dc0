import 'reflect-metadata';
import { container as rootContainer } from 'tsyringe';
import { DesktopOptionsSchema } from '../channels/desktop/desktop.options.ts';
import { desktopPlugin } from '../channels/desktop/index.ts';
import type { Alert } from '../core/alert.ts';
import type { ChannelEntry, VigilConfig } from '../core/config-schema.ts';
import { MAX_KEYED_SESSIONS, SESSION_KEY_HEADER, sessionKeyHeader } from '../core/session-key.ts';
import { TOKENS } from '../core/tokens.ts';
import type { SessionStatsEvent, VerdictLevel } from '../core/wire.ts';
import { short } from './discover.ts';
import type { SecondOpinion } from './opinion.ts';
import type { TickResult } from './state.ts';

// Step 5 of a tick: report, never act. Verdicts go to the service's POST /verdicts
// (tagged source "watchdog"; the service applies the mode and alerts), each active
// session's bulk to POST /progress as a `session_stats` reading (session hygiene), the
// tick's result to POST /watchdog/heartbeat. When the service does not answer, the watchdog
// raises ONE critical desktop alert itself through the desktop channel's code, and
// nothing else: a dead service is exactly when an unattended run needs a person.

export interface VerdictOut {
  session_id: string;
  parent_session_id?: string;
  agent?: string;
  level: VerdictLevel;
  reason: string;
  source: 'watchdog';
  second_opinion?: SecondOpinion;
}

export type Delivery = { state: 'ok' } | { state: 'down'; why: string } | { state: 'refused'; why: string };

export interface ServiceTarget {
  url: string;
  /** The ingestion token (server.ingest_token_env), needed when the service has one (always off loopback). */
  token?: string;
  /**
   * A session's key from the user's sensor secret (core/session-key.ts), the one the
   * plugin derives: a session the plugin bound takes the watchdog's reports only with it.
   */
  sessionKey?: (sessionId: string) => string;
  timeoutMs: number;
}

/** The X-Vigil-Session-Key header for the sessions items name (their own and their parents). */
function keyHeader(t: ServiceTarget, items: readonly unknown[]): Record<string, string> {
  if (!t.sessionKey) return {};
  const named = new Set<string>();
  for (const it of items) {
    const o = it as { session_id?: unknown; parent_session_id?: unknown };
    if (typeof o.session_id === 'string') named.add(o.session_id);
    if (typeof o.parent_session_id === 'string') named.add(o.parent_session_id);
  }
  const v = sessionKeyHeader([...named].map((id) => [id, t.sessionKey!(id)] as const));
  return v ? { [SESSION_KEY_HEADER]: v } : {};
}

/** POST JSON: no answer, a timeout or a 5xx is "down"; any other non-2xx is "refused" (a bug on our side). */
export async function post(t: ServiceTarget, path: string, body: unknown): Promise<Delivery> {
  let res: Response;
  try {
    res = await fetch(`${t.url.replace(/\/+$/, '')}${path}`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        ...(t.token ? { authorization: `Bearer ${t.token}` } : {}),
        ...keyHeader(t, Array.isArray(body) ? body : [body]),
      },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(t.timeoutMs),
    });
  } catch (e) {
    const name = (e as Error)?.name;
    const code = ((e as { cause?: { code?: string } })?.cause?.code ?? '').replace(/[^A-Z_]/g, '');
    return { state: 'down', why: name === 'TimeoutError' ? 'timed out' : code || 'no answer' };
  }
  const text = await res.text().catch(() => '');
  if (res.ok) return { state: 'ok' };
  if (res.status >= 500) return { state: 'down', why: `answered ${res.status}` };
  // the service's 400 names the field at fault, never content (service/validation.ts)
  let msg = '';
  try {
    msg = String((JSON.parse(text) as { message?: unknown }).message ?? '');
  } catch {
    // not JSON
  }
  return { state: 'refused', why: `answered ${res.status}${msg ? `: ${short(msg)}` : ''}` };
}

/** Items per request: each names at most two sessions (its own, its parent), one key each. */
const PER_REQUEST = MAX_KEYED_SESSIONS / 2;

/** Verdicts, PER_REQUEST a request (the service's key header limit). */
export async function postVerdicts(t: ServiceTarget, list: readonly VerdictOut[]): Promise<Delivery> {
  for (let i = 0; i < list.length; i += PER_REQUEST) {
    const d = await post(t, '/verdicts', list.slice(i, i + PER_REQUEST));
    if (d.state !== 'ok') return d;
  }
  return { state: 'ok' };
}

/** Session-hygiene readings to POST /progress, PER_REQUEST a request. */
export async function postStats(t: ServiceTarget, list: readonly SessionStatsEvent[]): Promise<Delivery> {
  for (let i = 0; i < list.length; i += PER_REQUEST) {
    const d = await post(t, '/progress', list.slice(i, i + PER_REQUEST));
    if (d.state !== 'ok') return d;
  }
  return { state: 'ok' };
}

export function postHeartbeat(t: ServiceTarget, lastTickAt: number, result: TickResult): Promise<Delivery> {
  const r = { ...result, ...(result.error ? { error: result.error.slice(0, 300) } : {}) };
  return post(t, '/watchdog/heartbeat', { last_tick_at: lastTickAt, result: r });
}

/** The desktop channel as configured (first desktop entry), else its defaults. */
function desktopEntry(cfg: VigilConfig): { name: string; options: Record<string, unknown> } {
  const e = (cfg.notifications.channels as ChannelEntry[]).find((c) => c.type === 'desktop' && c.enabled);
  return e ? { name: e.name, options: e.options } : { name: 'desktop', options: DesktopOptionsSchema.parse({}) };
}

export interface DirectAlert {
  serviceUrl: string;
  why: string;
  flagged: number;
  /** A few of the flagged sessions, for the person who reads it. */
  sample: { session_id: string; agent?: string; level: VerdictLevel }[];
}

/** notify-send through the desktop channel (urgency critical, session-bus fallback); throws when it fails. */
export async function sendDirectAlert(cfg: VigilConfig, env: NodeJS.ProcessEnv, a: DirectAlert, timeoutMs = 10_000) {
  const { name, options } = desktopEntry(cfg);
  const c = rootContainer.createChildContainer();
  c.register(TOKENS.Env, { useValue: env });
  const channel = desktopPlugin.create(c, DesktopOptionsSchema.parse(options), name);
  const who = a.sample.map((s) => `${s.agent ?? s.session_id} ${s.level}`).join(', ');
  const alert: Alert = {
    dedup_key: 'watchdog:service-down',
    severity: 'critical',
    state: 'trigger',
    title: 'Vigil service is down',
    summary:
      `the watchdog cannot reach ${a.serviceUrl} (${a.why}); ` +
      `${a.flagged} session${a.flagged === 1 ? ' is' : 's are'} flagged${who ? `: ${who}` : ''}`,
    details: '',
    source: 'watchdog',
    at: Date.now(),
    seq: 1,
  };
  await channel.send(alert, AbortSignal.timeout(timeoutMs));
}
