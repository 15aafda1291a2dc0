import type { InjectionToken } from 'tsyringe';
import type { z } from 'zod';
import type { AnyPlugin, Channel, ChannelPlugin, DetectorPlugin, ModePlugin } from './contracts.ts';
import { AppError } from './errors.ts';
import { defineSensor, type HookBridge, type SensorDescriptor } from './sensor.ts';
import { TOKENS } from './tokens.ts';

/** Marks what definePlugin() returned, so a plugin module's exports are recognised. */
const PLUGIN = Symbol.for('vigil.plugin');

/**
 * Declares a plugin (a channel, detector or mode type). Returns it unchanged, checked
 * and marked, so a module named under `plugins:` in the config can export it.
 */
export function definePlugin<P extends AnyPlugin>(p: P): P {
  checkShape(p, 'definePlugin');
  Object.defineProperty(p, PLUGIN, { value: true, enumerable: false });
  return p;
}

/** Whether a value is a plugin definition (marked by definePlugin, or shaped like one). */
export function isPlugin(v: unknown): v is AnyPlugin {
  if (!v || typeof v !== 'object') return false;
  if ((v as Record<symbol, unknown>)[PLUGIN]) return true;
  const p = v as Partial<AnyPlugin>;
  return (
    (p.kind === 'channel' || p.kind === 'detector' || p.kind === 'mode') &&
    typeof p.type === 'string' &&
    typeof p.create === 'function' &&
    typeof (p.options as { safeParse?: unknown } | undefined)?.safeParse === 'function'
  );
}

function checkShape(p: AnyPlugin, where: string): void {
  const bad = (why: string) => new AppError('PLUGIN_INVALID', `${where}: ${why}`);
  if (!p || typeof p !== 'object') throw bad('expected a plugin object');
  if (p.kind !== 'channel' && p.kind !== 'detector' && p.kind !== 'mode')
    throw bad(`kind must be channel, detector or mode (got ${JSON.stringify((p as { kind?: unknown }).kind)})`);
  if (typeof p.type !== 'string' || !/^[a-z][a-z0-9_-]*$/.test(p.type))
    throw bad(`${p.kind} type "${String(p.type)}" must be lowercase [a-z0-9_-]`);
  if (typeof p.create !== 'function') throw bad(`${p.kind} "${p.type}" has no create()`);
  if (typeof (p.options as { safeParse?: unknown })?.safeParse !== 'function')
    throw bad(`${p.kind} "${p.type}" has no zod options schema`);
  if (p.kind === 'detector' && (typeof p.section !== 'string' || !/^[a-z][a-z0-9_]*$/.test(p.section)))
    throw bad(`detector "${p.type}" needs a config section name ([a-z0-9_])`);
}

/**
 * The plugin kinds, each keyed by its `type`, plus the extra config sections the
 * composition root adds (the watchdog's). The config schema is composed from what is
 * registered here, so a plugin registered with one call (or named under `plugins:`)
 * is configurable, validated and redacted exactly like the built-in ones.
 */
export class Registry {
  readonly channels = new Map<string, ChannelPlugin>();
  readonly detectors = new Map<string, DetectorPlugin>();
  readonly modes = new Map<string, ModePlugin>();
  readonly sections = new Map<string, z.ZodObject<any>>();
  /** What each sensor can carry out, by the name it gives in the plugin header (core/sensor.ts). */
  readonly sensors = new Map<string, SensorDescriptor>();
  /** The hook bridges of the sensors that report through hooks, by sensor name (the hook endpoint's paths). */
  readonly hooks = new Map<string, HookBridge>();
  /** Where each plugin came from (a module path for plugins loaded from config). */
  readonly origins = new Map<string, string>();

  register(p: AnyPlugin, origin = 'registered'): this {
    checkShape(p, origin);
    const table: Map<string, AnyPlugin> =
      p.kind === 'channel' ? this.channels : p.kind === 'detector' ? this.detectors : this.modes;
    if (table.has(p.type)) {
      const first = this.origins.get(`${p.kind}:${p.type}`);
      throw new AppError('PLUGIN_DUPLICATE', `${p.kind} type "${p.type}" is already registered (by ${first})`);
    }
    if (p.kind === 'detector') {
      for (const d of this.detectors.values())
        if (d.section === p.section)
          throw new AppError('PLUGIN_DUPLICATE', `config section "${p.section}" is already used by ${d.type}`);
    }
    table.set(p.type, p);
    this.origins.set(`${p.kind}:${p.type}`, origin);
    return this;
  }

  /** A sensor's declared capabilities (validated); one per name. */
  sensor(d: SensorDescriptor): this {
    const v = defineSensor(d);
    if (this.sensors.has(v.name)) throw new AppError('PLUGIN_DUPLICATE', `sensor "${v.name}" is already declared`);
    this.sensors.set(v.name, v);
    return this;
  }

  /** A sensor's hook bridge (its descriptor declared first); one per sensor. */
  hook(b: HookBridge): this {
    if (!this.sensors.has(b.sensor))
      throw new AppError('PLUGIN_INVALID', `hook bridge "${b.sensor}": no such sensor declared`);
    if (this.hooks.has(b.sensor))
      throw new AppError('PLUGIN_DUPLICATE', `hook bridge "${b.sensor}" is already registered`);
    this.hooks.set(b.sensor, b);
    return this;
  }

  /** An extra top-level config section validated with `schema` (not a plugin: e.g. the watchdog's). */
  section(name: string, schema: z.ZodObject<any>): this {
    if (this.sections.has(name)) throw new AppError('PLUGIN_DUPLICATE', `config section "${name}" already exists`);
    this.sections.set(name, schema);
    return this;
  }

  channelTypes(): string[] {
    return [...this.channels.keys()];
  }

  channel(type: string): ChannelPlugin {
    const p = this.channels.get(type);
    if (!p)
      throw new AppError(
        'CHANNEL_NOT_FOUND',
        `unknown channel type "${type}" (known: ${this.channelTypes().join(', ')})`,
      );
    return p;
  }
}

/**
 * A channel type whose instances are one @injectable class: each config entry gets a
 * child container holding its options (TOKENS.PluginOptions) and name (TOKENS.PluginName).
 */
export function classChannel<O extends object>(
  type: string,
  options: z.ZodObject<any>,
  cls: InjectionToken<Channel>,
  secrets?: (o: O) => string[],
): ChannelPlugin<O> {
  return definePlugin<ChannelPlugin<O>>({
    kind: 'channel',
    type,
    options,
    ...(secrets ? { secrets } : {}),
    create(c, opts, name) {
      const child = c.createChildContainer();
      child.register(TOKENS.PluginOptions, { useValue: opts });
      child.register(TOKENS.PluginName, { useValue: name });
      return child.resolve(cls);
    },
  });
}
