import 'reflect-metadata';
import { EventEmitter } from 'node:events';
import { type DependencyContainer, container as rootContainer } from 'tsyringe';
import type { z } from 'zod';
import type { AlertInput } from './alert.ts';
import { SessionBindings } from './binding.ts';
import { type Clock, systemClock } from './clock.ts';
import {
  ConfigError,
  channelSources,
  configLayers,
  type Explained,
  explain,
  formatIssues,
  type Layer,
  loadConfigWithPlugins,
  type Source,
} from './config.ts';
import { type ChannelEntry, type VigilConfig } from './config-schema.ts';
import type { Channel, Detector, Mode, ModeInfo, Origin, Transition } from './contracts.ts';
import { DirectiveQueue } from './directives.ts';
import { Dispatch, type Driven } from './dispatch.ts';
import { Engine, type InputResult } from './engine.ts';
import { AppError } from './errors.ts';
import { Gate } from './gate.ts';
import { ChannelToggles, Knobs } from './knobs.ts';
import { type Logger, registerSecret, silentLogger } from './logger.ts';
import { Lru } from './lru.ts';
import { Metrics } from './metrics.ts';
import { BullQueue } from './notifier/bullmq-queue.ts';
import { Deliverer } from './notifier/deliverer.ts';
import { DeliveryLog, type DeliveryRecord } from './notifier/delivery-log.ts';
import { MemoryQueue } from './notifier/memory-queue.ts';
import { Notifier } from './notifier/notifier.ts';
import type { AlertQueue } from './notifier/queue.ts';
import { Readouts } from './readouts.ts';
import { redactUrl } from './redact.ts';
import type { Registry } from './registry.ts';
import { gapLine, gapsOf, sensorNameOf } from './sensor.ts';
import { keys } from './store/keys.ts';
import { MemoryStore } from './store/memory.ts';
import { RedisStore } from './store/redis.ts';
import type { Store } from './store/store.ts';
import { TOKENS } from './tokens.ts';
import { SessionTree } from './tree.ts';
import { type UnitBackend, UnitStore, Units } from './unit.ts';
import {
  type DirectiveSpec,
  type GateAnswer,
  type GateQuery,
  type ProgressEvent,
  type ProgressEventInput,
  ProgressEventSchema,
  type RequestRecordInput,
  RequestRecordSchema,
} from './wire.ts';

function parseAll<S extends z.ZodType>(schema: S, input: unknown, what: string): z.output<S>[] {
  const list = Array.isArray(input) ? input : [input];
  return list.map((x, i) => {
    const r = schema.safeParse(x);
    if (!r.success) {
      const where = Array.isArray(input) ? `${what}[${i}]` : what;
      throw new AppError('BAD_INPUT', `${where}: ${formatIssues(r.error.issues).join('; ')}`);
    }
    return r.data;
  });
}

export interface KernelOptions {
  /** What exists: channel, detector and mode types (the composition root's list plus any others). */
  registry: Registry;
  /** An already validated config; otherwise it is loaded (default.yaml + file + overlay, plugins included). */
  config?: VigilConfig;
  configFile?: string;
  /** Layers between the file and the overlay object (`vigil serve`: HOST, PORT and its flags). */
  extra?: Layer[];
  overlay?: unknown;
  env?: NodeJS.ProcessEnv;
  logger?: Logger;
  clock?: Clock;
  /** Consume the delivery queue in this process (default true). */
  worker?: boolean;
  /**
   * Memory backend: the spool file used when `notifications.spool_file` is null (the
   * service names one per port; an embedder gets none unless its config names one).
   */
  defaultSpoolFile?: (config: VigilConfig) => string | undefined;
}

/** The Redis URL when the config selects Redis (explicitly or by `auto` with a URL set). */
export function redisUrlOf(cfg: VigilConfig, env: NodeJS.ProcessEnv): string | undefined {
  const url = cfg.store.redis_url ?? env[cfg.store.redis_url_env];
  if (cfg.store.backend === 'memory') return undefined;
  if (cfg.store.backend === 'redis' && !url) {
    throw new AppError(
      'CONFIG_INVALID',
      `store.backend: redis needs store.redis_url or the ${cfg.store.redis_url_env} environment variable`,
    );
  }
  return url;
}

