import { readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import { SeveritySchema } from './alert.ts';
import type { ChannelCommon } from './contracts.ts';
import { duration } from './duration.ts';
import { AppError, isAppError } from './errors.ts';
import { PACKAGE_ROOT } from './paths.ts';
import { loadPluginModules } from './plugins.ts';
import type { Registry } from './registry.ts';

export const DEFAULT_CONFIG_PATH = join(PACKAGE_ROOT, 'config/default.yaml');

// Sections owned by the core. Plugin sections (detectors, modes, channel options)
// are composed in from the registry by rootSchema().
export const ServerSchema = z
  .strictObject({
    host: z.string().min(1).default('127.0.0.1'),
    port: z.number().int().min(0).max(65535).default(7411),
    /** Env var holding the admin token; required on mutating admin routes and off loopback. */
    admin_token_env: z.string().min(1).default('VIGIL_ADMIN_TOKEN'),
    /**
     * Env var holding the ingestion token: what sensors and routers send (the opencode
     * plugin, the watchdog, a router's records and gate checks). When set (always off
     * loopback) their routes need it; it never opens an admin route.
     */
    ingest_token_env: z.string().min(1).default('VIGIL_INGEST_TOKEN'),
    body_limit_bytes: z.number().int().positive().default(262_144),
    /** A request (headers and body) not received in full by then is answered 408 and its connection closed. */
    request_timeout: duration().prefault('30s'),
    /** The headers of a request not received in full by then: 408 and closed (slow clients hold no socket). */
    headers_timeout: duration().prefault('10s'),
    /**
     * Host names accepted in the Host header besides loopback names (`localhost`,
     * `*.localhost`) and IP literals, which a DNS rebinding cannot use; `"*"` accepts any.
     */
    allowed_hosts: z
      .array(
        z
          .string()
          .regex(/^(\*|[A-Za-z0-9.-]{1,253})$/, 'a host name (no port), or "*"')
          .transform((h) => h.toLowerCase()),
      )
      .max(100)
      .default([]),
    /** Per client address on the ingestion routes: at most `max` requests per `window` (429 beyond). */
    rate_limit: z
      .strictObject({
        max: z.number().int().positive().default(3_000),
        window: duration().prefault('1m'),
      })
      .prefault({}),
    /**
     * Per client address: at most `max` sessions the service does not know yet per
     * `window` (429 beyond; inputs for known sessions go on), so one sender flooding new
     * ids cannot push the others' sessions out of detection.max_sessions.
     */
    new_sessions: z
      .strictObject({
        max: z.number().int().positive().default(1_000),
        window: duration().prefault('1m'),
      })
      .prefault({}),
    /** Event times more than this ahead of the service's clock are refused (naming the field). */
    max_clock_skew: duration().prefault('5m'),
    /** Event times older than this are refused (a replay belongs in `vigil replay`). */
    max_event_age: duration().prefault('30d'),
    /**
     * The local hook endpoint (POST /hooks/<sensor>): the agents' hooks post their raw
     * payloads there, to be reduced in memory and dropped. It answers loopback peers
     * only, and a service bound off loopback mounts it only when this is true (the
     * hooks of the agents on the service's own machine then still reach it).
     */
    hooks_off_loopback: z.boolean().default(false),
    /** The largest hook payload read (a Read of a big file carries it whole); past it the hook gets no opinion. */
    hook_body_limit_bytes: z.number().int().positive().default(33_554_432),
  })
  .refine((s) => s.headers_timeout <= s.request_timeout, {
    path: ['headers_timeout'],
    message: 'must be <= request_timeout',
  });

export const StoreSchema = z.strictObject({
  /** auto: Redis when a Redis URL is configured (redis_url or the redis_url_env variable), else memory. */
  backend: z.enum(['auto', 'memory', 'redis']).default('auto'),
  /** Env var holding the Redis URL (it may carry a password, so not in config by default). */
  redis_url_env: z.string().min(1).default('REDIS_URL'),
  redis_url: z.string().min(1).optional(),
  key_prefix: z
    .string()
    .regex(/^[A-Za-z0-9:_{}.-]+$/)
    .default('vigil'),
  /** A Redis command with no answer by then fails: ingestion answers 503, the gate falls back to gate.on_error. */
  timeout: duration().prefault('1s'),
});

export const GateSchema = z.strictObject({
  /** A gate check that takes longer is answered by on_error (a slow store must not stall the model path). */
  timeout: duration().prefault('500ms'),
  /** The answer when the check fails or times out: allow (fail open, the default) or refuse (429). */
  on_error: z.enum(['allow', 'refuse']).default('allow'),
});

export const DetectionSchema = z.strictObject({
  /** How often detectors that keep time judge with no input (restore stalls, pending breaker evidence); 0: never. */
  tick_interval: duration().prefault('15s'),
  /**
   * Sessions tracked at most (on Redis too); past it the least recently active are
   * forgotten on the tick, logged and counted.
   */
  max_sessions: z.number().int().min(100).max(10_000_000).default(100_000),
  /**
   * A tree with no sensor input (plugin event, request record, outside verdict) for this
   * long is shown as stale (an opencode server long gone): its plugin no longer "live",
   * and it leaves the refused list of the readouts (its state is kept; Resume still works).
   */
  stale_after: duration().prefault('30m'),
  /** A session with input within this is never evicted by max_sessions (the cap waits until it is idle). */
  active_window: duration().prefault('15m'),
});

const RateLimitSchema = z.strictObject({
  max: z.number().int().positive().default(10),
  window: duration().prefault('10m'),
});

export const ChannelCommonSchema = z.strictObject({
  name: z.string().regex(/^[a-z0-9][a-z0-9_-]{0,63}$/, 'lowercase letters, digits, - and _'),
  type: z.string().min(1),
  enabled: z.boolean().default(true),
  min_severity: SeveritySchema.default('warning'),
  resolve_messages: z.boolean().default(true),
  rate_limit: RateLimitSchema.prefault({}),
  quiet_window: duration().prefault('5m'),
});
const COMMON_KEYS = new Set(Object.keys(ChannelCommonSchema.shape));

export const NotificationsCoreSchema = {
  /** Abort a delivery attempt after this long (a timeout is retryable). */
  delivery_timeout: duration().prefault('10s'),
  /** Wait before the first retry; each later wait doubles (with jitter) up to retry_max_delay. */
  retry_delay: duration().prefault('2s'),
  /** Ceiling of one wait between attempts (a provider's Retry-After may ask for longer). */
  retry_max_delay: duration().prefault('5m'),
  /** Keep retrying a failed delivery until the alert is this old, then log it as failed. */
  max_age: duration().prefault('1h'),
  /** Give up after this many attempts as well (0: only max_age limits). */
  max_attempts: z.number().int().min(0).max(10_000).default(0),
  /** In-process queue: on a clean stop, wait this long for queued alerts to go out. */
  drain_timeout: duration().prefault('10s'),
  /**
   * In-process queue: the alerts still undelivered after the drain are written to this
   * file and delivered at the next start. null: `vigil serve` spools to
   * $XDG_STATE_HOME/vigil/alert-spool-<port>.json, an embedder does not; false: never.
   */
  spool_file: z
    .union([z.literal(false), z.string().min(1).max(4096)])
    .nullable()
    .default(null),
  /** Delivery log entries kept (successes and failures). */
  log_size: z.number().int().positive().default(500),
  /** Parallel deliveries per channel in each process; 1 keeps each incident's messages in order. */
  concurrency: z.number().int().positive().max(64).default(1),
  /** BullMQ job lock; a worker that dies mid-delivery loses its lock after this and the job runs again. */
  lock_duration: duration().prefault('30s'),
  /** How often BullMQ looks for jobs whose worker died. */
  stalled_interval: duration().prefault('30s'),
};

export type ChannelEntry = ChannelCommon & { options: Record<string, unknown> };

/** The `modes` section: `mode` (which registered mode responds) and each mode's options. */
export function modesSchema(registry: Registry) {
  const shape: Record<string, z.ZodType> = {};
  for (const m of registry.modes.values()) shape[m.type] = m.options.prefault({});
  const types = [...registry.modes.keys()];
  const mode = types.length
    ? z.enum(types as [string, ...string[]]).default(types.includes('warn') ? 'warn' : types[0])
    : z.string().optional();
  return z.strictObject({ mode, ...shape });
}

/** The sections an operator may change at run time (PATCH /knobs): every detector's and `modes`. */
export function knobSchemas(registry: Registry): Record<string, z.ZodType> {
  const out: Record<string, z.ZodType> = {};
  for (const d of registry.detectors.values()) out[d.section] = d.options;
  out.modes = modesSchema(registry);
  return out;
}

/** Builds the root schema from what is registered: one source of truth for config, knobs and the API. */
export function rootSchema(registry: Registry) {
  const channelEntry = z.unknown().transform((raw, ctx): ChannelEntry => {
    if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) {
      ctx.addIssue({ code: 'custom', message: 'expected a channel object' });
      return z.NEVER;
    }
    const entry = raw as Record<string, unknown>;
    if ('remove' in entry) {
      ctx.addIssue({
        code: 'custom',
        path: ['remove'],
        message: `no channel named ${JSON.stringify(entry.name)} below this file to remove`,
      });
      return z.NEVER;
    }
    const type = entry.type;
    if (typeof type !== 'string' || !registry.channels.has(type)) {
      const known = registry.channelTypes().join(', ');
      ctx.addIssue({
        code: 'custom',
        path: ['type'],
        message:
          typeof type === 'string'
            ? `unknown channel type "${type}" (known: ${known})`
            : `missing channel type (known: ${known})`,
      });
      return z.NEVER;
    }
    const common: Record<string, unknown> = {};
    const rest: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(entry)) (COMMON_KEYS.has(k) ? common : rest)[k] = v;
    const c = ChannelCommonSchema.safeParse(common);
    const plugin = registry.channels.get(type)!;
    const o = plugin.options.safeParse(rest);
    for (const r of [c, o]) {
      if (!r.success) for (const issue of r.error.issues) ctx.addIssue({ ...issue, path: issue.path } as never);
    }
    if (!c.success || !o.success) return z.NEVER;
    return { ...(c.data as ChannelCommon), options: o.data as Record<string, unknown> };
  });

  const sections: Record<string, z.ZodType> = {};
  for (const [name, schema] of registry.sections) sections[name] = schema.prefault({});
  for (const d of registry.detectors.values()) sections[d.section] = d.options.prefault({});

  return z
    .strictObject({
      /** Plugin modules (paths relative to the config file, or package names) loaded before validation. */
      plugins: z.array(z.string().min(1).max(1024)).default([]),
      server: ServerSchema.prefault({}),
      store: StoreSchema.prefault({}),
      notifications: z
        .strictObject({
          ...NotificationsCoreSchema,
          channels: z.array(channelEntry).default([]),
        })
        .prefault({}),
      detection: DetectionSchema.prefault({}),
      gate: GateSchema.prefault({}),
      modes: modesSchema(registry).prefault({}),
      ...sections,
    })
    .superRefine((cfg, ctx) => {
      const seen = new Set<string>();
      cfg.notifications.channels.forEach((ch, i) => {
        if (seen.has(ch.name)) {
          ctx.addIssue({
            code: 'custom',
            path: ['notifications', 'channels', i, 'name'],
            message: `duplicate channel name "${ch.name}"`,
          });
        }
        seen.add(ch.name);
      });
    });
}

