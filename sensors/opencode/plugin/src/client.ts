import { MAX_KEYED_SESSIONS, SESSION_KEY_HEADER, sessionKeyHeader } from '../../../../core/session-key.ts';
import type { Directive, ProgressEvent } from '../../../../core/wire.ts';

// The plugin's side of the Vigil HTTP API. Progress events are sent fire-and-forget:
// buffered (bounded, oldest dropped), batched, posted with a short timeout, and put
// back for a retry with backoff when the service is briefly down. Nothing here ever
// throws into a hook or waits on the agent's path.

export type Log = (level: 'debug' | 'warn', msg: string, data?: Record<string, unknown>) => void;
export const silent: Log = () => {};

/**
 * Why the plugin's reports go nowhere: nothing answers at the URL (or it fails), what
 * answers is not Vigil (404, 405: the URL lacks the service or the router's mount), or
 * Vigil refuses the token.
 */
export interface Trouble {
  kind: 'unreachable' | 'not_vigil' | 'unauthorized';
  url: string;
  /** e.g. `connection refused`, `answered 404` */
  detail: string;
}

export interface VigilClientOptions {
  /** Service base URL, e.g. http://127.0.0.1:7411 */
  url: string;
  /** X-Vigil-Plugin header value (`name/version`). */
  pluginId: string;
  /** The service's ingestion token (server.ingest_token_env), sent as a bearer token when set. */
  token?: string;
  /**
   * The key of a session (HMAC of the local sensor secret, core/session-key.ts), sent in
   * X-Vigil-Session-Key for every session a request names; undefined when there is no
   * secret (the requests then go without, as before).
   */
  sessionKey?: (sessionId: string) => string | undefined;
  /** A session's root as the plugin knows it: a `compaction_done` carries the root's key too (it lifts the tree). */
  rootOf?: (sessionId: string) => string;
  /** Per request (ms). */
  timeoutMs?: number;
  /** Events kept while the service is unreachable; past it the oldest go. */
  maxBuffer?: number;
  /** Events per POST /progress (the service takes up to 500). */
  batchMax?: number;
  /** Wait this long after an event so a burst goes in one batch (ms). */
  flushDelayMs?: number;
  /** Retry backoff after a failed send: doubles from min to max (ms). */
  retryMinMs?: number;
  retryMaxMs?: number;
  /** Directives from each /progress answer. */
  onDirectives?: (ds: Directive[]) => void;
  /** Called once when requests start failing for a reason a person must fix; again only after one succeeded. */
  onTrouble?: (t: Trouble) => void;
  fetch?: typeof fetch;
  log?: Log;
}

export interface SendStats {
  sent: number;
  dropped: number;
  rejected: number;
  failures: number;
}

export class VigilClient {
  readonly stats: SendStats = { sent: 0, dropped: 0, rejected: 0, failures: 0 };
  private buffer: ProgressEvent[] = [];
  private timer: ReturnType<typeof setTimeout> | undefined;
  private inflight: Promise<void> | undefined;
  private backoffMs = 0;
  private closed = false;
  /** A trouble was reported and nothing has succeeded since. */
  private troubled = false;
  private readonly base: string;
  private readonly o: Required<
    Omit<VigilClientOptions, 'onDirectives' | 'onTrouble' | 'fetch' | 'log' | 'token' | 'sessionKey' | 'rootOf'>
  >;
  private readonly fetch: typeof fetch;
  private readonly log: Log;

  constructor(private readonly opts: VigilClientOptions) {
    this.base = opts.url.replace(/\/+$/, '');
    this.o = {
      url: this.base,
      pluginId: opts.pluginId,
      timeoutMs: opts.timeoutMs ?? 2_000,
      maxBuffer: opts.maxBuffer ?? 1_000,
      batchMax: Math.min(opts.batchMax ?? 200, 500),
      flushDelayMs: opts.flushDelayMs ?? 200,
      retryMinMs: opts.retryMinMs ?? 1_000,
      retryMaxMs: opts.retryMaxMs ?? 10_000,
    };
    this.fetch = opts.fetch ?? ((...a) => globalThis.fetch(...a));
    this.log = opts.log ?? silent;
  }

