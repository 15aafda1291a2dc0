import type { Clock } from '../../core/clock.ts';
import type { Logger } from '../../core/logger.ts';
import type { Store } from '../../core/store/store.ts';
import type { ProgressEvent, RequestRecord, Verdict, VerdictLevel } from '../../core/wire.ts';
import {
  decodeState,
  encodeState,
  type JudgeInput,
  LEVELS,
  type LevelCode,
  newSessionState,
  onProgress,
  onRequest,
  onRollup,
  rollUpOf,
  type SessionState,
  verdictOf,
} from './judge.ts';
import type { NoProgressKnobs } from './knobs.ts';
import { buildReport, summaryLine } from './report.ts';

// The service's shell around the pure judge: load a session's state from the store,
// judge(), save it, roll the input up to the ancestors. In-process (memory backend) the
// states are live objects; with Redis they are compact bytes written compare-and-set,
// so several instances judge the same session consistently.

/** A verdict from outside the judge (the watchdog), kept beside the session. */
export interface ExternalVerdict {
  level: VerdictLevel;
  reason: string;
  source: string;
  at: number;
  second_opinion?: { model: string; looping: boolean; reason: string };
}

/** Facts about a session that are not judge signals. */
export interface SessionMeta {
  models: string[];
  plugin_version?: string;
  plugin_seen_at?: number;
  first_seen: number;
  /** Agent name when only an external verdict named it (the judge keeps its own). */
  agent?: string;
  external?: ExternalVerdict;
}

/** A change of a session's effective verdict (own judge, or a fresh external verdict if worse). */
export interface VerdictTransition {
  session_id: string;
  from: VerdictLevel;
  to: VerdictLevel;
  verdict: Verdict;
  source: string;
}

const RANK: Record<VerdictLevel, number> = { ok: 0, stalling: 1, looping: 2 };
/** Shared empty result: most events change nothing, so nothing is allocated for them. */
const NONE = Object.freeze([]) as unknown as VerdictTransition[];
/** State of a session idle this long is dropped from the Redis backend. */
const STATE_TTL_MS = 7 * 86_400_000;
/** An external verdict counts for this long unless renewed. */
const EXTERNAL_TTL_MS = 30 * 60_000;
/** The plugin counts as live on a session while it reported within this. */
export const PLUGIN_LIVE_MS = 10 * 60_000;

interface SessionRepo {
  get(id: string): Promise<SessionState | undefined>;
  mutate(id: string, fn: (s: SessionState) => void): Promise<{ s: SessionState; from: LevelCode }>;
  ids(): Promise<string[]>;
}

/** In-process: live objects, least recently updated dropped past max_sessions. */
class LiveRepo implements SessionRepo {
  private readonly m = new Map<string, SessionState>();
  private stamp = 0;
  constructor(private readonly knobs: () => NoProgressKnobs) {}
  async get(id: string) {
    return this.m.get(id);
  }
  /** Synchronous: the in-process hot path needs no await. */
  mutateNow(id: string, fn: (s: SessionState) => void): { s: SessionState; from: LevelCode } {
    let s = this.m.get(id);
    if (s === undefined) {
      const k = this.knobs();
      if (this.m.size >= k.max_sessions) this.evict(k.max_sessions);
      s = newSessionState(k);
      this.m.set(id, s);
    }
    s.touched = ++this.stamp;
    const from = s.level;
    fn(s);
    return { s, from };
  }
  async mutate(id: string, fn: (s: SessionState) => void) {
    return this.mutateNow(id, fn);
  }
  async ids() {
    return [...this.m.keys()];
  }
  /** Drops the least recently updated 1% (at least one): rare, so a sort is fine. */
  private evict(max: number): void {
    const n = Math.max(1, Math.floor(max / 100));
    const cut = [...this.m.values()].map((s) => s.touched).sort((a, b) => a - b)[Math.min(n, this.m.size) - 1];
    for (const [id, s] of this.m) if (s.touched <= cut) this.m.delete(id);
  }
}

