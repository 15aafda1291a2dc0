import type { DependencyContainer } from 'tsyringe';
import type { z } from 'zod';
import type { Alert } from './alert.ts';

/**
 * A channel delivers one alert transition. It throws DeliveryError, classified once
 * as retryable or permanent; anything else thrown counts as retryable. It must honour
 * `signal` (the pipeline's delivery timeout) and never log or return a secret.
 */
export interface Channel {
  readonly type: string;
  readonly name: string;
  send(alert: Alert, signal: AbortSignal): Promise<void>;
}

/**
 * A channel type: the `type` an operator writes in config, its own strict options
 * schema (a z.object whose keys sit beside the common channel keys), and a factory
 * that builds one instance per config entry through the container.
 */
export interface ChannelPlugin<O extends object = any> {
  readonly kind: 'channel';
  readonly type: string;
  readonly options: z.ZodObject<any>;
  /** Env var names this entry needs (its `*_env` options); checked at load for enabled channels. */
  secrets?(opts: O): string[];
  create(c: DependencyContainer, opts: O, name: string): Channel;
}

/** Options every channel entry has, whatever its type. */
export interface ChannelCommon {
  name: string;
  type: string;
  enabled: boolean;
  min_severity: 'info' | 'warning' | 'critical';
  resolve_messages: boolean;
  rate_limit: { max: number; window: number };
  quiet_window: number;
}
