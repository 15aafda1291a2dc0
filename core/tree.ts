import type { Clock } from './clock.ts';
import type { Origin, SessionInfo } from './contracts.ts';
import { Lru } from './lru.ts';
import { keys, TTL } from './store/keys.ts';
import type { Store } from './store/store.ts';
import { onDiscard } from './unit.ts';

/** Facts about a session that belong to no detector. */
export interface SessionMeta {
  models: string[];
  agent?: string;
  plugin_version?: string;
  plugin_seen_at?: number;
  first_seen: number;
  /** Latest input time seen (epoch ms), persisted at most once a minute. */
  last_seen?: number;
  /** When this service last had an input for it (its clock, epoch ms), persisted at most once a minute. */
  active_at?: number;
}

/** What one input says about its session. */
export interface SessionFacts {
  id: string;
  parent?: string | null;
  agent?: string;
  model?: string;
  ts?: number;
  origin?: Origin;
}

/** The plugin counts as live on a session while it reported within this. */
export const PLUGIN_LIVE_MS = 10 * 60_000;
/** How deep a tree may be; a deeper chain (or a cycle) stops here. */
export const MAX_DEPTH = 16;
/** "No parent known" is cached this long: another instance may learn the link meanwhile. */
const NO_PARENT_MS = 10_000;
/** last_seen is written to the store at most this often per session. */
const SEEN_WRITE_MS = 60_000;

/** The ancestors of a session, nearest first; stops at a cycle or after maxDepth. */
export function ancestorsOf(id: string, parentOf: (id: string) => string | undefined, maxDepth = MAX_DEPTH): string[] {
  const out: string[] = [];
  let cur = parentOf(id);
  while (cur !== undefined && out.length < maxDepth && cur !== id && !out.includes(cur)) {
    out.push(cur);
    cur = parentOf(cur);
  }
  return out;
}

/**
 * The conversation trees: who is whose parent, each session's root, agent, models and
 * plugin build. One service every detector, mode and readout uses. Links never change
 * once known, so they are cached in-process; the store makes them shared by instances.
 * The hot path (a known session whose facts did not change) touches no store and
 * allocates nothing: `enter` answers synchronously then.
 */
export class SessionTree {
  private readonly parents = new Lru<string, string>(200_000);
  private readonly noParentUntil = new Lru<string, number>(200_000);
  private readonly metas = new Lru<string, SessionMeta>(50_000);
  private readonly infos = new Lru<string, SessionInfo>(50_000);
  private readonly shared: boolean;

  constructor(
    private readonly store: Store,
    private readonly clock: Clock,
  ) {
    this.shared = store.backend !== 'memory';
  }

  /**
   * Records what an input says about its session (parent link, agent, model, plugin
   * build, time) and returns where the session sits. Synchronous when everything is
   * cached and nothing changed.
   */
  enter(f: SessionFacts): SessionInfo | Promise<SessionInfo> {
    const info = this.infos.peek(f.id);
    const meta = this.metas.peek(f.id);
    if (info !== undefined && meta !== undefined && !this.changes(meta, info, f) && this.fresh(info)) return info;
    return this.enterSlow(f);
  }

  private async enterSlow(f: SessionFacts): Promise<SessionInfo> {
    if (f.parent) await this.link(f.id, f.parent);
    let info = this.infos.peek(f.id);
    if (info === undefined || !this.fresh(info)) info = await this.info(f.id);
    const meta = this.metas.peek(f.id) ?? (await this.meta(f.id));
    if (!meta || this.changes(meta, info, f)) await this.touch(f, meta);
    return info;
  }

  /**
   * With a shared store another instance may link a tree's root to a parent: a root
   * learnt here is trusted for NO_PARENT_MS. In-process every link goes through link().
   */
  private fresh(info: SessionInfo): boolean {
    return !this.shared || (this.noParentUntil.peek(info.root) ?? 0) > this.clock.now();
  }

  /** Whether this input changes what is known (a new model, agent, plugin build, a stale mark). */
  private changes(m: SessionMeta, info: SessionInfo, f: SessionFacts): boolean {
    if (f.parent && info.parent !== f.parent && info.parent === undefined) return true;
    if (f.model !== undefined && !m.models.includes(f.model)) return true;
    if (f.agent !== undefined && m.agent === undefined) return true;
    const now = this.clock.now();
    const pv = f.origin?.plugin_version;
    if (pv !== undefined && (m.plugin_version !== pv || now - (m.plugin_seen_at ?? 0) > PLUGIN_LIVE_MS / 4))
      return true;
    if (now - (m.active_at ?? m.first_seen) > SEEN_WRITE_MS) return true;
    return f.ts !== undefined && f.ts - (m.last_seen ?? 0) > SEEN_WRITE_MS;
  }