/** Shared: compact bytes per session, written compare-and-set (retried on a conflict). */
class StoreRepo implements SessionRepo {
  constructor(
    private readonly store: Store,
    private readonly knobs: () => NoProgressKnobs,
  ) {}
  async get(id: string) {
    const b = await this.store.getBytes(`ses:${id}`);
    return b === undefined ? undefined : decodeState(b);
  }
  async mutate(id: string, fn: (s: SessionState) => void) {
    for (let attempt = 0; attempt < 50; attempt++) {
      const before = await this.store.getBytes(`ses:${id}`);
      const s = before === undefined ? newSessionState(this.knobs()) : decodeState(before);
      const from = s.level;
      fn(s);
      if (await this.store.casBytes(`ses:${id}`, before, encodeState(s), STATE_TTL_MS)) return { s, from };
    }
    throw new Error(`session ${id}: state kept changing under us`);
  }
  async ids() {
    return (await this.store.keys('ses:')).map((k) => k.slice(4));
  }
}

export class NoProgressDetector {
  private readonly repo: SessionRepo;
  /** Parent links never change once known, so they are cached in-process. */
  private readonly parents = new Map<string, string | null>();
  /** "No parent known" is cached briefly: another instance may learn the link meanwhile. */
  private readonly noParentUntil = new Map<string, number>();
  private readonly metas = new Map<string, SessionMeta>();

  /** Set on the memory backend: its synchronous path skips an await per event. */
  private readonly live: LiveRepo | undefined;

  constructor(
    private readonly store: Store,
    private readonly clock: Clock,
    readonly _logger: Logger,
    readonly knobs: () => NoProgressKnobs,
  ) {
    this.live = store.backend === 'memory' ? new LiveRepo(knobs) : undefined;
    this.repo = this.live ?? new StoreRepo(store, knobs);
  }

  /** Applies one progress event or request record; returns the effective verdict changes it caused. */
  async ingest(input: JudgeInput, origin: { plugin_version?: string } = {}): Promise<VerdictTransition[]> {
    const k = this.knobs();
    const id =
      input.type === 'progress' ? input.event.session_id : input.type === 'request' ? input.record.session_id : '';
    const parent =
      input.type === 'progress'
        ? input.event.parent_session_id
        : input.type === 'request'
          ? input.record.parent_session_id
          : undefined;
    // The hot path awaits only on a cache miss: links and metas are cached in-process.
    if (parent && this.parents.get(id) !== parent) await this.link(id, parent);
    const meta = this.metas.get(id) ?? (await this.meta(id));
    if (this.metaChanges(meta, input, origin)) await this.touchMeta(id, input, origin);
    const ext = this.fresh(this.metas.get(id)?.external);
    const apply = (st: SessionState) => {
      if (input.type === 'progress') onProgress(st, input.event as ProgressEvent, k);
      else if (input.type === 'request') onRequest(st, input.record as RequestRecord, k);
      else onRollup(st, input.rollup, k);
    };
    const { s, from } = this.live ? this.live.mutateNow(id, apply) : await this.repo.mutate(id, apply);
    let out: VerdictTransition[] = NONE;
    if (s.level !== from) out = this.collect(out, id, s, from, ext, k);
    const r = rollUpOf(input, s);
    if (r) {
      const ancestors = this.cachedAncestors(id) ?? (await this.ancestors(id));
      for (const anc of ancestors) {
        const roll = (st: SessionState) => onRollup(st, r, k);
        const { s: as, from: af } = this.live ? this.live.mutateNow(anc, roll) : await this.repo.mutate(anc, roll);
        if (as.level !== af) out = this.collect(out, anc, as, af, await this.externalOf(anc), k);
      }
    }
    return out;
  }

  /** Ancestors from the in-process caches alone, or undefined when a link is not cached. */
  private cachedAncestors(id: string): string[] | undefined {
    const out: string[] = [];
    let cur = id;
    const now = this.clock.now();
    for (let depth = 0; depth < 16; depth++) {
      const p = this.parents.get(cur);
      if (p) {
        if (p === id || out.includes(p)) return out;
        out.push(p);
        cur = p;
        continue;
      }
      return (this.noParentUntil.get(cur) ?? 0) > now ? out : undefined;
    }
    return out;
  }

