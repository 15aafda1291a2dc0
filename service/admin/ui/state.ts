// The page's state: loaded over HTTP once per (re)connection, then kept current by the
// service's event stream (GET /events). Views read S and call changed() after edits.

import type { Panel as DetectorPanel } from '../../../core/contracts.ts';
import type { DeliveryRecord } from '../../../core/notifier/delivery-log.ts';
import type { BreakerView } from '../../../detectors/behavior-breaker/breaker.detector.ts';
import type { KnobSection } from '../knob-schema.ts';
import type { AdminRow } from '../sessions.ts';
import { ApiError, api, errorText, token } from './api.ts';

/** A table a detector contributes (GET /panels), with the detector that made it. */
export type Panel = DetectorPanel & { detector: string };

export type { AdminRow, BreakerView, DeliveryRecord, KnobSection };

export interface Channel {
  name: string;
  type: string;
  enabled: boolean;
  min_severity: string;
  resolve_messages: boolean;
  rate_limit: { max: number; window: number };
  quiet_window: number;
}

export interface Health {
  ok: boolean;
  version: string;
  backend: string;
  redis: string;
  queue: string;
  mode: string;
  watchdog: null | {
    last_tick_at: string;
    age_s: number;
    result: { status: string; sessions?: number; flagged?: number; servers?: number; error?: string };
  };
  plugins: { version: string; last_seen_at: string }[];
  /** Declared sensors: last report, and the mode's actions each cannot take itself. */
  sensors?: { name: string; agent: string; last_seen_at: string | null; cannot_act: string }[];
  /** Each detector's one-glance state (the breaker's tripped models, ...). */
  detectors: Record<string, Record<string, unknown>>;
}

export interface Meta {
  version: string;
  guarded: boolean;
  token_configured: boolean;
  watchdog_interval_ms: number;
  /** detection.stale_after: a tree without sensor input this long shows as stale. */
  stale_after_ms?: number;
}

export type Conn = 'connecting' | 'live' | 'reconnecting' | 'token needed';

export const S = {
  meta: null as Meta | null,
  conn: 'connecting' as Conn,
  loaded: false,
  error: '',
  sessions: new Map<string, AdminRow>(),
  deliveries: [] as DeliveryRecord[],
  channels: [] as Channel[],
  knobs: {} as Record<string, unknown>,
  knobSchema: [] as KnobSection[],
  breaker: null as BreakerView | null,
  health: null as Health | null,
  panels: [] as Panel[],
  /** When the health readout was fetched (its ages are relative to that). */
  healthAt: 0,
};

const listeners = new Set<() => void>();
let queued = false;

export function subscribe(fn: () => void): () => void {
  listeners.add(fn);
  return () => listeners.delete(fn);
}

/** Re-renders once per frame however many updates arrive. */
export function changed(): void {
  if (queued) return;
  queued = true;
  requestAnimationFrame(() => {
    queued = false;
    for (const l of listeners) l();
  });
}

const MAX_DELIVERIES = 200;

async function loadHealth(): Promise<void> {
  S.health = await api<Health>('GET', '/health');
  S.healthAt = Date.now();
}

async function loadBreaker(): Promise<void> {
  const [b, p] = await Promise.all([api<BreakerView>('GET', '/breaker'), api<Panel[]>('GET', '/panels')]);
  S.breaker = b;
  S.panels = p;
}

function fail(e: unknown): void {
  if (e instanceof ApiError && e.status === 401) {
    S.conn = 'token needed';
    S.loaded = false;
  } else S.error = errorText(e);
  changed();
}

export async function loadAll(): Promise<void> {
  try {
    const [sessions, deliveries, channels, knobs, schema] = await Promise.all([
      api<AdminRow[]>('GET', '/sessions'),
      api<DeliveryRecord[]>('GET', `/deliveries?limit=${MAX_DELIVERIES}`),
      api<Channel[]>('GET', '/channels'),
      api<Record<string, unknown>>('GET', '/knobs'),
      api<KnobSection[]>('GET', '/knobs/schema'),
      loadHealth(),
      loadBreaker(),
    ]);
    S.sessions = new Map(sessions.map((r) => [r.session, r]));
    S.deliveries = deliveries;
    S.channels = channels;
    S.knobs = knobs;
    S.knobSchema = schema;
    S.loaded = true;
    S.error = '';
    changed();
  } catch (e) {
    fail(e);
  }
}

/** The breaker, the detector panels and the health readout, fetched again now. */
export function refreshNow(): Promise<void> {
  return Promise.all([loadHealth(), loadBreaker()]).then(changed, fail);
}

// Verdicts move the breaker and the health readout: refetch those, coalesced.
let refetch: ReturnType<typeof setTimeout> | undefined;
function refreshSoon(): void {
  if (refetch) return;
  refetch = setTimeout(() => {
    refetch = undefined;
    void refreshNow();
  }, 300);
}

let es: EventSource | undefined;
let retry: ReturnType<typeof setTimeout> | undefined;

const on = (name: string, fn: (data: any) => void) =>
  es?.addEventListener(name, (m) => fn(JSON.parse((m as MessageEvent).data)));

/**
 * Opens the event stream. Off loopback the stream needs a ticket (EventSource cannot
 * send the token); a ticket is single-use, so a dropped stream comes back through here.
 */
export async function connect(): Promise<void> {
  clearTimeout(retry);
  es?.close();
  es = undefined;
  try {
    S.meta = await api<Meta>('GET', '/admin/meta');
    let url = '/events';
    if (S.meta.guarded) {
      const t = await api<{ ticket: string }>('POST', '/events/ticket');
      url += `?ticket=${encodeURIComponent(t.ticket)}`;
    }
    es = new EventSource(url);
  } catch (e) {
    fail(e);
    if (!(e instanceof ApiError && e.status === 401)) retry = setTimeout(connect, 3000);
    return;
  }
  const mine = es;
  on('hello', () => {
    S.conn = 'live';
    changed();
    void loadAll();
  });
  on('sessions', (d: { rows: AdminRow[] }) => {
    for (const r of d.rows) S.sessions.set(r.session, r);
    changed();
  });
  on('transition', refreshSoon);
  on('tree', refreshSoon);
  on('delivery', (r: DeliveryRecord) => {
    S.deliveries = [r, ...S.deliveries].slice(0, MAX_DELIVERIES);
    changed();
  });
  on('knobs', (k: Record<string, unknown>) => {
    S.knobs = k;
    refreshSoon();
    changed();
  });
  on('channel', (c: Pick<Channel, 'name' | 'enabled' | 'min_severity' | 'resolve_messages'>) => {
    S.channels = S.channels.map((x) => (x.name === c.name ? { ...x, ...c } : x));
    changed();
  });
  on('heartbeat', () => loadHealth().then(changed, fail));
  mine.onerror = () => {
    if (es !== mine) return;
    S.conn = 'reconnecting';
    changed();
    // CONNECTING: the browser retries by itself. CLOSED: refused (a spent ticket): start over.
    if (mine.readyState === EventSource.CLOSED) retry = setTimeout(connect, 2000);
  };
}

export function useToken(t: string): void {
  token.set(t);
  S.conn = 'connecting';
  changed();
  void connect();
}

export function forgetToken(): void {
  token.clear();
  S.conn = 'connecting';
  changed();
  void connect();
}

/** Runs an admin action; returns its error line, or '' when it worked. */
export async function act(fn: () => Promise<unknown>): Promise<string> {
  try {
    await fn();
    return '';
  } catch (e) {
    return errorText(e);
  }
}
