import { z } from 'zod';
import type { Directive, DirectiveSpec, MarkerEvent, ProgressEvent } from './wire.ts';

// The sensor contract. What any agent harness reports is the progress event envelope
// of wire.ts (tool calls with fingerprint, coarse target, exit and landed; prompts;
// model calls with their usage; subagent links as session, parent session and agent),
// the same for every sensor. What differs is what a sensor can carry out: each one
// declares it here, per action. Modes ask for actions (the directives they queue);
// the sensor's adapter does what its agent can, and the readouts show an action a
// session's sensor cannot take, so a mode that silently cannot act is visible.

/** The actions a mode may ask of a sensor. */
export const SENSOR_ACTIONS = [
  /** Refuse one session's tool calls, with the reason and report shown to the model. */
  'block_tool',
  /** Put a message (the incident report) into the conversation: a nudge. */
  'inject',
  /** Summarise the conversation's context. */
  'compact',
  /** Keep the context under a token cap. */
  'cap_context',
  /** Interrupt what the session is doing now. */
  'abort',
  /** Stop the whole run (every session of the tree) until a Resume. */
  'stop_run',
  /** Show the operator a notification in the agent's window. */
  'toast',
] as const;
export type SensorAction = (typeof SENSOR_ACTIONS)[number];
export const SensorActionSchema = z.enum(SENSOR_ACTIONS);

/**
 * How a sensor carries out one action: itself (`native`), by another action it has
 * (`{ via }`, e.g. a report injected where no compaction is possible), only with the
 * router in front of the agent (`router`: the gate's refusal or cap), or not at all.
 */
export const SupportSchema = z.union([
  z.enum(['native', 'router', 'none']),
  z.strictObject({ via: SensorActionSchema }),
]);
export type Support = z.output<typeof SupportSchema>;

const HeaderName = z
  .string()
  .min(1)
  .max(64)
  .regex(/^[a-z0-9-]+$/, 'a lowercase header name');

/**
 * The request headers by which a router in front of the agent tells its conversations
 * apart, when the agent sends any: the header whose value is the Vigil session id of
 * the request's conversation, and optionally the parent session's and the agent name's.
 * Absent: the agent's model requests carry no conversation id, so a router cannot scope
 * a refusal to one of its sessions.
 */
export const GateHeadersSchema = z.strictObject({
  conversation: HeaderName,
  /** A subagent's id, when the agent sends it beside its parent's: `<conversation>.<child>`, child of `conversation`. */
  child: HeaderName.optional(),
  parent: HeaderName.optional(),
  agent: HeaderName.optional(),
});
export type GateHeaders = z.output<typeof GateHeadersSchema>;

export const SensorDescriptorSchema = z.strictObject({
  /** As the sensor names itself in the plugin header: `vigil-<name>/<version>`. */
  name: z
    .string()
    .min(1)
    .max(40)
    .regex(/^[a-z0-9][a-z0-9-]*$/, 'lowercase letters, digits and -'),
  /** The agent it watches, for readouts. */
  agent: z
    .string()
    .min(1)
    .max(80)
    .regex(/^[\x20-\x7e]+$/, 'printable ASCII'),
  capabilities: z.strictObject(
    Object.fromEntries(SENSOR_ACTIONS.map((a) => [a, SupportSchema])) as Record<SensorAction, typeof SupportSchema>,
  ),
  gate: GateHeadersSchema.optional(),
});
export type SensorDescriptor = z.output<typeof SensorDescriptorSchema>;

/** A sensor descriptor, validated (a plugin's declaration is checked like its options). */
export const defineSensor = (d: SensorDescriptor): SensorDescriptor => SensorDescriptorSchema.parse(d);

/** The action a directive asks for; none for a lift (the end of a block is part of blocking). */
export function actionOf(d: Pick<DirectiveSpec, 'type' | 'scope'>): SensorAction | undefined {
  switch (d.type) {
    case 'block':
      return d.scope === 'tree' ? 'stop_run' : 'block_tool';
    case 'abort':
      return 'abort';
    case 'compact':
      return 'compact';
    case 'toast':
      return 'toast';
    case 'fresh':
      return 'inject';
    case 'lift':
      return undefined;
  }
}

