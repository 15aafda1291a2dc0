import type { z } from 'zod';
import { ConfigError, configLayers, type Explained, explain, formatIssues, mergeConfig } from './config.ts';
import { type ChannelEntry, knobSchemas, type VigilConfig } from './config-schema.ts';
import { AppError } from './errors.ts';
import type { Logger } from './logger.ts';
import type { Registry } from './registry.ts';
import { keys } from './store/keys.ts';
import type { Store } from './store/store.ts';

const KEY = keys.knobs;

type Obj = Record<string, unknown>;

const isObj = (v: unknown): v is Obj => Boolean(v) && typeof v === 'object' && !Array.isArray(v);

/** `saved` without the value at `path`; emptied objects go too. */
function without(saved: Obj, path: readonly string[]): Obj {
  if (!path.length) return {};
  const [head, ...rest] = path;
  if (!(head in saved)) return saved;
  const out = { ...saved };
  if (!rest.length || !isObj(out[head])) delete out[head];
  else {
    const inner = without(out[head] as Obj, rest);
    if (Object.keys(inner).length) out[head] = inner;
    else delete out[head];
  }
  return out;
}

/**
 * The live tuning knobs: every detector section (`progress`, `breaker`, ...) and the
 * `modes` section. They start from config and are overlaid by what an operator PATCHed.
 * That runtime overlay is saved in the store (key `knobs`), so it outlives a restart
 * and, on Redis, is the same for every instance: each one re-reads it on the kernel's
 * tick and before answering GET /knobs. Validated by the config file's own schemas.
 * Readers call get() per use, so a change is effective at once.
 */
export class Knobs {
  private current: Obj;
  /** The sections as config gives them, before the runtime overlay. */
  private readonly base: Obj;
  /** The runtime overlay in effect, and its JSON as last read (to notice another instance's change). */
  private saved: Obj = {};
  private savedJson = '{}';
  private readonly schemas: Record<string, z.ZodType>;
  private readonly listeners: ((k: Obj) => void)[] = [];

  constructor(
    registry: Registry,
    private readonly config: VigilConfig,
    private readonly store: Store,
    private readonly logger: Logger,
  ) {
    this.schemas = knobSchemas(registry);
    this.base = {};
    for (const s of Object.keys(this.schemas)) this.base[s] = structuredClone(config[s]);
    this.current = this.base;
  }

  sections(): string[] {
    return Object.keys(this.schemas);
  }

  get<T>(section: string): T {
    return this.current[section] as T;
  }

  all(): Obj {
    return this.current;
  }

  /** The runtime overlay in effect (what PATCH /knobs saved). */
  runtime(): Obj {
    return this.saved;
  }

  onChange(fn: (k: Obj) => void): void {
    this.listeners.push(fn);
  }

  /** Every knob with its value and where it comes from (default, file, overlay or runtime). */
  explain(): Explained[] {
    return explain(
      this.current,
      [...configLayers(this.config), { source: 'runtime', raw: this.saved }],
      this.sections(),
    );
  }

  /** The knobs that are not at their default, with their source: what the startup log and /health show. */
  overridden(): Explained[] {
    return this.explain().filter((e) => e.source !== 'default');
  }

  /** Applies the saved overlay at start. One that no longer validates is ignored, loudly. */
  async load(): Promise<void> {
    await this.refresh(true);
  }

  /**
   * Re-reads the saved overlay and applies it when it changed (another instance PATCHed
   * or reset). Returns whether anything changed. A store error keeps what is in effect.
   */
  async refresh(force = false): Promise<boolean> {
    const saved = (await this.store.get<Obj>(KEY)) ?? {};
    const json = JSON.stringify(saved);
    if (!force && json === this.savedJson) return false;
    this.savedJson = json;
    try {
      this.apply(saved, this.validate(mergeConfig(this.base, saved) as Obj));
    } catch (e) {
      this.logger.warn(
        { problems: (e as ConfigError).problems },
        'saved runtime knobs no longer valid; using config (reset them with DELETE /knobs)',
      );
      return false;
    }
    return true;
  }

  /**
   * Merges a partial update (objects key by key, lists replace), validates every
   * section, saves the operator's overlay and applies it. Throws ConfigError naming
   * each bad path; nothing changes then.
   */
  async patch(body: unknown): Promise<Obj> {
    if (!isObj(body)) throw new ConfigError(['(root): expected an object of knob sections']);
    const unknown = Object.keys(body).filter((k) => !(k in this.schemas));
    if (unknown.length) {
      throw new ConfigError(unknown.map((k) => `${k}: unknown knob section (known: ${this.sections().join(', ')})`));
    }
    const next = this.validate(mergeConfig(this.current, body) as Obj);
    const saved = await this.store.update<Obj, Obj>(KEY, (cur) => {
      const v = mergeConfig(cur ?? {}, body) as Obj;
      return { value: v, result: v };
    });
    this.savedJson = JSON.stringify(saved);
    this.apply(saved, next);
    return next;
  }

