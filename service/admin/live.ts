import type { ServerResponse } from 'node:http';
import type { FastifyReply } from 'fastify';
import type { SessionRow } from '../../core/engine.ts';
import type { Vigil } from '../../core/vigil.ts';
import { listen, type VigilEventName } from './events.ts';

export interface LiveOptions {
  /** Coalesce session updates for this long: a busy agent sends many events a second. */
  flushMs?: number;
  /** Rows recomputed per flush at most; the rest wait for the next flush. */
  batch?: number;
  /** A comment line this often keeps proxies from closing an idle stream. */
  pingMs?: number;
  maxClients?: number;
}

const MAX_BUFFERED = 1 << 20;
const MAX_ROOTS = 5_000;

/**
 * Server-Sent Events for the admin page. Kernel events are forwarded as they come
 * (transition, tree, delivery, knobs, channel, heartbeat); sessions touched by
 * progress events, request records, transitions or a tree change are marked dirty and
 * their rows are recomputed at most every `flushMs` and pushed as one `sessions`
 * event (with nobody watching, nothing is recomputed).
 */
export class Live {
  private readonly clients = new Set<ServerResponse>();
  private readonly dirty = new Set<string>();
  /** session -> root, from the rows seen, so a tree change can mark its sessions dirty. */
  private readonly roots = new Map<string, string>();
  private readonly off: (() => void)[] = [];
  private flushTimer: NodeJS.Timeout | undefined;
  private pingTimer: NodeJS.Timeout | undefined;
  private flushing = false;
  private stopped = false;
  private readonly o: Required<LiveOptions>;

  constructor(
    private readonly vigil: Vigil,
    opts: LiveOptions = {},
  ) {
    this.o = { flushMs: 200, batch: 200, pingMs: 25_000, maxClients: 64, ...opts };
  }

  start(): void {
    const v = this.vigil;
    const forward = (name: VigilEventName) => listen(v, name, (p) => this.send(name, p));
    this.off.push(
      listen(v, 'progress', (p) => this.mark(p.sessions)),
      listen(v, 'request', (p) => this.mark([p.session])),
      listen(v, 'transition', (p) => {
        this.remember(p.session, p.root);
        this.send('transition', p);
        this.mark([p.session]);
      }),
      listen(v, 'tree', (p) => {
        this.send('tree', p);
        const ids = [p.root];
        for (const [s, r] of this.roots) if (r === p.root) ids.push(s);
        this.mark(ids);
      }),
      forward('delivery'),
      forward('knobs'),
      forward('channel'),
      listen(v, 'heartbeat', () => this.send('heartbeat', {})),
    );
  }

  stop(): void {
    this.stopped = true;
    for (const f of this.off.splice(0)) f();
    clearTimeout(this.flushTimer);
    clearInterval(this.pingTimer);
    for (const c of this.clients) c.end();
    this.clients.clear();
  }

  get clientCount(): number {
    return this.clients.size;
  }

  /** Takes over the reply as an event stream. */
  attach(reply: FastifyReply): void {
    if (this.clients.size >= this.o.maxClients) {
      void reply.code(503).send({ statusCode: 503, code: 'BUSY', error: 'Busy', message: 'too many event streams' });
      return;
    }
    reply.hijack();
    const res = reply.raw;
    res.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-store',
      connection: 'keep-alive',
      'x-accel-buffering': 'no',
      'x-content-type-options': 'nosniff',
    });
    // `hello` tells the page to (re)load its state: anything before this was missed.
    res.write('retry: 3000\n\nevent: hello\ndata: {}\n\n');
    this.clients.add(res);
    res.on('close', () => {
      this.clients.delete(res);
      if (!this.clients.size) {
        clearInterval(this.pingTimer);
        this.pingTimer = undefined;
      }
    });
    if (!this.pingTimer) {
      this.pingTimer = setInterval(() => this.write(': ping\n\n'), this.o.pingMs);
      this.pingTimer.unref();
    }
  }

  send(event: string, data: unknown): void {
    if (this.clients.size) this.write(`event: ${event}\ndata: ${JSON.stringify(data ?? null)}\n\n`);
  }

  private write(chunk: string): void {
    for (const c of this.clients) {
      // A client that stopped reading is dropped rather than buffered without bound.
      if (c.writableLength > MAX_BUFFERED) {
        c.end();
        this.clients.delete(c);
        continue;
      }
      c.write(chunk);
    }
  }

  private remember(session: string, root: string): void {
    this.roots.delete(session);
    this.roots.set(session, root);
    if (this.roots.size > MAX_ROOTS) this.roots.delete(this.roots.keys().next().value as string);
  }

  private mark(ids: readonly string[]): void {
    for (const id of ids) this.dirty.add(id);
    this.schedule();
  }

  private schedule(): void {
    if (this.flushTimer || this.flushing || this.stopped || !this.dirty.size) return;
    this.flushTimer = setTimeout(() => void this.flush(), this.o.flushMs);
    this.flushTimer.unref();
  }

  /** Recomputes the dirty rows (a bounded batch) and pushes `sessions`. */
  async flush(): Promise<void> {
    this.flushTimer = undefined;
    if (!this.clients.size) {
      this.dirty.clear();
      return;
    }
    this.flushing = true;
    try {
      const ids = new Set<string>();
      for (const id of this.dirty) {
        this.dirty.delete(id);
        // Turns and dollars roll up: a child's event changes its ancestors' rows too.
        const up = await this.vigil.tree.ancestors(id);
        const root = up.length ? up[up.length - 1] : id;
        for (const a of [id, ...up]) {
          ids.add(a);
          this.remember(a, root);
        }
        if (ids.size >= this.o.batch) break;
      }
      const rows = (await Promise.all([...ids].map((id) => this.vigil.engine.sessionRow(id)))).filter(
        (r): r is SessionRow => r !== undefined,
      );
      if (rows.length) this.send('sessions', { rows });
    } catch (err) {
      if (!this.stopped) this.vigil.logger.warn({ err: (err as Error).message }, 'admin live flush failed');
    } finally {
      this.flushing = false;
      this.schedule();
    }
  }
}