  get pending(): number {
    return this.buffer.length;
  }

  /** Queue one event; a flush follows shortly. */
  send(ev: ProgressEvent): void {
    if (this.closed) return;
    this.buffer.push(ev);
    this.trim();
    this.schedule(this.backoffMs || this.o.flushDelayMs);
  }

  private trim(): void {
    const over = this.buffer.length - this.o.maxBuffer;
    if (over > 0) {
      this.buffer.splice(0, over);
      this.stats.dropped += over;
    }
  }

  private schedule(ms: number): void {
    if (this.timer || this.closed) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.flush();
    }, ms);
    (this.timer as { unref?: () => void }).unref?.();
  }

  /** Send what is buffered, one batch at a time; resolves when the buffer is empty or a send failed. */
  flush(): Promise<void> {
    if (!this.inflight) {
      this.inflight = this.drain().finally(() => {
        this.inflight = undefined;
      });
    }
    return this.inflight;
  }

  private async drain(): Promise<void> {
    while (this.buffer.length) {
      const batch = this.buffer.splice(0, this.batchSize());
      const r = await this.request('POST', '/progress', batch, namedIn(batch, this.opts.rootOf));
      if (r.kind === 'ok') {
        this.backoffMs = 0;
        this.stats.sent += batch.length;
        const ds = (r.body as { directives?: unknown } | undefined)?.directives;
        if (Array.isArray(ds) && ds.length) this.deliver(ds as Directive[]);
        continue;
      }
      if (r.kind === 'rejected') {
        // A 4xx will not pass on a retry either; keep the rest flowing.
        this.stats.rejected += batch.length;
        this.log('warn', 'progress batch rejected', { status: r.status, events: batch.length });
        continue;
      }
      this.stats.failures++;
      this.buffer.unshift(...batch);
      this.trim();
      this.backoffMs = Math.min(this.o.retryMaxMs, this.backoffMs ? this.backoffMs * 2 : this.o.retryMinMs);
      this.log('debug', 'progress send failed, will retry', { retry_ms: this.backoffMs, buffered: this.buffer.length });
      this.schedule(this.backoffMs);
      return;
    }
  }

  /** Events of the next batch: at most batchMax, naming at most MAX_KEYED_SESSIONS sessions (one key each). */
  private batchSize(): number {
    const named = new Set<string>();
    let n = 0;
    for (; n < this.buffer.length && n < this.o.batchMax; n++) {
      for (const id of namesOf(this.buffer[n], this.opts.rootOf)) named.add(id);
      if (named.size > MAX_KEYED_SESSIONS) break;
    }
    return Math.max(1, n);
  }

  private deliver(ds: Directive[]): void {
    try {
      this.opts.onDirectives?.(ds);
    } catch (err) {
      this.log('warn', 'directive handler failed', { err: String(err) });
    }
  }

  /** Pending directives of a session's tree; undefined when the service did not answer. */
  async directives(sessionID: string): Promise<Directive[] | undefined> {
    const r = await this.request('GET', `/directives?session=${encodeURIComponent(sessionID)}`, undefined, [sessionID]);
    if (r.kind !== 'ok') return undefined;
    const ds = (r.body as { directives?: unknown } | undefined)?.directives;
    return Array.isArray(ds) ? (ds as Directive[]) : [];
  }

  /** Acknowledge carried-out directives; false when the service did not take it (retry later). */
  async ack(acks: { id: string; root_id: string; session_id: string }[]): Promise<boolean> {
    if (!acks.length) return true;
    const r = await this.request('POST', '/directives/ack', { acks }, [...new Set(acks.map((a) => a.session_id))]);
    return r.kind === 'ok' || r.kind === 'rejected';
  }

  private async request(
    method: 'GET' | 'POST',
    path: string,
    body?: unknown,
    sessions: readonly string[] = [],
  ): Promise<{ kind: 'ok'; body: unknown } | { kind: 'rejected'; status: number } | { kind: 'failed' }> {
    let res: Response;
    let text: string;
    try {
      const keys = this.keysFor(sessions);
      res = await this.fetch(`${this.base}${path}`, {
        method,
        headers: {
          'x-vigil-plugin': this.o.pluginId,
          ...(this.opts.token ? { authorization: `Bearer ${this.opts.token}` } : {}),
          ...(keys ? { [SESSION_KEY_HEADER]: keys } : {}),
          ...(body === undefined ? {} : { 'content-type': 'application/json' }),
        },
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: AbortSignal.timeout(this.o.timeoutMs),
      });
      text = await res.text();
    } catch (err) {
      this.trouble('unreachable', causeOf(err));
      return { kind: 'failed' };
    }
    if (res.ok) {
      this.troubled = false;
      let parsed: unknown;
      try {
        parsed = text ? JSON.parse(text) : undefined;
      } catch {
        parsed = undefined;
      }
      return { kind: 'ok', body: parsed };
    }
    if (res.status === 404 || res.status === 405) this.trouble('not_vigil', `answered ${res.status}`);
    else if (res.status === 401 || res.status === 403)
      this.trouble('unauthorized', `answered ${res.status}${codeOf(text)}`);
    else if (res.status >= 500) this.trouble('unreachable', `answered ${res.status}`);
    else if (res.status !== 408 && res.status !== 429) this.troubled = false; // Vigil is there: a bad batch
    // Not Vigil (nothing of it at this URL) is kept and retried like an outage; a 4xx from
    // Vigil would not pass on a retry either.
    const vigilRefused = res.status >= 400 && res.status < 500 && ![404, 405, 408, 429].includes(res.status);
    return vigilRefused ? { kind: 'rejected', status: res.status } : { kind: 'failed' };
  }

  /** The X-Vigil-Session-Key value for the sessions a request names (none without a key source). */
  private keysFor(sessions: readonly string[]): string | undefined {
    const keyOf = this.opts.sessionKey;
    if (!keyOf || !sessions.length) return undefined;
    const pairs: [string, string][] = [];
    for (const id of sessions) {
      const k = keyOf(id);
      if (k !== undefined) pairs.push([id, k]);
    }
    return sessionKeyHeader(pairs);
  }

  private trouble(kind: Trouble['kind'], detail: string): void {
    if (this.troubled || this.closed) return;
    this.troubled = true;
    this.log('warn', 'vigil unreachable', { kind, url: this.base, detail });
    try {
      this.opts.onTrouble?.({ kind, url: this.base, detail });
    } catch {
      // a warning must not break sending
    }
  }

  /** Stop timers; one last best-effort send. */
  async close(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    if (this.buffer.length && !this.closed) {
      this.backoffMs = 0;
      await this.flush().catch(() => {});
    }
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
  }
}

