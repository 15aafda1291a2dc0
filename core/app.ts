import 'reflect-metadata';
import { EventEmitter } from 'node:events';
import { type DependencyContainer, container as rootContainer } from 'tsyringe';
import { createRegistry } from '../builtins.ts';
import type { BehaviorBreaker } from '../detectors/behavior-breaker/breaker.detector.ts';
import type { NoProgressDetector } from '../detectors/no-progress/no-progress.detector.ts';
import { type Clock, systemClock } from './clock.ts';
import { type ChannelEntry, loadConfig, type VigilConfig } from './config.ts';
import type { Channel } from './contracts.ts';
import { Engine } from './engine.ts';
import { AppError } from './errors.ts';
import { Knobs } from './knobs.ts';
import { type Logger, registerSecret, silentLogger } from './logger.ts';
import { Metrics } from './metrics.ts';
import { BullQueue } from './notifier/bullmq-queue.ts';
import { Deliverer } from './notifier/deliverer.ts';
import { DeliveryLog } from './notifier/delivery-log.ts';
import { MemoryQueue } from './notifier/memory-queue.ts';
import { Notifier } from './notifier/notifier.ts';
import type { AlertQueue } from './notifier/queue.ts';
import type { Registry } from './registry.ts';
import { MemoryStore } from './store/memory.ts';
import { RedisStore } from './store/redis.ts';
import type { Store } from './store/store.ts';
import { TOKENS } from './tokens.ts';

export interface VigilOptions {
  registry?: Registry;
  /** An already validated config; otherwise it is loaded (default.yaml + file + overlay). */
  config?: VigilConfig;
  configFile?: string;
  overlay?: unknown;
  env?: NodeJS.ProcessEnv;
  logger?: Logger;
  clock?: Clock;
  /** Consume the delivery queue in this process (default true). */
  worker?: boolean;
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
 * The composition root: one child container per instance holding logger, clock,
 * store, queue and config, from which every plugin instance is built.
 */
export class Vigil {
  readonly container: DependencyContainer;
  readonly channels = new Map<string, Channel>();
  readonly notifier: Notifier;
  readonly deliveryLog: DeliveryLog;
  readonly deliverer: Deliverer;
  readonly knobs: Knobs;
  readonly metrics: Metrics;
  readonly detector: NoProgressDetector;
  readonly engine: Engine;
  readonly breaker: BehaviorBreaker;
  /** Watchdog heartbeat and plugin versions seen, for /health. */
  readonly health = {
    watchdog: undefined as undefined | { last_tick_at: number; result: unknown; received_at: number },
    plugins: new Map<string, number>(),
  };
  /** Live notifications for the admin page; names and payloads in service/admin/events.ts. */
  readonly events = new EventEmitter();
  private started = false;

  constructor(
    readonly registry: Registry,
    readonly config: VigilConfig,
    readonly store: Store,
    readonly queue: AlertQueue,
    readonly logger: Logger,
    readonly clock: Clock,
    readonly env: NodeJS.ProcessEnv,
    private readonly runWorker: boolean,
  ) {
    const c = rootContainer.createChildContainer();
    c.register(TOKENS.Logger, { useValue: logger });
    c.register(TOKENS.Clock, { useValue: clock });
    c.register(TOKENS.Store, { useValue: store });
    c.register(TOKENS.Queue, { useValue: queue });
    c.register(TOKENS.Config, { useValue: config });
    c.register(TOKENS.Registry, { useValue: registry });
    c.register(TOKENS.Env, { useValue: env });
    this.container = c;
    this.knobs = new Knobs(registry, config, store, logger.child({ part: 'knobs' }));
    this.knobs.onChange((k) => this.events.emit('knobs', k));
    c.register(TOKENS.Knobs, { useValue: this.knobs });
    this.metrics = new Metrics(() => queue.depth());

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
    this.deliverer = new Deliverer(
      this.channels,
      this.deliveryLog,
      config.notifications.delivery_timeout,
      logger.child({ part: 'delivery' }),
      clock,
      store,
    );
    this.notifier = new Notifier(
      config.notifications.channels as ChannelEntry[],
      store,
      queue,
      this.deliveryLog,
      clock,
      logger.child({ part: 'notifier' }),
    );
    c.register(TOKENS.Notifier, { useValue: this.notifier });

    const np = registry.detectors.get('no-progress');
    if (!np) throw new AppError('PLUGIN_CREATE_FAILED', 'the no-progress detector is not registered');
    this.detector = np.create(c, config.progress) as NoProgressDetector;
    this.engine = new Engine(
      c,
      registry,
      this.knobs,
      store,
      clock,
      logger.child({ part: 'engine' }),
      this.detector,
      this.notifier,
      this.metrics,
    );
    const bb = registry.detectors.get('behavior-breaker');
    if (!bb) throw new AppError('PLUGIN_CREATE_FAILED', 'the behavior-breaker detector is not registered');
    this.breaker = bb.create(c, config.breaker) as BehaviorBreaker;
    this.engine.breaker = this.breaker;
    this.engine.events = this.events;
  }

  async start(): Promise<void> {
    if (this.started) return;
    this.started = true;
    await this.knobs.load();
    if (this.runWorker) await this.queue.start(this.deliverer);
  }

  async close(): Promise<void> {
    await this.queue.close();
    await this.store.close();
  }
}

export async function createVigil(opts: VigilOptions = {}): Promise<Vigil> {
  const env = opts.env ?? process.env;
  const registry = opts.registry ?? createRegistry();
  const config = opts.config ?? loadConfig({ registry, file: opts.configFile, overlay: opts.overlay, env });
  const logger = opts.logger ?? silentLogger();
  const clock = opts.clock ?? systemClock;
  for (const ch of config.notifications.channels as ChannelEntry[]) {
    for (const [k, v] of Object.entries(ch.options))
      if (k.endsWith('_env') && typeof v === 'string') registerSecret(env[v]);
  }
  const n = config.notifications;
  const timing = {
    concurrency: n.concurrency,
    retryDelayMs: n.retry_delay,
    lockDurationMs: n.lock_duration,
    stalledIntervalMs: n.stalled_interval,
  };
  const url = redisUrlOf(config, env);
  let store: Store;
  let queue: AlertQueue;
  if (url) {
    registerSecret(url);
    store = new RedisStore({ url, prefix: config.store.key_prefix });
    queue = new BullQueue({ ...timing, url, prefix: `${config.store.key_prefix}:q`, logger });
  } else {
    store = new MemoryStore(clock);
    queue = new MemoryQueue(timing);
  }
  const vigil = new Vigil(registry, config, store, queue, logger, clock, env, opts.worker ?? true);
  await vigil.start();
  return vigil;
}