/**
 * One Vigil instance: a child container holding logger, clock, store, queue, config,
 * knobs, the session tree and the notifier, from which every plugin instance is built;
 * the engine that drives the detectors config enables. It names no plugin.
 */
export class Vigil {
  readonly container: DependencyContainer;
  readonly channels = new Map<string, Channel>();
  readonly detectors = new Map<string, Detector>();
  readonly notifier: Notifier;
  readonly deliveryLog: DeliveryLog;
  readonly deliverer: Deliverer;
  readonly knobs: Knobs;
  /** Runtime channel toggles, saved in the store and applied through the notifier. */
  readonly toggles: ChannelToggles;
  readonly metrics: Metrics;
  readonly tree: SessionTree;
  /** Which sensor key each session is bound to (the sensor routes check it). */
  readonly bindings: SessionBindings;
  readonly engine: Engine;
  /** transition, tree, delivery, knobs, channel, heartbeat: what the admin page streams. */
  readonly events = new EventEmitter();
  /** Watchdog heartbeat and plugin builds seen, for /health. */
  readonly health = {
    // The outside watcher's latest tick as it reported it (its shape is its own: the route validates it).
    watchdog: undefined as undefined | { last_tick_at: number; result: { status: string }; received_at: number },
    plugins: new Lru<string, number>(50),
  };
  private started = false;
  private timer: NodeJS.Timeout | undefined;
  private modeCache: Mode | undefined;

  /** Every store access goes through it: inside a unit of work it buffers for the commit. */
  readonly store: UnitStore;
  readonly units: Units;

