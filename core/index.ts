// Vigil's public surface. Everything else is internal and may change.
import 'reflect-metadata';

export { createRegistry } from '../builtins.ts';
export type { Alert, AlertInput, AlertState, Severity } from './alert.ts';
export { createVigil, Vigil, type VigilOptions } from './app.ts';
export { type Clock, FakeClock, systemClock } from './clock.ts';
export { ConfigError, loadConfig, type VigilConfig } from './config.ts';
export type { Channel, ChannelPlugin } from './contracts.ts';
export { duration } from './duration.ts';
export { AppError, DeliveryError } from './errors.ts';
export { createLogger, type Logger } from './logger.ts';
export type { DetectorPlugin, ModePlugin } from './registry.ts';
export { classChannel, Registry } from './registry.ts';
export { renderLine, renderTitle, truncate } from './render.ts';
export type { Store } from './store/store.ts';
export { TOKENS } from './tokens.ts';
