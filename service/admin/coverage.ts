import { z } from 'zod';
import { ChannelCommonSchema, rootSchema } from '../../core/config-schema.ts';
import type { Registry } from '../../core/registry.ts';
import { knobSchemas } from './knob-schema.ts';

// Knob coverage: every knob of the config schema has a control on the admin page or a
// reason here why not. The test (coverage.test.ts and the browser test) fails on a new
// knob that has neither, and on a reason that no longer matches any knob.

/** Channel fields with a control on the Channels view (what PATCH /channels/:name takes). */
export const CHANNEL_CONTROLS = ['enabled', 'min_severity', 'resolve_messages'] as const;

const STARTUP = 'read once at startup (binding, backend, queue worker): change the config file and restart';
const CHANNEL_CONFIG = 'not changeable at run time (PATCH /channels takes enabled, min_severity, resolve_messages)';

/** Knob path or path prefix -> why it has no control on the page. */
export const NOT_IN_ADMIN: Record<string, string> = {
  server: STARTUP,
  store: STARTUP,
  'notifications.delivery_timeout': STARTUP,
  'notifications.retry_delay': STARTUP,
  'notifications.retry_max_delay': STARTUP,
  'notifications.max_age': STARTUP,
  'notifications.max_attempts': STARTUP,
  'notifications.drain_timeout': STARTUP,
  'notifications.spool_file': STARTUP,
  'notifications.log_size': STARTUP,
  'notifications.concurrency': STARTUP,
  'notifications.lock_duration': STARTUP,
  'notifications.stalled_interval': STARTUP,
  'notifications.channels[].name': 'a channel identity: channels are added and renamed in the config file',
  'notifications.channels[].type': 'a channel identity: channels are added and renamed in the config file',
  'notifications.channels[].rate_limit': CHANNEL_CONFIG,
  'notifications.channels[].quiet_window': CHANNEL_CONFIG,
  'notifications.channels[].options': 'type-specific options name secrets by env var: config file only, never shown',
  plugins: 'plugin modules are imported once at startup, before the config is validated: config file only',
  detection: STARTUP,
  gate: STARTUP,
  local_compute: 'read by the watchdog process from its config file, not by the service',
  watchdog: 'the watchdog is its own process reading the config file each tick; its heartbeat is on the Health view',
};

type Json = Record<string, unknown>;

/** Leaf paths of a JSON Schema: objects with properties recurse, anything else is a knob. */
export function schemaLeaves(schema: Json, at: string): string[] {
  const props = schema.properties as Record<string, Json> | undefined;
  if (schema.type === 'object' && props && Object.keys(props).length) {
    return Object.entries(props).flatMap(([k, v]) => schemaLeaves(v, at ? `${at}.${k}` : k));
  }
  return [at];
}

const toJson = (s: z.ZodType) => z.toJSONSchema(s, { io: 'input', unrepresentable: 'any' }) as Json;

/** Every knob of the whole config schema; channel entries by their common fields and each type's options. */
export function configLeaves(registry: Registry): string[] {
  const out: string[] = [];
  for (const leaf of schemaLeaves(toJson(rootSchema(registry)), '')) {
    if (leaf !== 'notifications.channels') {
      out.push(leaf);
      continue;
    }
    out.push(...schemaLeaves(toJson(ChannelCommonSchema), 'notifications.channels[]'));
    for (const [type, p] of registry.channels) {
      out.push(...schemaLeaves(toJson(p.options), `notifications.channels[].options.${type}`));
    }
  }
  return out;
}

/** Knobs the page has a control for: every live knob section (generated) and the channel toggles. */
export function controlledLeaves(registry: Registry): string[] {
  const out: string[] = [];
  for (const [section, { schema }] of Object.entries(knobSchemas(registry)))
    out.push(...schemaLeaves(toJson(schema), section));
  for (const c of CHANNEL_CONTROLS) out.push(`notifications.channels[].${c}`);
  return out;
}

export function reasonFor(leaf: string): string | undefined {
  for (const [prefix, why] of Object.entries(NOT_IN_ADMIN)) {
    if (leaf === prefix || leaf.startsWith(`${prefix}.`)) return why;
  }
  return undefined;
}