  constructor(
    readonly registry: Registry,
    readonly config: VigilConfig,
    backend: Store & UnitBackend,
    readonly queue: AlertQueue,
    readonly logger: Logger,
    readonly clock: Clock,
    readonly env: NodeJS.ProcessEnv,
    private readonly runWorker: boolean,
  ) {
    this.events.setMaxListeners(100);
    const store = backend instanceof UnitStore ? backend : new UnitStore(backend);
    this.store = store;
    const c = rootContainer.createChildContainer();
    /** A kernel part resolved from the container (its own logger), then registered under its token. */
    const build = <T>(token: symbol, cls: new (...args: never[]) => T, part: string): T => {
      const child = c.createChildContainer();
      child.register(TOKENS.Logger, { useValue: logger.child({ part }) });
      const made = child.resolve<T>(cls as never);
      c.register(token, { useValue: made });
      return made;
    };
    c.register(TOKENS.Logger, { useValue: logger });
    c.register(TOKENS.Clock, { useValue: clock });
    c.register(TOKENS.Store, { useValue: store });
    c.register(TOKENS.Queue, { useValue: queue });
    c.register(TOKENS.Config, { useValue: config });
    c.register(TOKENS.Registry, { useValue: registry });
    c.register(TOKENS.Env, { useValue: env });
    c.register(TOKENS.Events, { useValue: this.events });
    this.container = c;
    this.units = build(TOKENS.Units, Units, 'units');
    this.knobs = new Knobs(registry, config, store, logger.child({ part: 'knobs' }));
    this.knobs.onChange((k) => {
      this.modeCache = undefined;
      this.events.emit('knobs', k);
    });
    c.register(TOKENS.Knobs, { useValue: this.knobs });
    this.metrics = new Metrics(
      () => queue.depth(),
      () => queue.oldestAt(),
      () => clock.now(),
      {
        up: () => store.ping(),
        // another instance may have taken the heartbeat: the store has the last one
        watchdog: async () =>
          (this.health.watchdog ?? (await store.get<{ last_tick_at: number }>(keys.watchdog)))?.last_tick_at,
      },
    );
    c.register(TOKENS.Metrics, { useValue: this.metrics });
    this.tree = new SessionTree(store, clock);
    this.bindings = new SessionBindings(store, clock);
    c.register(TOKENS.Tree, { useValue: this.tree });

    this.deliveryLog = new DeliveryLog(store, config.notifications.log_size, this.events);
    c.register(TOKENS.DeliveryLog, { useValue: this.deliveryLog });
    for (const entry of config.notifications.channels as ChannelEntry[]) {
      const plugin = registry.channel(entry.type);
      const child = c.createChildContainer();
      child.register(TOKENS.Logger, { useValue: logger.child({ channel: entry.name, type: entry.type }) });
      try {
        this.channels.set(entry.name, plugin.create(child, entry.options, entry.name));
      } catch (e) {
        throw new AppError('PLUGIN_CREATE_FAILED', `notifications.channels "${entry.name}": ${(e as Error).message}`, {
          cause: e,
        });
      }
    }
    c.register(TOKENS.Channels, { useValue: this.channels });
    this.deliverer = build(TOKENS.Deliverer, Deliverer, 'delivery');
    // The notifier logs its own suppressions (quiet window, rate limit); the deliverer
    // counts everything else. This view of the same log counts those too.
    const metrics = this.metrics;
    const notifierLog = Object.create(this.deliveryLog) as DeliveryLog;
    notifierLog.record = (r: DeliveryRecord) => {
      metrics.deliveries.inc({ channel: r.channel, outcome: r.outcome });
      return this.deliveryLog.record(r);
    };
    c.register(TOKENS.NotifierLog, { useValue: notifierLog });
    this.notifier = build(TOKENS.Notifier, Notifier, 'notifier');
    const n = config.notifications;
    this.deliverer.onGone = (name, reason) => this.notifier.channelGone(name, reason);
    this.toggles = new ChannelToggles(n.channels as ChannelEntry[], store, (name, t) => {
      this.notifier.setChannel(name, t);
    });

    c.register(TOKENS.ModeInfo, {
      useValue: { type: () => this.mode().type, acts: () => this.mode().acts } satisfies ModeInfo,
    });
    // Detectors report transitions outside an input (a timer, a gate check) through Emit.
    let engine: Engine | undefined;
    c.register(TOKENS.Emit, {
      useValue: async (ts: readonly Transition[]) => {
        if (ts.length && engine) await engine.handle(ts);
      },
    });
    c.register(TOKENS.Directives, {
      useValue: async (root: string, specs: DirectiveSpec[]) => {
        if (specs.length && engine) await engine.directives.push(root, specs, clock.now());
      },
    });
    const driven: Driven[] = [];
    for (const plugin of registry.detectors.values()) {
      const child = c.createChildContainer();
      child.register(TOKENS.Logger, { useValue: logger.child({ detector: plugin.type }) });
      const knobs = () => this.knobs.get<Record<string, unknown>>(plugin.section);
      let detector: Detector;
      try {
        detector = plugin.create(child, knobs);
      } catch (e) {
        throw new AppError('PLUGIN_CREATE_FAILED', `detector "${plugin.type}": ${(e as Error).message}`, { cause: e });
      }
      if (detector.type !== plugin.type) {
        throw new AppError(
          'PLUGIN_CREATE_FAILED',
          `detector "${plugin.type}" built a detector of type "${detector.type}"`,
        );
      }
      this.detectors.set(plugin.type, detector);
      driven.push({ detector, enabled: () => knobs()?.enabled !== false });
    }
    c.register(TOKENS.Driven, { useValue: driven });
    c.register(TOKENS.Mode, { useValue: () => this.mode() });
    c.register(TOKENS.Sensors, { useValue: registry.sensors });
    build(TOKENS.DirectiveQueue, DirectiveQueue, 'directives');
    build(TOKENS.Dispatch, Dispatch, 'engine');
    build(TOKENS.Readouts, Readouts, 'readouts');
    build(TOKENS.Gate, Gate, 'gate');
    engine = build(TOKENS.Engine, Engine, 'engine');
    this.engine = engine as Engine;
  }