  private fresh(ext: ExternalVerdict | undefined): ExternalVerdict | undefined {
    return ext && this.clock.now() - ext.at < EXTERNAL_TTL_MS ? ext : undefined;
  }

  /** Records a verdict from outside (the watchdog); returns the effective change, if any. */
  async external(
    v: { session_id: string; parent_session_id?: string | null; agent?: string } & Omit<ExternalVerdict, 'at'>,
  ): Promise<VerdictTransition[]> {
    if (v.parent_session_id) await this.link(v.session_id, v.parent_session_id);
    const before = await this.effective(v.session_id);
    const ext: ExternalVerdict = {
      level: v.level,
      reason: v.reason,
      source: v.source,
      at: this.clock.now(),
      ...(v.second_opinion ? { second_opinion: v.second_opinion } : {}),
    };
    await this.updateMeta(v.session_id, (m) => ({ ...m, external: ext, ...(v.agent ? { agent: v.agent } : {}) }));
    // A session known only from the watchdog still shows in the Sessions readout.
    if (!(await this.repo.get(v.session_id))) await this.repo.mutate(v.session_id, () => {});
    const after = await this.effective(v.session_id);
    if (before.level === after.level) return [];
    return [
      { session_id: v.session_id, from: before.level, to: after.level, verdict: after.verdict, source: after.source },
    ];
  }

  private collect(
    out: VerdictTransition[],
    id: string,
    s: SessionState,
    from: LevelCode,
    ext: ExternalVerdict | undefined,
    k: NoProgressKnobs,
  ): VerdictTransition[] {
    if (s.level === from) return out;
    const extRank = ext ? RANK[ext.level] : 0;
    const before = Math.max(from, extRank);
    const after = Math.max(s.level, extRank);
    if (before === after) return out;
    const own = verdictOf(s, k);
    const useExt = ext !== undefined && extRank > s.level;
    if (out === NONE) out = [];
    out.push({
      session_id: id,
      from: LEVELS[before],
      to: LEVELS[after],
      verdict: useExt ? { ...own, level: ext.level, reason: ext.reason.slice(0, 300) } : own,
      source: useExt ? ext.source : 'no-progress',
    });
    return out;
  }

  /** The session's effective verdict: its own, or a fresh external one when that is worse. */
  async effective(id: string): Promise<{ level: VerdictLevel; verdict: Verdict; source: string }> {
    const k = this.knobs();
    const s = (await this.repo.get(id)) ?? newSessionState(k);
    const own = verdictOf(s, k);
    const ext = await this.externalOf(id);
    if (ext && RANK[ext.level] > RANK[own.level]) {
      return {
        level: ext.level,
        verdict: { ...own, level: ext.level, reason: ext.reason.slice(0, 300) },
        source: ext.source,
      };
    }
    return { level: own.level, verdict: own, source: 'no-progress' };
  }

  private async externalOf(id: string): Promise<ExternalVerdict | undefined> {
    return this.fresh((this.metas.get(id) ?? (await this.meta(id)))?.external);
  }

  async state(id: string): Promise<SessionState | undefined> {
    return this.repo.get(id);
  }

  async parentOf(id: string): Promise<string | undefined> {
    const known = this.parents.get(id);
    if (known) return known;
    const now = this.clock.now();
    if ((this.noParentUntil.get(id) ?? 0) > now) return undefined;
    const p = await this.store.get<string>(`parent:${id}`);
    if (p !== undefined) {
      this.parents.set(id, p);
      if (this.parents.size > 200_000) this.parents.delete(this.parents.keys().next().value as string);
    } else {
      this.noParentUntil.set(id, now + 10_000);
      if (this.noParentUntil.size > 200_000)
        this.noParentUntil.delete(this.noParentUntil.keys().next().value as string);
    }
    return p;
  }

