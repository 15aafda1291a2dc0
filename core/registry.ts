import type { DependencyContainer, InjectionToken } from 'tsyringe';

import type { z } from 'zod';
import type { Channel, ChannelPlugin } from './contracts.ts';
import { AppError } from './errors.ts';
import { TOKENS } from './tokens.ts';

/**
 * A detector type: consumes progress events, request records and verdicts, keeps its
 * state in the store, emits verdicts. Its options are one top-level config section.
 */
export interface DetectorPlugin<O extends object = any, D = unknown> {
  readonly kind: 'detector';
  readonly type: string;
  /** Top-level config key holding its options, e.g. `progress`. */
  readonly section: string;
  readonly options: z.ZodObject<any>;
  create(c: DependencyContainer, opts: O): D;
}

/** A response mode: turns a verdict transition into actions. Options live under `modes.<type>`. */
export interface ModePlugin<O extends object = any, M = unknown> {
  readonly kind: 'mode';
  readonly type: string;
  readonly options: z.ZodObject<any>;
  create(c: DependencyContainer, opts: O): M;
}

export type AnyPlugin = ChannelPlugin | DetectorPlugin | ModePlugin;

/**
 * The three plugin kinds, each keyed by its `type`. The config schema is composed from
 * what is registered here, so a third-party channel registered with one call is
 * configurable, validated and redacted exactly like the built-in ones.
 */
export class Registry {
  readonly channels = new Map<string, ChannelPlugin>();
  readonly detectors = new Map<string, DetectorPlugin>();
  readonly modes = new Map<string, ModePlugin>();

  register(p: AnyPlugin): this {
    const table: Map<string, AnyPlugin> =
      p.kind === 'channel' ? this.channels : p.kind === 'detector' ? this.detectors : this.modes;
    if (!/^[a-z][a-z0-9_-]*$/.test(p.type)) {
      throw new AppError('PLUGIN_CREATE_FAILED', `${p.kind} type "${p.type}" must be lowercase [a-z0-9_-]`);
    }
    if (table.has(p.type)) throw new AppError('PLUGIN_DUPLICATE', `${p.kind} type "${p.type}" is already registered`);
    table.set(p.type, p);
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
  return {
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
  };
}