  /** Writes meta only when something in it changes, so most inputs write nothing. */
  private async touch(f: SessionFacts, known: SessionMeta | undefined): Promise<void> {
    const now = this.clock.now();
    const pv = f.origin?.plugin_version;
    const changed = (cur: SessionMeta): boolean =>
      (f.model !== undefined && !cur.models.includes(f.model)) ||
      (f.agent !== undefined && cur.agent === undefined) ||
      (pv !== undefined && (cur.plugin_version !== pv || now - (cur.plugin_seen_at ?? 0) > PLUGIN_LIVE_MS / 4)) ||
      now - (cur.active_at ?? cur.first_seen) > SEEN_WRITE_MS ||
      (f.ts !== undefined && f.ts - (cur.last_seen ?? 0) > SEEN_WRITE_MS);
    if (known && !changed(known)) return;
    let moved = false;
    const next = await this.store.update<SessionMeta, SessionMeta>(keys.meta(f.id), (cur) => {
      const m = cur ?? { models: [], first_seen: now };
      if (cur && !changed(cur)) {
        moved = false;
        return { value: cur, result: cur, ttlMs: TTL.session };
      }
      moved = cur === undefined || (cur.active_at ?? cur.first_seen) < now;
      const v: SessionMeta = {
        ...m,
        models: f.model !== undefined && !m.models.includes(f.model) ? [...m.models, f.model].slice(-8) : m.models,
        ...(f.agent !== undefined && m.agent === undefined ? { agent: f.agent } : {}),
        ...(pv !== undefined ? { plugin_version: pv, plugin_seen_at: now } : {}),
        ...(f.ts !== undefined ? { last_seen: Math.max(f.ts, m.last_seen ?? 0) } : {}),
        active_at: Math.max(now, m.active_at ?? 0),
      };
      return { value: v, result: v, ttlMs: TTL.session };
    });
    this.metas.set(f.id, next);
    onDiscard(() => this.metas.delete(f.id));
    // The cap's index is ordered by last activity: an active session moves up, so a
    // flood of new ids pushes out the idle ones first (trim()).
    if (moved) await this.store.indexAdd(keys.sessions, f.id, next.active_at ?? now);
  }

  /** Whether the service knows the session (has had an input for it): synchronous when cached. */
  known(id: string): boolean | Promise<boolean> {
    if (this.metas.peek(id) !== undefined) return true;
    return this.meta(id).then((m) => m !== undefined);
  }

  /**
   * Keeps at most `max` sessions: the least recently active beyond it are forgotten
   * here, their ids returned so the detectors drop what they keep for them too. A
   * session active since `activeSince` is never forgotten: the cap waits for it to go
   * idle (a flood of new ids cannot reset a live session's detection).
   */
  async trim(max: number, activeSince = Number.POSITIVE_INFINITY): Promise<string[]> {
    const gone = await this.store.indexTrim(keys.sessions, max, activeSince);
    for (const id of gone) {
      await this.store.del(keys.meta(id));
      await this.store.del(keys.parent(id));
      this.metas.delete(id);
      this.infos.delete(id);
      this.parents.delete(id);
    }
    return gone;
  }

  /** Where a session sits (loads and caches the links). */
  async info(id: string): Promise<SessionInfo> {
    const ancestors = await this.ancestors(id);
    const info: SessionInfo = {
      id,
      parent: ancestors[0],
      root: ancestors.length ? ancestors[ancestors.length - 1] : id,
      ancestors,
    };
    // A parentless session may learn its parent later: cache it only until then.
    this.infos.set(id, info);
    onDiscard(() => this.infos.delete(id));
    return info;
  }

  /** From the in-process caches alone, or undefined when something is not cached. */
  infoNow(id: string): SessionInfo | undefined {
    return this.infos.peek(id);
  }

  async parentOf(id: string): Promise<string | undefined> {
    const known = this.parents.peek(id);
    if (known) return known;
    const now = this.clock.now();
    if ((this.noParentUntil.peek(id) ?? 0) > now) return undefined;
    const p = await this.store.get<string>(keys.parent(id));
    if (p !== undefined) this.parents.set(id, p);
    else this.noParentUntil.set(id, now + NO_PARENT_MS);
    // (inside a unit the read may be its own write: forgotten if the unit is discarded)
    onDiscard(() => {
      this.parents.delete(id);
      this.noParentUntil.delete(id);
    });
    return p;
  }

  /** Nearest first; stops at a cycle or MAX_DEPTH levels. */
  async ancestors(id: string): Promise<string[]> {
    const out: string[] = [];
    let cur = await this.parentOf(id);
    while (cur !== undefined && cur !== id && !out.includes(cur) && out.length < MAX_DEPTH) {
      out.push(cur);
      cur = await this.parentOf(cur);
    }
    return out;
  }

  async rootOf(id: string): Promise<string> {
    return (this.infos.peek(id) ?? (await this.info(id))).root;
  }

  /** Records id -> parent once (links never change); refuses a link that would make a cycle. */
  async link(id: string, parent: string): Promise<void> {
    if (parent === id || this.parents.peek(id)) return;
    this.noParentUntil.delete(id);
    if ((await this.parentOf(id)) !== undefined) return;
    if ((await this.ancestors(parent)).includes(id)) return;
    this.parents.set(id, parent);
    this.noParentUntil.delete(id);
    await this.store.set(keys.parent(id), parent, TTL.session);
    // Every cached position below this session changed (and changes back if the unit is discarded).
    const drop = () => {
      this.infos.delete(id);
      for (const [k, v] of this.infos.entries()) if (v.ancestors.includes(id)) this.infos.delete(k);
    };
    drop();
    onDiscard(() => {
      this.parents.delete(id);
      drop();
    });
  }

  async meta(id: string): Promise<SessionMeta | undefined> {
    const m = this.metas.peek(id);
    if (m) return m;
    const stored = await this.store.get<SessionMeta>(keys.meta(id));
    if (stored) {
      this.metas.set(id, stored);
      onDiscard(() => this.metas.delete(id));
    }
    return stored;
  }

  /** Records an agent name learnt from outside (the watchdog names it). */
  async nameAgent(id: string, agent: string): Promise<void> {
    await this.touch({ id, agent }, await this.meta(id));
  }

  /** Every session known, most recently seen first. */
  async ids(): Promise<string[]> {
    return (await this.store.keys(keys.metaPrefix)).map((k) => k.slice(keys.metaPrefix.length));
  }

  pluginLive(m: SessionMeta | undefined): boolean {
    return m?.plugin_seen_at !== undefined && this.clock.now() - m.plugin_seen_at < PLUGIN_LIVE_MS;
  }
}