  /**
   * Progress events from an embedder, validated like the HTTP body (a bad one throws
   * naming the field; nothing is judged then). The engine takes them parsed.
   */
  /**
   * Every declared sensor (core/sensor.ts) with the last time one of its builds
   * reported here, and the actions the configured mode asks that it does not take
   * itself (how they are done instead, or `none`).
   */
  sensorHealth(): { name: string; agent: string; last_seen_at: string | null; cannot_act: string }[] {
    const asks = this.mode().asks ?? [];
    return [...this.registry.sensors.values()].map((s) => {
      let last = 0;
      for (const [v, at] of this.health.plugins.entries()) if (sensorNameOf(v) === s.name && at > last) last = at;
      return {
        name: s.name,
        agent: s.agent,
        last_seen_at: last ? new Date(last).toISOString() : null,
        cannot_act: gapLine(gapsOf(s, asks)),
      };
    });
  }

  progress(input: ProgressEventInput | readonly ProgressEventInput[], origin: Origin = {}) {
    return this.judge(parseAll(ProgressEventSchema, input, 'progress'), origin);
  }

  /** Parsed progress events through the engine, timing each session's first flag (the HTTP route's path too). */
  async judge(events: readonly ProgressEvent[], origin: Origin = {}): Promise<readonly Transition[]> {
    return this.timed(events, await this.engine.progress(events, origin));
  }

  /** Parsed progress events as a sensor route takes them: their transitions and their trees' pending directives. */
  async ingest(
    events: readonly ProgressEvent[],
    origin: Origin = {},
    check?: () => Promise<void>,
  ): Promise<InputResult> {
    const r = await this.engine.ingest(events, origin, check);
    this.timed(events, r.transitions);
    return r;
  }

  /** Records how long after its event each session's first flag came. */
  private timed(events: readonly ProgressEvent[], out: readonly Transition[]): readonly Transition[] {
    if (!out.length) return out;
    const now = this.clock.now();
    const latest = new Map<string, number>();
    for (const e of events) latest.set(e.session_id, Math.max(latest.get(e.session_id) ?? 0, e.ts));
    const newest = Math.max(...latest.values());
    for (const t of out) {
      if (t.subject.kind !== 'session' || t.from !== 'ok' || t.to === 'ok') continue;
      // A parent flagged through a child's roll-up has no event of its own here.
      this.metrics.detected(latest.get(t.subject.id) ?? newest, now);
    }
    return out;
  }

  /**
   * The outside watcher's heartbeat: kept for /health (in the store too, for the other
   * instances), streamed to the admin page, and the alert its sensor derives from it
   * (a blind watchdog) raised or resolved.
   */
  async heartbeat(hb: { last_tick_at: number; result: { status: string } }, alert?: AlertInput): Promise<void> {
    this.health.watchdog = { last_tick_at: hb.last_tick_at, result: hb.result, received_at: this.clock.now() };
    await this.store.set(keys.watchdog, this.health.watchdog);
    this.events.emit('heartbeat', this.health.watchdog);
    if (alert) await this.notifier.notify(alert);
  }

  /** LLM request records from an embedder (a router that streams), validated like the HTTP body. */
  requests(input: RequestRecordInput | readonly RequestRecordInput[]) {
    return this.engine.requests(parseAll(RequestRecordSchema, input, 'requests'));
  }