  /**
   * Drops runtime values so config applies again: the given dotted paths (a knob such as
   * `modes.mode`, or a whole section such as `progress`), or every one when none is given.
   * Throws ConfigError for an unknown path, or when what is left would not validate.
   */
  async reset(paths: readonly string[] = []): Promise<{ reset: string[]; knobs: Obj }> {
    const bad = paths.filter((p) => !this.knownPath(p.split('.')));
    if (bad.length) throw new ConfigError(bad.map((p) => `${p}: not a knob (sections: ${this.sections().join(', ')})`));
    const cur = (await this.store.get<Obj>(KEY)) ?? {};
    let next: Obj = {};
    if (paths.length) {
      next = cur;
      for (const p of paths) next = without(next, p.split('.'));
    }
    const knobs = this.validate(mergeConfig(this.base, next) as Obj);
    const was = this.explain()
      .filter((e) => e.source === 'runtime')
      .map((e) => e.path);
    if (Object.keys(next).length) await this.store.set(KEY, next);
    else await this.store.del(KEY);
    this.savedJson = JSON.stringify(next);
    this.apply(next, knobs);
    const now = new Set(
      this.explain()
        .filter((e) => e.source === 'runtime')
        .map((e) => e.path),
    );
    return { reset: was.filter((p) => !now.has(p)), knobs };
  }

  private knownPath(path: string[]): boolean {
    let v: unknown = this.current;
    for (const k of path) {
      if (!isObj(v) || !(k in v)) return false;
      v = v[k];
    }
    return path.length > 0;
  }

  private apply(saved: Obj, next: Obj): void {
    this.saved = saved;
    this.current = next;
    for (const l of this.listeners) l(next);
  }

  private validate(raw: Obj): Obj {
    const out: Obj = {};
    const problems: string[] = [];
    for (const [section, schema] of Object.entries(this.schemas)) {
      const r = schema.safeParse(raw[section] ?? {});
      if (r.success) out[section] = r.data;
      else problems.push(...formatIssues(r.error.issues.map((i) => ({ ...i, path: [section, ...i.path] }))));
    }
    if (problems.length) throw new ConfigError(problems);
    return out;
  }
}

/** What PATCH /channels/:name may change at run time. */
export type ChannelToggle = Partial<Pick<ChannelEntry, 'enabled' | 'min_severity' | 'resolve_messages'>>;
const TOGGLE_KEYS = ['enabled', 'min_severity', 'resolve_messages'] as const;

/**
 * Runtime channel toggles (PATCH /channels/:name), saved in the store (key
 * `channel-toggles`) like the knobs: kept across a restart, and on Redis seen by every
 * instance on the tick. `apply` sets a channel's routing fields (the notifier's
 * setChannel). Toggles of a channel no longer configured are ignored.
 */
export class ChannelToggles {
  private last: Record<string, ChannelToggle> = {};

  constructor(
    private readonly entries: readonly ChannelEntry[],
    private readonly store: Store,
    private readonly applyTo: (name: string, t: Required<ChannelToggle>) => void,
  ) {}

  /** The saved toggles in effect, by channel. */
  saved(): Record<string, ChannelToggle> {
    return this.last;
  }

  /** Applies the saved toggles of every channel whose toggle changed since the last read. */
  async refresh(): Promise<string[]> {
    const all = (await this.store.get<Record<string, ChannelToggle>>(keys.channelToggles)) ?? {};
    const changed: string[] = [];
    for (const e of this.entries) {
      if (JSON.stringify(all[e.name] ?? {}) === JSON.stringify(this.last[e.name] ?? {})) continue;
      this.applyTo(e.name, this.effective(e, all[e.name]));
      changed.push(e.name);
    }
    this.last = all;
    return changed;
  }

  /** Saves and applies a toggle; CHANNEL_NOT_FOUND for a channel not configured. */
  async set(name: string, patch: ChannelToggle): Promise<Required<ChannelToggle>> {
    const e = this.entries.find((x) => x.name === name);
    const clean: ChannelToggle = {};
    for (const k of TOGGLE_KEYS) if (patch[k] !== undefined) (clean as Obj)[k] = patch[k];
    if (!e) throw new AppError('CHANNEL_NOT_FOUND', `no channel named "${name}"`);
    const all = await this.store.update<Record<string, ChannelToggle>, Record<string, ChannelToggle>>(
      keys.channelToggles,
      (cur) => {
        const v = { ...(cur ?? {}), [name]: { ...(cur?.[name] ?? {}), ...clean } };
        return { value: v, result: v };
      },
    );
    this.last = all;
    const eff = this.effective(e, all[name]);
    this.applyTo(name, eff);
    return eff;
  }

  /** Back to the config's values for one channel, or for all. */
  async reset(name?: string): Promise<void> {
    const all = name
      ? await this.store.update<Record<string, ChannelToggle>, Record<string, ChannelToggle>>(
          keys.channelToggles,
          (cur) => {
            const v = { ...(cur ?? {}) };
            delete v[name];
            return { value: v, result: v };
          },
        )
      : {};
    if (!name) await this.store.del(keys.channelToggles);
    for (const e of this.entries) if (!name || e.name === name) this.applyTo(e.name, this.effective(e, undefined));
    this.last = all;
  }

  private effective(e: ChannelEntry, t: ChannelToggle | undefined): Required<ChannelToggle> {
    return {
      enabled: t?.enabled ?? e.enabled,
      min_severity: t?.min_severity ?? e.min_severity,
      resolve_messages: t?.resolve_messages ?? e.resolve_messages,
    };
  }
}
