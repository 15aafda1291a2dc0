import { Lru } from '../../../../core/lru.ts';

// Who a session is: its parent (for the tree), its agent and the model it last used.
// Learned for free from the bus (`session.created` / `session.updated` carry the
// session info, parentID included, before a child's first model request) and from
// chat.params; only an unknown session costs a lookup, bounded by a short timeout.

export interface ModelRef {
  providerID: string;
  modelID: string;
}

export interface SessionFacts {
  /** null: a root (known); undefined: not known yet. */
  parent?: string | null;
  agent?: string;
  model?: ModelRef;
}

/** Looks a session up in opencode (`GET /session/{id}`); resolves to its info or undefined. */
export type SessionLookup = (sessionID: string, signal: AbortSignal) => Promise<unknown>;

export interface SessionBookOptions {
  lookup?: SessionLookup;
  /** How long chat.headers may wait for an unknown parent (ms); past it the header is skipped. */
  lookupTimeoutMs?: number;
  /** After a failed lookup, do not ask again for this long (ms). */
  retryAfterMs?: number;
  max?: number;
  now?: () => number;
}

const ID = /^[\x21-\x7e]{1,128}$/;
const isId = (v: unknown): v is string => typeof v === 'string' && ID.test(v);

/** Agent names reach the router's charset: lower case, [a-z0-9-], at most 64 chars. */
export function slugAgent(name: unknown): string | undefined {
  if (typeof name !== 'string') return undefined;
  const s = name
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '-')
    .replace(/^-+|-+$/g, '')
    .slice(0, 64)
    .replace(/-+$/, '');
  return s || undefined;
}

/** The session info a `session.created` / `session.updated` bus event carries, else undefined. */
export function sessionInfoOf(ev: { type?: unknown; properties?: unknown }): unknown {
  if (ev.type !== 'session.created' && ev.type !== 'session.updated') return undefined;
  return (ev.properties as { info?: unknown } | undefined)?.info;
}

export class SessionBook {
  private readonly facts: Lru<string, SessionFacts>;
  private readonly inflight = new Map<string, Promise<void>>();
  private readonly failedAt = new Lru<string, number>(500);
  private readonly lookup?: SessionLookup;
  private readonly timeoutMs: number;
  private readonly retryAfterMs: number;
  private readonly now: () => number;

  constructor(o: SessionBookOptions = {}) {
    this.lookup = o.lookup;
    this.timeoutMs = o.lookupTimeoutMs ?? 300;
    this.retryAfterMs = o.retryAfterMs ?? 30_000;
    this.now = o.now ?? Date.now;
    this.facts = new Lru(o.max ?? 2000);
  }

  get(id: string): SessionFacts {
    return this.facts.peek(id) ?? {};
  }

  private update(id: string, patch: SessionFacts): void {
    this.facts.set(id, { ...this.facts.peek(id), ...patch });
  }

  /** A session info object (bus event or `GET /session/{id}`): id, parentID, agent, model. */
  learnSession(info: unknown): void {
    if (info === null || typeof info !== 'object') return;
    const s = info as {
      id?: unknown;
      parentID?: unknown;
      agent?: unknown;
      model?: { id?: unknown; providerID?: unknown };
    };
    if (!isId(s.id)) return;
    const patch: SessionFacts = { parent: isId(s.parentID) ? s.parentID : null };
    if (typeof s.agent === 'string' && s.agent) patch.agent = s.agent;
    const m = s.model;
    if (m && typeof m.id === 'string' && typeof m.providerID === 'string') {
      patch.model = { providerID: m.providerID, modelID: m.id };
    }
    this.update(s.id, patch);
  }

  noteAgent(id: string, agent: unknown): void {
    if (isId(id) && typeof agent === 'string' && agent && this.facts.peek(id)?.agent !== agent)
      this.update(id, { agent });
  }

  noteModel(id: string, model: ModelRef): void {
    const cur = this.facts.peek(id)?.model;
    if (isId(id) && (cur?.providerID !== model.providerID || cur?.modelID !== model.modelID))
      this.update(id, { model });
  }

  /** The parent when known (null for a root), without any lookup. */
  parentOf(id: string): string | null | undefined {
    return this.facts.peek(id)?.parent;
  }

  /**
   * The parent, looking the session up when unknown. Never waits longer than the lookup
   * timeout: a slow answer still fills the cache for the next call. Undefined when unknown.
   */
  async resolveParent(id: string): Promise<string | null | undefined> {
    const known = this.parentOf(id);
    if (known !== undefined || !this.lookup || !isId(id)) return known;
    const failed = this.failedAt.peek(id);
    if (failed !== undefined && this.now() - failed < this.retryAfterMs) return undefined;
    let p = this.inflight.get(id);
    if (!p) {
      const lookup = this.lookup;
      p = lookup(id, AbortSignal.timeout(Math.max(this.timeoutMs, 5_000)))
        .then((info) => {
          this.learnSession(info);
          if (this.parentOf(id) === undefined) this.failedAt.set(id, this.now());
        })
        .catch(() => {
          this.failedAt.set(id, this.now());
        })
        .finally(() => this.inflight.delete(id));
      this.inflight.set(id, p);
    }
    let timer: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([p, new Promise<void>((r) => (timer = setTimeout(r, this.timeoutMs)))]);
    clearTimeout(timer);
    return this.parentOf(id);
  }

  /** The tree root as far as the cache knows (the service knows better: it is only used to group polls). */
  rootOf(id: string): string {
    let cur = id;
    for (let i = 0; i < 32; i++) {
      const p = this.parentOf(cur);
      if (!p) return cur;
      cur = p;
    }
    return cur;
  }
}

export const HEADERS = {
  conversation: 'X-Router-Conversation',
  agent: 'X-Router-Agent',
  parent: 'X-Router-Parent',
  plugin: 'X-Vigil-Plugin',
} as const;

/** The identity headers of one model request (chat.headers). */
export function identityHeaders(
  sessionID: string,
  agent: unknown,
  parent: string | null | undefined,
  pluginId: string,
): Record<string, string> {
  const h: Record<string, string> = {};
  if (isId(sessionID)) h[HEADERS.conversation] = sessionID;
  const slug = slugAgent(agent);
  if (slug) h[HEADERS.agent] = slug;
  if (isId(parent)) h[HEADERS.parent] = parent;
  h[HEADERS.plugin] = pluginId;
  return h;
}