  /**
   * The router gate as routers call it: the engine's answer within `gate.timeout`, or
   * `gate.on_error` when the check fails or is late (a store outage must not stop the
   * model path). Fallback answers are logged and counted.
   */
  async gate(q: GateQuery): Promise<GateAnswer> {
    const g = this.config.gate as { timeout: number; on_error: 'allow' | 'refuse' };
    let t: NodeJS.Timeout | undefined;
    try {
      const late = new Promise<never>((_, reject) => {
        t = setTimeout(() => reject(new Error(`gate check took longer than ${g.timeout} ms`)), g.timeout);
      });
      return await Promise.race([this.engine.check(q), late]);
    } catch (err) {
      this.metrics.gateErrors.inc({ answer: g.on_error });
      this.metrics.gate.inc({ action: g.on_error });
      this.logger.warn(
        { err: (err as Error).message, answer: g.on_error },
        'gate check failed; answered by gate.on_error',
      );
      return g.on_error === 'allow'
        ? { action: 'allow', model_tripped: false }
        : { action: 'refuse', status: 429, retry_after_s: 5, reason: 'vigil is unavailable', model_tripped: false };
    } finally {
      clearTimeout(t);
    }
  }

  /**
   * Each channel: whether it is enabled and ready on this machine (its own check, no
   * network), where it was configured, a runtime toggle, and its last final delivery.
   */
  async channelStatus(o: { deliveries?: boolean } = {}): Promise<ChannelStatus[]> {
    // The last 100 rows are enough to show a channel's latest outcome; none when the store is down.
    const recent = o.deliveries === false ? [] : await this.deliveryLog.recent(100).catch(() => []);
    const sources = channelSources(this.config);
    const toggled = this.toggles.saved();
    const out: ChannelStatus[] = [];
    for (const e of this.notifier.channels()) {
      let why: string | undefined;
      try {
        why = await this.channels.get(e.name)?.ready?.();
      } catch (err) {
        why = `readiness check failed: ${(err as Error).message}`;
      }
      const last = recent.find((r) => r.channel === e.name && r.outcome !== 'retried');
      out.push({
        name: e.name,
        type: e.type,
        enabled: e.enabled,
        ready: why === undefined,
        ...(why !== undefined ? { reason: why } : {}),
        source: sources[e.name] ?? 'default',
        ...(toggled[e.name] ? { runtime: toggled[e.name] } : {}),
        last_delivery: last
          ? {
              outcome: last.outcome,
              at: last.at,
              ...(last.reason ? { reason: last.reason } : {}),
              ...(last.test ? { test: true } : {}),
            }
          : null,
      });
    }
    return out;
  }

  /** A detector by type, typed by the caller. */
  detector<T extends Detector = Detector>(type: string): T {
    const d = this.detectors.get(type);
    if (!d) throw new AppError('NOT_FOUND', `no detector "${type}" (known: ${[...this.detectors.keys()].join(', ')})`);
    return d as T;
  }

  /** The configured mode (`modes.mode`), built from the live knobs; rebuilt when they change. */
  mode(): Mode {
    if (this.modeCache) return this.modeCache;
    const modes = this.knobs.get<Record<string, unknown>>('modes');
    const type = String(modes.mode);
    const plugin = this.registry.modes.get(type);
    if (!plugin) throw new AppError('CONFIG_INVALID', `modes.mode: "${type}" is not a registered mode`);
    this.modeCache = plugin.create(this.container, (modes[type] ?? {}) as object);
    return this.modeCache;
  }

  async start(): Promise<void> {
    if (this.started) return;
    this.started = true;
    await this.knobs.load();
    await this.toggles.refresh();
    if (this.runWorker) await this.queue.start(this.deliverer);
    // Outbox entries a crash or an outage left behind are delivered now; due trees scheduled.
    await this.engine
      .recover()
      .catch((err) => this.logger.warn({ err: (err as Error).message }, 'recovering the outbox failed'));
    const every = this.config.detection.tick_interval as number;
    if (every > 0) {
      this.timer = setInterval(() => void this.tick(), every);
      this.timer.unref();
    }
  }

