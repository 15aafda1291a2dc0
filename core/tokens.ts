// Injection tokens. A leaf module (no imports) so any file can name a dependency
// without pulling in its implementation. Interfaces have no runtime type, so every
// constructor parameter names its token explicitly with @inject(TOKENS.X).
export const TOKENS = {
  Logger: Symbol('Logger'),
  Clock: Symbol('Clock'),
  Store: Symbol('Store'),
  Queue: Symbol('Queue'),
  Config: Symbol('Config'),
  Registry: Symbol('Registry'),
  Notifier: Symbol('Notifier'),
  DeliveryLog: Symbol('DeliveryLog'),
  Env: Symbol('Env'),
  /** The session tree (core/tree.ts): parent, root, agent and metadata of every session. */
  Tree: Symbol('Tree'),
  /** `(transitions) => Promise<void>`: how a detector reports transitions outside an input (a timer, a gate check). */
  Emit: Symbol('Emit'),
  /**
   * `(root, directives) => Promise<void>`: how a detector queues actions for the sensor
   * outside a session transition (a block of a tree its gate refuses, and its lift).
   */
  Directives: Symbol('Directives'),
  /** The instance's event bus (node:events): transition, tree, delivery, knobs, channel, heartbeat. */
  Events: Symbol('Events'),
  /** The configured response mode, live (ModeInfo in core/contracts.ts). */
  ModeInfo: Symbol('ModeInfo'),
  /** Metrics (core/metrics.ts). */
  Metrics: Symbol('Metrics'),
  /** The live knobs (core/knobs.ts). */
  Knobs: Symbol('Knobs'),
  /** Options of the plugin instance being built (one child container per instance). */
  PluginOptions: Symbol('PluginOptions'),
  /** Config name of the plugin instance being built (a channel's `name`). */
  PluginName: Symbol('PluginName'),
  // The kernel's own parts, wired by the container like every plugin (core/vigil.ts).
  /** The unit-of-work runner (core/unit.ts). */
  Units: Symbol('Units'),
  /** `readonly Driven[]`: the detectors the engine drives, with their enabled switches. */
  Driven: Symbol('Driven'),
  /** `() => Mode`: the configured mode, rebuilt when its knobs change. */
  Mode: Symbol('Mode'),
  /** The sensors' pending directives, per tree (core/directives.ts). */
  DirectiveQueue: Symbol('DirectiveQueue'),
  Dispatch: Symbol('Dispatch'),
  Readouts: Symbol('Readouts'),
  Gate: Symbol('Gate'),
  Engine: Symbol('Engine'),
  Deliverer: Symbol('Deliverer'),
  /** `ReadonlyMap<string, SensorDescriptor>`: what each declared sensor can carry out. */
  Sensors: Symbol('Sensors'),
  /** `ReadonlyMap<string, Channel>`: the channel instances by config name. */
  Channels: Symbol('Channels'),
  /** The notifier's view of the delivery log (counts its suppressions). */
  NotifierLog: Symbol('NotifierLog'),
} as const;
