import { readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import { rootSchema, type VigilConfig } from './config-schema.ts';
import { AppError, isAppError } from './errors.ts';
import { PACKAGE_ROOT } from './paths.ts';
import { loadPluginModules } from './plugins.ts';
import { redactAt } from './redact.ts';
import type { Registry } from './registry.ts';

export const DEFAULT_CONFIG_PATH = join(PACKAGE_ROOT, 'config/default.yaml');

/** `a.b[1].c` from a zod path. */
export function formatPath(path: readonly PropertyKey[]): string {
  let out = '';
  for (const p of path) out += typeof p === 'number' ? `[${p}]` : out ? `.${String(p)}` : String(p);
  return out || '(root)';
}

export function formatIssues(issues: readonly z.core.$ZodIssue[]): string[] {
  const out: string[] = [];
  for (const i of issues) {
    if (i.code === 'unrecognized_keys') {
      for (const k of i.keys) out.push(`${formatPath([...i.path, k])}: unknown key`);
    } else if (i.code === 'invalid_union' && 'errors' in i && i.errors.length) {
      out.push(`${formatPath(i.path)}: ${i.message}`);
    } else {
      out.push(`${formatPath(i.path)}: ${i.message}`);
    }
  }
  return out;
}

/** Deep merge for the overlay: objects merge key by key, arrays and scalars replace. */
export function mergeConfig(base: unknown, overlay: unknown): unknown {
  if (overlay === undefined) return base;
  if (isPlainObject(base) && isPlainObject(overlay)) {
    const out: Record<string, unknown> = { ...base };
    for (const [k, v] of Object.entries(overlay)) out[k] = mergeConfig(out[k], v);
    return out;
  }
  return overlay;
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return Boolean(v) && typeof v === 'object' && !Array.isArray(v);
}

/**
 * How a config FILE merges into what is below it: as mergeConfig, except that
 * `notifications.channels` merges by `name`. An entry with a name already there merges
 * into it key by key, a new name is appended, `{name, remove: true}` drops that channel,
 * and an empty list clears the channels. So a file that adds a webhook keeps the default
 * desktop channel. (An embedder's overlay object states final lists: they replace.)
 */
export function mergeConfigFile(base: unknown, file: unknown): unknown {
  const merged = mergeConfig(base, file);
  const channels = (v: unknown) =>
    isPlainObject(v) && isPlainObject(v.notifications) ? v.notifications.channels : undefined;
  const below = channels(base);
  const over = channels(file);
  if (!Array.isArray(below) || !Array.isArray(over) || over.length === 0) return merged;
  const out: unknown[] = below.map((e) => e);
  for (const entry of over) {
    const name = isPlainObject(entry) ? entry.name : undefined;
    const at = typeof name === 'string' ? out.findIndex((e) => isPlainObject(e) && e.name === name) : -1;
    if (isPlainObject(entry) && entry.remove === true && at >= 0) out.splice(at, 1);
    else if (at >= 0 && isPlainObject(entry)) out[at] = mergeConfig(out[at], entry);
    else out.push(entry); // a `remove` of an unknown name stays, and validation names it
  }
  const m = merged as Record<string, Record<string, unknown>>;
  return { ...m, notifications: { ...m.notifications, channels: out } };
}

function readYaml(path: string, what: string): unknown {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (e) {
    throw new AppError('CONFIG_INVALID', `${what} ${path}: cannot read (${(e as NodeJS.ErrnoException).code ?? e})`);
  }
  try {
    return parseYaml(text) ?? {};
  } catch (e) {
    throw new AppError('CONFIG_INVALID', `${what} ${path}: not valid YAML: ${(e as Error).message.split('\n')[0]}`);
  }
}

export interface LoadOptions {
  registry: Registry;
  /** Overlay file; defaults to $VIGIL_CONFIG when set. */
  file?: string;
  /** An overlay object (embedding, tests); applied after the file. */
  overlay?: unknown;
  env?: NodeJS.ProcessEnv;
  /** Skip config/default.yaml (the schema defaults still apply). */
  noDefaults?: boolean;
  /** Layers applied after the file and before the overlay object (`vigil serve`: HOST, PORT, --host, --port). */
  extra?: Layer[];
}

export class ConfigError extends AppError {
  constructor(readonly problems: string[]) {
    super('CONFIG_INVALID', `invalid config:\n  ${problems.join('\n  ')}`);
  }
}

/** The top-level sections a registry's schema knows (core sections, extra sections, detectors' sections). */
export function knownSections(registry: Registry): Set<string> {
  return new Set(Object.keys(rootSchema(registry).shape));
}

/**
 * default.yaml, the overlay file and the overlay object, merged, not yet validated.
 * With a registry, the defaults file's sections that nothing registered knows are left
 * out (a detector removed from the built-in list takes its section with it); the
 * operator's file and overlay stay strict.
 */
export function readRawConfig(opts: Omit<LoadOptions, 'registry'> & { registry?: Registry }): {
  raw: unknown;
  file?: string;
  layers: Layer[];
} {
  const env = opts.env ?? process.env;
  let defaults: unknown = opts.noDefaults ? {} : readYaml(DEFAULT_CONFIG_PATH, 'default config');
  if (opts.registry && defaults && typeof defaults === 'object') {
    const known = knownSections(opts.registry);
    defaults = Object.fromEntries(Object.entries(defaults as Record<string, unknown>).filter(([k]) => known.has(k)));
  }
  const layers: Layer[] = [{ source: 'default', raw: defaults }];
  let raw = defaults;
  const file = opts.file ?? env.VIGIL_CONFIG;
  if (file) {
    const fileRaw = readYaml(file, 'config');
    layers.push({ source: 'file', raw: fileRaw });
    raw = mergeConfigFile(raw, fileRaw);
  }
  for (const l of opts.extra ?? []) {
    layers.push(l);
    raw = mergeConfig(raw, l.raw);
  }
  if (opts.overlay !== undefined) {
    layers.push({ source: 'overlay', raw: opts.overlay });
    raw = mergeConfig(raw, opts.overlay);
  }
  return { raw, layers, ...(file ? { file } : {}) };
}

/**
 * Loads config/default.yaml, the overlay file and object, validates the whole tree
 * strictly, and checks that every secret an enabled channel names is set. Nothing is
 * returned half-valid: any problem throws ConfigError listing every path at fault.
 * Plugin modules under `plugins:` are not imported here: see loadConfigWithPlugins.
 */
export function loadConfig(opts: LoadOptions): Readonly<VigilConfig> {
  const { raw, layers } = readRawConfig(opts);
  return validateLayers(opts.registry, raw, layers, opts.env ?? process.env);
}

function validateLayers(registry: Registry, raw: unknown, layers: Layer[], env: NodeJS.ProcessEnv): VigilConfig {
  try {
    return withLayers(validateConfig(registry, raw, env), layers);
  } catch (e) {
    if (e instanceof ConfigError) throw new ConfigError(e.problems.map((p) => channelPathAsWritten(p, raw, layers)));
    throw e;
  }
}

/**
 * A file's channels merge by name, so an entry's index in the merged list may not be
 * the one its author wrote: a problem names the index in the layer that wrote it.
 */
function channelPathAsWritten(problem: string, raw: unknown, layers: readonly Layer[]): string {
  const m = /^notifications\.channels\[(\d+)\]/.exec(problem);
  if (!m) return problem;
  const merged = rawAt(raw, ['notifications', 'channels']).value;
  const entry = Array.isArray(merged) ? merged[Number(m[1])] : undefined;
  const name = isPlainObject(entry) ? entry.name : undefined;
  if (typeof name !== 'string') return problem;
  for (let i = layers.length - 1; i >= 0; i--) {
    const list = rawAt(layers[i].raw, ['notifications', 'channels']).value;
    if (!Array.isArray(list)) continue;
    const i0 = Number(m[1]);
    const same = isPlainObject(list[i0]) && list[i0].name === name;
    const j = same ? i0 : list.findIndex((e) => isPlainObject(e) && e.name === name);
    if (j >= 0) return `notifications.channels[${j}]${problem.slice(m[0].length)}`;
  }
  return problem;
}

const PluginList = z.array(z.string().min(1).max(1024)).max(100);

/**
 * As loadConfig, after importing the modules named under `plugins:` (paths relative to
 * the config file that names them) and registering their plugins, so their options are
 * validated too.
 */
export async function loadConfigWithPlugins(opts: LoadOptions): Promise<Readonly<VigilConfig>> {
  const { raw: first, file } = readRawConfig({ ...opts, registry: undefined, noDefaults: true });
  const raw = first;
  const specs = (raw as { plugins?: unknown } | null)?.plugins;
  if (specs !== undefined) {
    const r = PluginList.safeParse(specs);
    if (!r.success)
      throw new ConfigError(formatIssues(r.error.issues.map((i) => ({ ...i, path: ['plugins', ...i.path] }))));
    const fromOverlay = (opts.overlay as { plugins?: unknown } | undefined)?.plugins !== undefined;
    const base = !fromOverlay && file ? dirname(resolve(file)) : process.cwd();
    try {
      await loadPluginModules(r.data, base, opts.registry);
    } catch (e) {
      if (isAppError(e)) throw new ConfigError([e.message]);
      throw e;
    }
  }
  // With the plugins registered, the defaults file can be read for what exists now.
  const { raw: all, layers } = readRawConfig(opts);
  return validateLayers(opts.registry, all, layers, opts.env ?? process.env);
}

export function validateConfig(registry: Registry, raw: unknown, env: NodeJS.ProcessEnv = process.env): VigilConfig {
  const r = rootSchema(registry).safeParse(raw ?? {});
  if (!r.success) throw new ConfigError(formatIssues(r.error.issues));
  const cfg = r.data as VigilConfig;
  const missing: string[] = [];
  cfg.notifications.channels.forEach((ch, i) => {
    if (!ch.enabled) return;
    const plugin = registry.channel(ch.type);
    for (const { key, name } of secretRefs(plugin, ch.options)) {
      if (!env[name]) {
        missing.push(
          `notifications.channels[${i}].${key}: environment variable ${name} is not set (channel "${ch.name}")`,
        );
      }
    }
  });
  if (missing.length) throw new ConfigError(missing);
  return deepFreeze(cfg);
}

/** The env var names an entry refers to: every `*_env` option, plus what the plugin declares. */
export function secretRefs(
  plugin: { secrets?(o: any): string[] },
  options: Record<string, unknown>,
): { key: string; name: string }[] {
  const out: { key: string; name: string }[] = [];
  for (const [k, v] of Object.entries(options))
    if (k.endsWith('_env') && typeof v === 'string') out.push({ key: k, name: v });
  for (const name of plugin.secrets?.(options) ?? [])
    if (!out.some((o) => o.name === name)) out.push({ key: 'secrets', name });
  return out;
}

// ---------------------------------------------------------------------------
// where each value comes from

/**
 * Where a value was set: config/default.yaml (or a schema default), the config file,
 * the environment (HOST, PORT), a command-line flag, an embedder's overlay object, or at
 * run time (PATCH /knobs, saved in the store).
 */
export type Source = 'default' | 'file' | 'env' | 'flag' | 'overlay' | 'runtime';

/** One raw (unvalidated) layer of the config, lowest first. */
export interface Layer {
  source: Source;
  raw: unknown;
}

const LAYERS = new WeakMap<object, Layer[]>();

function withLayers<T extends object>(cfg: T, layers: Layer[]): T {
  LAYERS.set(cfg, layers);
  return cfg;
}

/** The raw layers a loaded config was merged from (none for a config built by hand). */
export function configLayers(cfg: object): readonly Layer[] {
  return LAYERS.get(cfg) ?? [];
}

/** The effective value at a dotted path, its source, and what the layers below it said. */
export interface Explained {
  path: string;
  value: unknown;
  source: Source;
  /** Raw values of lower layers that this one overrides (durations as written). */
  overrides?: Partial<Record<Source, unknown>>;
}

function rawAt(raw: unknown, path: readonly string[]): { has: boolean; value?: unknown } {
  let v = raw;
  for (const k of path) {
    if (!isPlainObject(v) || !(k in v)) return { has: false };
    v = v[k];
  }
  return { has: true, value: v };
}

/**
 * Every leaf of `sections` in `effective` (objects are walked, lists and scalars are
 * leaves) with the highest layer that set it. A leaf no layer set is a `default`.
 */
export function explain(
  effective: Record<string, unknown>,
  layers: readonly Layer[],
  sections: readonly string[],
): Explained[] {
  const out: Explained[] = [];
  const walk = (v: unknown, path: string[]) => {
    if (isPlainObject(v) && Object.keys(v).length) {
      for (const [k, x] of Object.entries(v)) walk(x, [...path, k]);
      return;
    }
    let source: Source = 'default';
    for (const l of layers) if (rawAt(l.raw, path).has) source = l.source;
    const overrides: Partial<Record<Source, unknown>> = {};
    for (const l of layers) {
      const r = rawAt(l.raw, path);
      if (r.has && l.source !== source) overrides[l.source] = r.value;
    }
    // Shown in logs, /health and config check: masked like the config itself.
    const show = (x: unknown) => redactAt(path, x);
    for (const k of Object.keys(overrides) as Source[]) overrides[k] = show(overrides[k]);
    out.push({ path: path.join('.'), value: show(v), source, ...(Object.keys(overrides).length ? { overrides } : {}) });
  };
  for (const s of sections) if (s in effective) walk(effective[s], [s]);
  return out;
}

/** Per channel name, the highest layer whose channel list names it. */
export function channelSources(cfg: VigilConfig): Record<string, Source> {
  const out: Record<string, Source> = {};
  for (const ch of cfg.notifications.channels) {
    let source: Source = 'default';
    for (const l of configLayers(cfg)) {
      const list = rawAt(l.raw, ['notifications', 'channels']);
      if (!list.has || !Array.isArray(list.value)) continue;
      if (l.source === 'overlay' || list.value.some((e) => isPlainObject(e) && e.name === ch.name)) source = l.source;
    }
    out[ch.name] = source;
  }
  return out;
}

function deepFreeze<T>(o: T): T {
  if (o && typeof o === 'object' && !Object.isFrozen(o)) {
    Object.freeze(o);
    for (const v of Object.values(o)) deepFreeze(v);
  }
  return o;
}