  /**
   * What the timer does: detectors that keep time judge, unsettled fan-outs are
   * finished, and sessions past detection.max_sessions are forgotten (least recently active first).
   */
  async tick(now = this.clock.now()): Promise<void> {
    // Runtime knobs and channel toggles another instance changed take effect here.
    await this.knobs
      .refresh()
      .catch((err) => this.logger.warn({ err: (err as Error).message }, 'knobs refresh failed'));
    await this.toggles
      .refresh()
      .catch((err) => this.logger.warn({ err: (err as Error).message }, 'channel toggles refresh failed'));
    await this.trimSessions().catch((err) => this.logger.warn({ err: (err as Error).message }, 'session cap failed'));
    await this.engine.tick(now).catch((err) => this.logger.warn({ err: (err as Error).message }, 'tick failed'));
  }

  /**
   * Forgets the least recently active sessions beyond detection.max_sessions, in the
   * tree and in every detector; none active within detection.active_window.
   */
  async trimSessions(): Promise<string[]> {
    const d = this.config.detection;
    const gone = await this.tree.trim(d.max_sessions as number, this.clock.now() - (d.active_window as number));
    if (!gone.length) return gone;
    for (const d of this.detectors.values()) await d.forget?.(gone);
    this.metrics.sessionsEvicted.inc(gone.length);
    this.logger.warn(
      { evicted: gone.length, max_sessions: this.config.detection.max_sessions },
      'sessions evicted: more than detection.max_sessions tracked',
    );
    return gone;
  }

  async close(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    await this.queue.close();
    await this.store.close();
  }
}

/** One channel's state for /health, the startup log and `vigil status`. */
export interface ChannelStatus {
  name: string;
  type: string;
  enabled: boolean;
  /** False when the channel's own check says it cannot deliver here (see reason). */
  ready: boolean;
  reason?: string;
  /** Where the channel entry comes from. */
  source: Source;
  /** Runtime toggles in effect (PATCH /channels/:name). */
  runtime?: Record<string, unknown>;
  last_delivery: { outcome: DeliveryRecord['outcome']; at: number; reason?: string; test?: boolean } | null;
}

/** Builds and starts an instance from a registry and config (the package's createVigil adds the built-ins). */
export async function createKernel(opts: KernelOptions): Promise<Vigil> {
  const env = opts.env ?? process.env;
  const registry = opts.registry;
  const config =
    opts.config ??
    (await loadConfigWithPlugins({ registry, file: opts.configFile, extra: opts.extra, overlay: opts.overlay, env }));
  const logger = opts.logger ?? silentLogger();
  const clock = opts.clock ?? systemClock;
  // Secrets the logger scrubs wherever they appear (with their significant parts).
  registerSecret(env[config.server.admin_token_env]);
  registerSecret(env[config.server.ingest_token_env]);
  for (const ch of config.notifications.channels as ChannelEntry[]) {
    for (const [k, v] of Object.entries(ch.options))
      if (k.endsWith('_env') && typeof v === 'string') registerSecret(env[v]);
  }
  const n = config.notifications;
  const timing = {
    concurrency: n.concurrency,
    lockDurationMs: n.lock_duration,
    stalledIntervalMs: n.stalled_interval,
    drainTimeoutMs: n.drain_timeout,
    spoolFile: n.spool_file === false ? undefined : (n.spool_file ?? opts.defaultSpoolFile?.(config)),
  };
  const url = redisUrlOf(config, env);
  let store: Store & UnitBackend;
  let queue: AlertQueue;
  if (url) {
    registerSecret(url);
    store = new RedisStore({ url, prefix: config.store.key_prefix, timeoutMs: config.store.timeout });
    // Unreachable at start: say where (never the password) instead of failing on the first read.
    const bad = await (store as RedisStore).unusable(Math.max(2_000, config.store.timeout as number));
    if (bad) {
      await store.close();
      const where = `Redis at ${redactUrl(url)}`;
      const named = `store.redis_url_env: ${config.store.redis_url_env}`;
      if (bad.code === 'AUTH_FAILED') {
        // "Redis at ... refused the credentials (WRONGPASS): AUTH_FAILED (store.redis_url_env: REDIS_URL)"
        throw new AppError('AUTH_FAILED', `${where} ${bad.message.replace(/^Redis /, '')}: AUTH_FAILED (${named})`);
      }
      throw new AppError('STORE_UNAVAILABLE', `${where} does not answer (${named})`);
    }
    queue = new BullQueue({ ...timing, url, prefix: `${config.store.key_prefix}:q`, logger });
  } else {
    store = new MemoryStore(clock);
    queue = new MemoryQueue(timing, logger.child({ part: 'queue' }));
  }
  const vigil = new Vigil(registry, config, store, queue, logger, clock, env, opts.worker ?? true);
  await vigil.start();
  return vigil;
}