/** The sensor name in a plugin header value (`vigil-<name>/<version>`), if it has that form. */
export function sensorNameOf(pluginVersion: string | null | undefined): string | undefined {
  const m = /^vigil-([a-z0-9][a-z0-9-]*)\//.exec(pluginVersion ?? '');
  return m?.[1];
}

/** An asked action a sensor does not carry out itself: how it is done instead, or `none`. */
export interface ActionGap {
  action: SensorAction;
  /** `none`, `router` (only with the router in front), or `via <action>`. */
  how: string;
}

const howOf = (s: Support): string => (typeof s === 'string' ? s : `via ${s.via}`);

/** The actions of `asks` that `sensor` does not take natively, in the order asked. */
export function gapsOf(sensor: SensorDescriptor, asks: readonly SensorAction[]): ActionGap[] {
  return asks
    .filter((a) => sensor.capabilities[a] !== 'native')
    .map((a) => ({ action: a, how: howOf(sensor.capabilities[a]) }));
}

/** One line for readouts: `compact via inject; toast none` (empty when nothing is missing). */
export const gapLine = (gaps: readonly ActionGap[]): string => gaps.map((g) => `${g.action} ${g.how}`).join('; ');

// ---------------------------------------------------------------------------
// Hook bridges: the agents that report through hooks (Claude Code, Codex CLI, Gemini
// CLI) post each raw hook payload to a resident process on the same machine, reached
// over loopback only (the service's hook endpoint, or `vigil relay` in front of a
// service elsewhere). There a sensor's bridge reduces the payload in memory to progress
// events and answers the hook in its agent's format; the payload is dropped. Nothing
// raw is stored, logged, queued or forwarded (docs/architecture.md, hook endpoint).

/** What a hook call decided from the pending directives: the agent's answer, and what to tell Vigil. */
export interface HookAnswer {
  /** The JSON the agent gets (absent: no opinion). */
  output?: Record<string, unknown>;
  /** Directives carried out (or that this agent cannot carry out), to acknowledge. */
  acks: { id: string; root_id: string; session_id: string }[];
  /** compaction_done markers: a recovery's report reached the model in place of a compaction. */
  markers: MarkerEvent[];
}

/** A schema of zod or zod/mini: both parse the same way. */
export interface Checks<T> {
  safeParse(v: unknown): { success: true; data: T } | { success: false };
}

/** The I/O of one hook call, given by the process that hosts the endpoint. */
export interface HookIo {
  /** Stamps the events of this call (epoch ms). */
  readonly now: number;
  /** The bridge's state for the payload's session (kept between calls; `fresh` when none or unreadable). */
  load<T>(schema: Checks<T>, fresh: () => T): T;
  /** Keeps `state` for the payload's session (fingerprints, ids and counters only). */
  save(state: unknown): void;
  /** The last bytes of a local file the agent writes (its transcript); '' when unreadable. */
  tail(path: string | undefined): string;
  /**
   * The whole lines appended to a local file the agent writes since this session last
   * read it this way (the first time, or after the file shrank: its tail); '' when none
   * or unreadable. What an append-only log needs read on every call, without reading
   * it all again.
   */
  appended(path: string | undefined): string;
  /**
   * Posts `events` (the answer holds the pending directives of their trees) or, with
   * none, asks for those of `ask`'s tree; lets `decide` answer; acknowledges what it
   * carried out and posts its markers. Undefined: Vigil did not answer (no opinion).
   */
  exchange(
    events: readonly ProgressEvent[],
    ask: string,
    decide: (directives: Directive[]) => HookAnswer,
  ): Promise<Record<string, unknown> | undefined>;
}

/** A sensor's hook bridge: one raw payload in, the agent's answer out. */
export interface HookBridge {
  /** The sensor's name (core/sensor.ts descriptor): the endpoint's path is /hooks/<sensor>. */
  readonly sensor: string;
  /** The payload's session, by which calls are kept in order and state is kept; undefined: not a payload of this agent. */
  sessionOf(payload: unknown): string | undefined;
  /**
   * Whether Vigil never acts from this call's answer (a tool's result, a subagent's
   * end): the host then answers no opinion at once and reduces the payload behind the
   * answer, its events sent with the session's next call that needs an answer (or
   * shortly after). Absent: every call is answered.
   */
  observes?(payload: unknown): boolean;
  /** Reduces the payload and answers; undefined: no opinion. Must not keep the payload. */
  handle(payload: unknown, io: HookIo): Promise<Record<string, unknown> | undefined>;
}