  /** Nearest first; stops at a cycle or 16 levels. */
  async ancestors(id: string): Promise<string[]> {
    const out: string[] = [];
    let cur = await this.parentOf(id);
    while (cur !== undefined && cur !== id && !out.includes(cur) && out.length < 16) {
      out.push(cur);
      cur = await this.parentOf(cur);
    }
    return out;
  }

  async rootOf(id: string): Promise<string> {
    const a = await this.ancestors(id);
    return a.length ? a[a.length - 1] : id;
  }

  /** Records id -> parent once (links never change); refuses a link that would make a cycle. */
  async link(id: string, parent: string): Promise<void> {
    if (parent === id || this.parents.get(id)) return;
    this.noParentUntil.delete(id);
    const known = await this.parentOf(id);
    if (known !== undefined) return;
    if ((await this.ancestors(parent)).includes(id)) return;
    this.parents.set(id, parent);
    this.noParentUntil.delete(id);
    await this.store.set(`parent:${id}`, parent, STATE_TTL_MS);
  }

  async meta(id: string): Promise<SessionMeta | undefined> {
    const m = this.metas.get(id);
    if (m) return m;
    const stored = await this.store.get<SessionMeta>(`meta:${id}`);
    if (stored) this.metas.set(id, stored);
    return stored;
  }

  private async updateMeta(id: string, fn: (m: SessionMeta) => SessionMeta): Promise<void> {
    const now = this.clock.now();
    const next = await this.store.update<SessionMeta, SessionMeta>(`meta:${id}`, (cur) => {
      const v = fn(cur ?? { models: [], first_seen: now });
      return { value: v, result: v, ttlMs: STATE_TTL_MS };
    });
    this.metas.set(id, next);
    if (this.metas.size > 50_000) this.metas.delete(this.metas.keys().next().value as string);
  }

  /** Whether this input changes the session's meta (a new model, a new plugin version, a stale live mark). */
  private metaChanges(m: SessionMeta | undefined, input: JudgeInput, origin: { plugin_version?: string }): boolean {
    if (!m) return true;
    if (input.type === 'request' && !m.models.includes(input.record.model)) return true;
    const pv = origin.plugin_version;
    return (
      pv !== undefined && (m.plugin_version !== pv || this.clock.now() - (m.plugin_seen_at ?? 0) > PLUGIN_LIVE_MS / 4)
    );
  }

  /** Writes meta only when something in it changes, so most events write nothing. */
  private async touchMeta(id: string, input: JudgeInput, origin: { plugin_version?: string }): Promise<void> {
    const now = this.clock.now();
    const model = input.type === 'request' ? input.record.model : undefined;
    const pv = origin.plugin_version;
    await this.updateMeta(id, (cur) => ({
      ...cur,
      models: model !== undefined && !cur.models.includes(model) ? [...cur.models, model].slice(-8) : cur.models,
      ...(pv !== undefined ? { plugin_version: pv, plugin_seen_at: now } : {}),
    }));
  }

  async ids(): Promise<string[]> {
    return this.repo.ids();
  }

  /** The incident report for a session (deterministic, no content); led by a worse external verdict. */
  async report(id: string): Promise<string | undefined> {
    const s = await this.repo.get(id);
    if (!s) return undefined;
    const k = this.knobs();
    const root = await this.rootOf(id);
    const ext = await this.externalOf(id);
    const worse = ext && RANK[ext.level] > s.level ? ext : undefined;
    return buildReport(
      {
        session_id: id,
        ...(root !== id ? { child_of: s.parent ?? (await this.parentOf(id)) ?? root } : {}),
        ...(worse
          ? {
              external: {
                level: worse.level as 'stalling' | 'looping',
                reason: worse.reason,
                source: worse.source,
                agent: (await this.meta(id))?.agent,
              },
            }
          : {}),
      },
      s,
      k,
    );
  }

  async summary(id: string): Promise<string> {
    const s = await this.repo.get(id);
    return s ? summaryLine({ session_id: id }, s, this.knobs()) : id;
  }
}