/** ` SESSION_KEY_MISMATCH` when the refusal says a session is bound to another key, else ''. */
function codeOf(text: string): string {
  try {
    return (JSON.parse(text) as { code?: unknown }).code === 'SESSION_KEY_MISMATCH' ? ' SESSION_KEY_MISMATCH' : '';
  } catch {
    return '';
  }
}

/**
 * The sessions a batch names: each event's session and its parent (joining a tree names
 * the parent), and for a `compaction_done` its root (service/session-keys.ts).
 */
function namedIn(batch: readonly ProgressEvent[], rootOf?: (id: string) => string): string[] {
  const out = new Set<string>();
  for (const ev of batch) for (const id of namesOf(ev, rootOf)) out.add(id);
  return [...out];
}

function namesOf(ev: ProgressEvent, rootOf?: (id: string) => string): string[] {
  const out = [ev.session_id];
  if (ev.parent_session_id) out.push(ev.parent_session_id);
  if (ev.kind === 'compaction_done' && rootOf) out.push(rootOf(ev.parent_session_id ?? ev.session_id));
  return out;
}

/** A short reason for a failed fetch: the network error code when there is one. */
function causeOf(err: unknown): string {
  const e = err as { name?: string; code?: unknown; cause?: { code?: unknown } } | undefined;
  if (e?.name === 'TimeoutError') return 'no answer in time';
  // Node's fetch puts the socket error in `cause`; Bun's fetch (opencode's runtime) on the error.
  const code = e?.cause?.code ?? e?.code;
  if (code === 'ECONNREFUSED' || code === 'ConnectionRefused') return 'connection refused';
  return typeof code === 'string' ? code : 'request failed';
}
