import type { DependencyContainer } from 'tsyringe';
import type { z } from 'zod';
import type { Alert, AlertInput, Severity } from './alert.ts';
import type { SensorAction } from './sensor.ts';
import type {
  DirectiveSpec,
  DirectiveType,
  ExternalVerdict,
  GateQuery,
  ProgressEvent,
  RequestRecord,
  VerdictLevel,
} from './wire.ts';

// The kernel's contracts. Plugins implement them; the kernel (engine, notifier, gate)
// drives whatever config enables through them and names no plugin. Three kinds:
// a Detector judges, a Mode acts on a verdict transition, a Channel delivers an alert.

// ---------------------------------------------------------------------------
// channels

/**
 * A channel delivers one alert transition. It throws DeliveryError, classified once
 * as retryable or permanent; anything else thrown counts as retryable. It must honour
 * `signal` (the pipeline's delivery timeout) and never log or return a secret.
 */
export interface Channel {
  readonly type: string;
  readonly name: string;
  send(alert: Alert, signal: AbortSignal): Promise<void>;
  /**
   * Why the channel cannot deliver on this machine (a missing binary, no session bus),
   * or undefined when it can. Cheap and local (no network): shown at startup and in
   * /health, so a channel that would fail every alert is seen before the first alert.
   */
  ready?(): string | undefined | Promise<string | undefined>;
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

// ---------------------------------------------------------------------------
// detectors

/** Where a session sits in its conversation tree (the kernel's SessionTree knows it). */
export interface SessionInfo {
  id: string;
  parent: string | undefined;
  root: string;
  /** Ancestors, nearest first (empty for a root). */
  ancestors: readonly string[];
}

/** Who sent an input: the opencode plugin names its build in a header. */
export interface Origin {
  plugin_version?: string;
}

/** What a transition is about. */
export type Subject = { kind: 'session'; id: string } | { kind: 'model'; id: string } | { kind: 'global'; id: string };

/**
 * A change of a detector's verdict on one subject: the only thing a detector tells the
 * kernel. On a session subject the configured mode decides what happens (and alerts);
 * on any other subject the kernel raises or resolves the detector's incident itself.
 * Other detectors see every transition (the behavior breaker counts stalls this way).
 */
export interface Transition {
  /** The detector type that decided it. */
  detector: string;
  subject: Subject;
  from: VerdictLevel;
  to: VerdictLevel;
  /** The rule that decided a non-ok level (null for ok). */
  rule: string | null;
  /** One line of printable ASCII, no content. */
  reason: string;
  /** Who said so: the detector itself, or an outside sensor (`watchdog`). */
  source: string;
  /** Alert severity; by default stalling is a warning and looping is the mode's call. */
  severity?: Severity;
  /** The incident; by default per detector and tree root (the no-progress detector's is the root itself). */
  dedup_key?: string;
  /** The incident report (deterministic text, no content). */
  report?: string;
  /** Whether acting modes act on it (abort, compact, cap); by default when it reaches looping. */
  act?: boolean;
  /** Short alert title; by default `<to>: <agent> (<session>)`. */
  title?: string;
  /**
   * Actions for the opencode plugin on a session subject (abort, a fresh session), queued
   * for the subject's tree after the mode's own. The detector decides them (it may ask
   * `ModeInfo.acts()`); the kernel queues and serves them like any directive.
   */
  directives?: DirectiveSpec[];
}

/** Which response mode is configured, for detectors whose behaviour depends on it (TOKENS.ModeInfo). */
export interface ModeInfo {
  type(): string;
  /** Whether the mode acts (refuses, aborts, compacts); `warn` only warns. */
  acts(): boolean;
}

/** A detector's verdict on one session for the Sessions readout. */
export interface SessionReadout {
  level: VerdictLevel;
  reason: string;
  source: string;
  /** Columns this detector adds to the session's row (flat, JSON values). */
  fields?: Record<string, string | number | boolean | null | readonly string[]>;
  /** Sparkline series, oldest first. */
  series?: Record<string, readonly number[]>;
  /** Latest input time seen (epoch ms). */
  last_event_at?: number;
  /** The incident its transitions on this session use (as in Transition.dedup_key). */
  dedup_key?: string;
}

/** The router gate's question, with the session's place in its tree. */
export interface GateContext {
  query: GateQuery;
  session: SessionInfo;
  /** The configured response mode (detectors that refuse only do so in an acting mode). */
  mode: string;
  /** Whether that mode acts (anything but a warning-only mode). */
  acting: boolean;
  now: number;
}

/** A detector's or a mode's part of the gate's answer; the strictest part wins. */
export interface GateVote {
  refuse?: { reason: string; retry_after_s: number };
  limit?: { max_context_tokens: number; mechanism: 'cap' | 'overflow'; reason: string };
  model_tripped?: boolean;
}

/** A generic table a plugin contributes to the admin page and `GET /panels`. */
export interface Panel {
  title: string;
  columns: { key: string; label: string }[];
  rows: Record<string, unknown>[];
  /** A chart of the same figures, drawn above the table. */
  chart?: PanelChart;
}

/** Line series over a shared x axis of times (the table beside it carries the numbers). */
export interface PanelChart {
  /** Epoch ms, ascending (one point per day, hour, ...). */
  x: number[];
  /** What y counts, shown on the axis: `usd` is drawn as dollars. */
  unit: string;
  series: {
    label: string;
    values: (number | null)[];
    /** Series of one group share a colour (a model's total and its part in loops). */
    group?: string;
    dashed?: boolean;
  }[];
}

/**
 * A route a plugin contributes to the HTTP service (its own readout and actions),
 * framework-free: the service mounts it with the schemas given.
 */
export interface PluginRoute {
  method: 'GET' | 'POST';
  url: string;
  summary: string;
  /** Mutating routes need the admin token. */
  admin?: boolean;
  params?: z.ZodType;
  querystring?: z.ZodType;
  body?: z.ZodType;
  handler(req: { params: any; query: any; body: any }): Promise<unknown>;
}

type Out = readonly Transition[] | Promise<readonly Transition[]>;

/**
 * A detector: consumes inputs, keeps its state in the store, returns the transitions
 * each input caused (an empty array when nothing changed: most inputs). Every method
 * is optional: a detector implements what it listens to. The detectors of one input
 * run concurrently, so a detector reads and writes only its own state.
 *
 * The unit of work (core/unit.ts), the contract every input method is called under:
 * - An input is judged inside a unit: every store read and write of every detector, the
 *   mode and the notifier commits at once, or not at all.
 * - A unit may be discarded and the input judged again from the start: when another
 *   writer changed a key the unit read (a compare-and-set conflict; up to 20 times), or
 *   when the store failed. So a method may run more than once for one input, and only
 *   the committed run counts.
 * - Store writes are safe: a discarded unit's are never written.
 * - Anything else a detector does (an in-process cache, a counter or a metric, a log
 *   line, an outside call) must not happen twice: do it after the commit
 *   (`afterCommit(fn)`, skipped for a discarded unit), or undo it when the unit is
 *   discarded (`onDiscard(fn)`, for a cache changed while judging). Outside a unit both
 *   run at once and never, respectively.
 * test/unit-contract.test.ts holds the built-in detectors to it: an input judged again
 * after a conflict counts once in every readout, sparkline and metric.
 */
export interface Detector {
  readonly type: string;
  onProgress?(ev: ProgressEvent, s: SessionInfo, origin: Origin): Out;
  onRequest?(r: RequestRecord, s: SessionInfo): Out;
  /** A verdict from an outside sensor (the watchdog). */
  onVerdict?(v: ExternalVerdict, s: SessionInfo): Out;
  /** Another detector's transition (never the detector's own). */
  onTransition?(t: Transition): Out;
  /**
   * A mode decided on a tree (a verdict, a compaction done, a Resume, a tick): `tree` is
   * the state it wrote. A detector that judges afresh after a recovery or a Resume
   * learns it here.
   */
  onTree?(ev: ModeEvent, tree: TreeState): Out;
  /** Time passed: the watchdog's tick and the service's timer call this. */
  onTick?(now: number): Out;
  /** Its part of the router gate's answer. */
  gate?(g: GateContext): GateVote | undefined | Promise<GateVote | undefined>;
  session?(id: string): SessionReadout | undefined | Promise<SessionReadout | undefined>;
  /** Sessions it tracks (the readout lists the union). */
  sessions?(): Promise<string[]>;
  report?(id: string): Promise<string | undefined>;
  panels?(): Promise<Panel[]>;
  /** Sessions evicted by the kernel's cap on tracked sessions: drop what is kept for them. */
  forget?(ids: readonly string[]): Promise<void>;
  /** A one-glance state for /health (the breaker's tripped models, ...). */
  health?(): Promise<Record<string, unknown>>;
  routes?(): PluginRoute[];
}

/**
 * A detector type. Its options are one top-level config section (`progress`, `breaker`);
 * `knobs()` returns them live (an admin PATCH applies at once). A section with
 * `enabled: false` switches the detector off.
 */
export interface DetectorPlugin<O extends object = any> {
  readonly kind: 'detector';
  readonly type: string;
  readonly section: string;
  readonly options: z.ZodObject<any>;
  create(c: DependencyContainer, knobs: () => O): Detector;
}

// ---------------------------------------------------------------------------
// modes

/** Per tree (keyed by its root session): what the mode decided and the gate enforces. */
export interface TreeState {
  root: string;
  /** Escalation stage of an acting mode: 0 none, 1 recovering, 2 recovering with a cap, 3 hard stop. */
  stage: 0 | 1 | 2 | 3;
  /** Scoped refusals: these conversations get 429 until lifted. */
  refused: Record<string, { reason: string; since: number }>;
  /** Stage 3: every conversation of the tree is refused until an admin Resume. */
  refuse_all?: { reason: string; since: number; dedup_key?: string };
  /** Context caps: per session id, or '*' for the whole tree. */
  limits: Record<string, { max_context_tokens: number; mechanism: 'cap' | 'overflow'; since: number; until?: number }>;
  /** When each recovery (stage 1 or 2) started; pruned to the recover window. */
  recoveries: number[];
  /** Open incidents of the tree (dedup_key) and the flagged sessions in each, with their level. */
  flagged: Record<string, Record<string, VerdictLevel>>;
  /** A recovery waits for the plugin to report the root's compaction done. */
  awaiting_compaction?: { session: string; since: number };
  updated_at: number;
}

export function emptyTree(root: string, now: number): TreeState {
  return { root, stage: 0, refused: {}, limits: {}, recoveries: [], flagged: {}, updated_at: now };
}

/** A verdict transition on a session, as a mode sees it. */
export interface VerdictModeEvent {
  type: 'verdict';
  session_id: string;
  root_id: string;
  agent?: string;
  detector: string;
  from: VerdictLevel;
  to: VerdictLevel;
  rule: string | null;
  /** One line, no content. */
  reason: string;
  /** The incident report (deterministic, no content). */
  report: string;
  source: string;
  dedup_key: string;
  severity?: Severity;
  act: boolean;
  title?: string;
}

export type ModeEvent =
  | VerdictModeEvent
  | { type: 'compaction_done'; session_id: string; root_id: string }
  /** The plugin acknowledged a directive (done). */
  | { type: 'acked'; directive: DirectiveType; session_id: string; root_id: string }
  /** Time passed (checked lazily, e.g. on a gate check of a recovering tree). */
  | { type: 'tick'; root_id: string }
  | { type: 'resume'; root_id: string; by: string };

export interface Decision {
  tree: TreeState;
  directives: DirectiveSpec[];
  alerts: AlertInput[];
}

/** A mode instance: built by its plugin from its options. Pure: no I/O, no clock. */
export interface Mode {
  readonly type: string;
  /** Whether it acts on a loop (refuse, abort, compact, cap); false for a warning-only mode. */
  readonly acts: boolean;
  /**
   * The sensor actions its decisions ask for (core/sensor.ts): readouts show the ones a
   * session's sensor cannot take.
   */
  readonly asks?: readonly SensorAction[];
  decide(tree: TreeState, ev: ModeEvent, now: number): Decision;
  /** Its part of the gate's answer for a conversation of this tree. */
  gate(tree: TreeState, session: string, now: number): GateVote | undefined;
  /**
   * When time alone will change the tree (epoch ms), if it will: the kernel sends the
   * mode a `tick` then, from its timer, and before a gate check that finds it due.
   */
  nextDue?(tree: TreeState): number | undefined;
}

/** A response mode: options under `modes.<type>`, selected by `modes.mode`. */
export interface ModePlugin<O extends object = any> {
  readonly kind: 'mode';
  readonly type: string;
  readonly options: z.ZodObject<any>;
  create(c: DependencyContainer, opts: O): Mode;
}

export type AnyPlugin = ChannelPlugin | DetectorPlugin | ModePlugin;
