// The kernel's public surface: contracts, registry, config, the instance. Everything
// else is internal and may change. The package entry (index.ts) adds the built-ins.
import 'reflect-metadata';

export type { Alert, AlertInput, AlertState, Severity } from './alert.ts';
export { type Clock, FakeClock, systemClock } from './clock.ts';
export { ConfigError, loadConfig, loadConfigWithPlugins } from './config.ts';
export type { VigilConfig } from './config-schema.ts';
export type {
  AnyPlugin,
  Channel,
  ChannelPlugin,
  Decision,
  Detector,
  DetectorPlugin,
  GateContext,
  GateVote,
  Mode,
  ModeEvent,
  ModePlugin,
  Origin,
  Panel,
  PanelChart,
  PluginRoute,
  SessionInfo,
  SessionReadout,
  Subject,
  Transition,
  TreeState,
} from './contracts.ts';
export { emptyTree } from './contracts.ts';
export { duration } from './duration.ts';
export type { SessionRow } from './engine.ts';
export { AppError, DeliveryError } from './errors.ts';
export type { AgentInstaller, InstallContext, InstallerFlag, InstallResult } from './installer.ts';
export { createLogger, type Logger } from './logger.ts';
export { classChannel, definePlugin, isPlugin, Registry } from './registry.ts';
export { renderLine, renderTitle, truncate } from './render.ts';
export type { Store } from './store/store.ts';
export { TOKENS } from './tokens.ts';
export type { SessionMeta, SessionTree } from './tree.ts';
export { afterCommit, beforeCommit, inUnit, onDiscard } from './unit.ts';
export { createKernel, type KernelOptions, Vigil } from './vigil.ts';
export type {
  Directive,
  ExternalVerdict,
  GateAnswer,
  GateQuery,
  ProgressEvent,
  ProgressEventInput,
  RequestRecord,
  RequestRecordInput,
  VerdictLevel,
} from './wire.ts';