/** What `vigil config check` shows besides the config: channels, where knobs come from, saved runtime state. */
export interface ConfigReport {
  config: Readonly<VigilConfig>;
  channels: ChannelStatus[];
  /** Knobs not at their default, runtime ones included when the store could be read. */
  knobs: Explained[];
  /** Saved channel toggles by channel (runtime). */
  toggles: Record<string, unknown>;
  /** Whether the saved runtime state was read, and from where. */
  runtime: string;
}

/**
 * Everything `vigil serve` validates before it listens, without starting anything: the
 * config (plugins under `plugins:` loaded), every channel and detector built once.
 * Throws ConfigError naming each problem. With Redis configured it also reads the
 * runtime knobs and toggles saved there (a restart applies them over the file).
 */
export async function inspectConfig(opts: KernelOptions): Promise<ConfigReport> {
  const env = opts.env ?? process.env;
  const config =
    opts.config ??
    (await loadConfigWithPlugins({
      registry: opts.registry,
      file: opts.configFile,
      extra: opts.extra,
      overlay: opts.overlay,
      env,
    }));
  const clock = opts.clock ?? systemClock;
  let url: string | undefined;
  let channels: ChannelStatus[];
  let knobs: Explained[];
  try {
    url = redisUrlOf(config, env);
    const v = new Vigil(
      opts.registry,
      config,
      new MemoryStore(clock),
      new MemoryQueue({ concurrency: 1, lockDurationMs: 0, stalledIntervalMs: 0 }),
      silentLogger(),
      clock,
      env,
      false,
    );
    channels = await v.channelStatus();
    // The knob sections come from Knobs (runtime values join them below); the rest from the layers.
    const rest = Object.keys(config).filter((k) => !v.knobs.sections().includes(k) && k !== 'plugins');
    const fixed = explain(config, configLayers(config), rest).filter(
      (e) => e.source !== 'default' && e.path !== 'notifications.channels',
    );
    knobs = [...fixed, ...v.knobs.overridden()];
    await v.close();
  } catch (e) {
    if (e instanceof ConfigError) throw e;
    throw new ConfigError([(e as Error).message]);
  }
  if (!url) {
    return { config, channels, knobs, toggles: {}, runtime: 'none: the memory backend keeps nothing across restarts' };
  }
  const store = new RedisStore({ url, prefix: config.store.key_prefix, timeoutMs: config.store.timeout });
  try {
    const bad = await store.unusable(2_000);
    if (bad) {
      const why = bad.code === 'AUTH_FAILED' ? `refused the credentials (${bad.code})` : 'does not answer';
      return { config, channels, knobs, toggles: {}, runtime: `not read: Redis at ${redactUrl(url)} ${why}` };
    }
    const k = new Knobs(opts.registry, config, store, silentLogger());
    await k.load();
    const toggles = (await store.get<Record<string, unknown>>(keys.channelToggles)) ?? {};
    const all = [...knobs.filter((e) => !k.sections().includes(e.path.split('.')[0])), ...k.overridden()];
    return { config, channels, knobs: all, toggles, runtime: `read from Redis at ${redactUrl(url)}` };
  } finally {
    await store.close();
  }
}

/** As inspectConfig, the config only (what embedders and tests call). */
export async function checkConfig(opts: KernelOptions): Promise<Readonly<VigilConfig>> {
  return (await inspectConfig(opts)).config;
}