export type VigilConfig = z.output<ReturnType<typeof rootSchema>> & Record<string, any>;

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

// ---------------------------------------------------------------------------
// redaction

const SECRET_KEY = /(secret|token|password|passwd|api[_-]?key|routing[_-]?key|authorization|auth)$/i;
const REDACTED = '[REDACTED]';

/**
 * A URL fit to print: user and password, and every query value, masked (query values
 * carry tokens more often than not). Anything that is not a URL comes back unchanged.
 */
export function redactUrl(v: string): string {
  if (!/^[a-z][a-z0-9+.-]*:\/\//i.test(v)) return v;
  let out = v.replace(/^([a-z][a-z0-9+.-]*:\/\/)[^/?#\s]*@/i, `$1${REDACTED}@`);
  out = out.replace(/([?&][^=&#\s]+)=[^&#\s]*/g, `$1=${REDACTED}`);
  return out;
}

/**
 * The effective config for display: values under secret-looking keys, every header
 * value (`headers`), credentials and query values in URLs are masked. Names of env
 * variables (`*_env` options, `headers_env` values) are kept: they are not secrets.
 */
export function redactConfig(cfg: unknown): unknown {
  const walk = (v: unknown, key: string, inEnvMap: boolean, inHeaders: boolean): unknown => {
    if (Array.isArray(v)) return v.map((x) => walk(x, key, inEnvMap, inHeaders));
    if (v && typeof v === 'object') {
      const o: Record<string, unknown> = {};
      for (const [k, x] of Object.entries(v)) o[k] = walk(x, k, key.endsWith('_env'), key === 'headers');
      return o;
    }
    if (typeof v !== 'string') return v;
    if (key.endsWith('_env') || inEnvMap) return v;
    if (inHeaders || SECRET_KEY.test(key)) return REDACTED;
    return redactUrl(v);
  };
  return walk(cfg, '', false, false);
}

/** A value at a config path, masked as redactConfig would mask it there. */
function redactAt(path: readonly string[], v: unknown): unknown {
  let wrapped: unknown = v;
  for (let i = path.length - 1; i >= 0; i--) wrapped = { [path[i]]: wrapped };
  let out = redactConfig(wrapped);
  for (const k of path) out = (out as Record<string, unknown>)[k];
  return out;
}

/** Flattens channel entries back to the shape an operator writes (for display). */
export function displayConfig(cfg: VigilConfig): unknown {
  const channels = cfg.notifications.channels.map(({ options, ...common }) => ({ ...common, ...options }));
  return redactConfig({ ...cfg, notifications: { ...cfg.notifications, channels } });
}

function deepFreeze<T>(o: T): T {
  if (o && typeof o === 'object' && !Object.isFrozen(o)) {
    Object.freeze(o);
    for (const v of Object.values(o)) deepFreeze(v);
  }
  return o;
}
