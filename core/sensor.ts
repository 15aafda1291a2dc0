import { z } from 'zod';
import type { DirectiveSpec } from './wire.ts';

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
