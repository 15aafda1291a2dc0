import { z } from 'zod';
import { SeveritySchema } from './alert.ts';
import type { ChannelCommon } from './contracts.ts';
import { duration } from './duration.ts';
import type { Registry } from './registry.ts';

// Sections owned by the core. Plugin sections (detectors, modes, channel options)
// are composed in from the registry by rootSchema().
export const ServerSchema = z
  .strictObject({
    host: z.string().min(1).default('127.0.0.1'),
    port: z.number().int().min(0).max(65535).default(7411),
    /** Env var holding the admin token; required on mutating admin routes and off loopback. */
    admin_token_env: z.string().min(1).default('VIGIL_ADMIN_TOKEN'),
    /**
     * Env var holding the ingestion token: what sensors and routers send (the opencode
     * plugin, the watchdog, a router's records and gate checks). When set (always off
     * loopback) their routes need it; it never opens an admin route.
     */
    ingest_token_env: z.string().min(1).default('VIGIL_INGEST_TOKEN'),
    body_limit_bytes: z.number().int().positive().default(262_144),
    /** A request (headers and body) not received in full by then is answered 408 and its connection closed. */
    request_timeout: duration().prefault('30s'),
    /** The headers of a request not received in full by then: 408 and closed (slow clients hold no socket). */
    headers_timeout: duration().prefault('10s'),
    /**
     * Host names accepted in the Host header besides loopback names (`localhost`,
     * `*.localhost`) and IP literals, which a DNS rebinding cannot use; `"*"` accepts any.
     */
    allowed_hosts: z
      .array(
        z
          .string()
          .regex(/^(\*|[A-Za-z0-9.-]{1,253})$/, 'a host name (no port), or "*"')
          .transform((h) => h.toLowerCase()),
      )
      .max(100)
      .default([]),
    /** Per client address on the ingestion routes: at most `max` requests per `window` (429 beyond). */
    rate_limit: z
      .strictObject({
        max: z.number().int().positive().default(3_000),
        window: duration().prefault('1m'),
      })
      .prefault({}),
    /**
     * Per client address: at most `max` sessions the service does not know yet per
     * `window` (429 beyond; inputs for known sessions go on), so one sender flooding new
     * ids cannot push the others' sessions out of detection.max_sessions.
     */
    new_sessions: z
      .strictObject({
        max: z.number().int().positive().default(1_000),
        window: duration().prefault('1m'),
      })
      .prefault({}),
    /** Event times more than this ahead of the service's clock are refused (naming the field). */
    max_clock_skew: duration().prefault('5m'),
    /** Event times older than this are refused (a replay belongs in `vigil replay`). */
    max_event_age: duration().prefault('30d'),
    /**
     * The local hook endpoint (POST /hooks/<sensor>): the agents' hooks post their raw
     * payloads there, to be reduced in memory and dropped. It answers loopback peers
     * only, and a service bound off loopback mounts it only when this is true (the
     * hooks of the agents on the service's own machine then still reach it).
     */
    hooks_off_loopback: z.boolean().default(false),
    /** The largest hook payload read (a Read of a big file carries it whole); past it the hook gets no opinion. */
    hook_body_limit_bytes: z.number().int().positive().default(33_554_432),
  })
  .refine((s) => s.headers_timeout <= s.request_timeout, {
    path: ['headers_timeout'],
    message: 'must be <= request_timeout',
  });

export const StoreSchema = z.strictObject({
  /** auto: Redis when a Redis URL is configured (redis_url or the redis_url_env variable), else memory. */
  backend: z.enum(['auto', 'memory', 'redis']).default('auto'),
  /** Env var holding the Redis URL (it may carry a password, so not in config by default). */
  redis_url_env: z.string().min(1).default('REDIS_URL'),
  redis_url: z.string().min(1).optional(),
  key_prefix: z
    .string()
    .regex(/^[A-Za-z0-9:_{}.-]+$/)
    .default('vigil'),
  /** A Redis command with no answer by then fails: ingestion answers 503, the gate falls back to gate.on_error. */
  timeout: duration().prefault('1s'),
});

export const GateSchema = z.strictObject({
  /** A gate check that takes longer is answered by on_error (a slow store must not stall the model path). */
  timeout: duration().prefault('500ms'),
  /** The answer when the check fails or times out: allow (fail open, the default) or refuse (429). */
  on_error: z.enum(['allow', 'refuse']).default('allow'),
});

export const DetectionSchema = z.strictObject({
  /** How often detectors that keep time judge with no input (restore stalls, pending breaker evidence); 0: never. */
  tick_interval: duration().prefault('15s'),
  /**
   * Sessions tracked at most (on Redis too); past it the least recently active are
   * forgotten on the tick, logged and counted.
   */
  max_sessions: z.number().int().min(100).max(10_000_000).default(100_000),
  /**
   * A tree with no sensor input (plugin event, request record, outside verdict) for this
   * long is shown as stale (an opencode server long gone): its plugin no longer "live",
   * and it leaves the refused list of the readouts (its state is kept; Resume still works).
   */
  stale_after: duration().prefault('30m'),
  /** A session with input within this is never evicted by max_sessions (the cap waits until it is idle). */
  active_window: duration().prefault('15m'),
});

const RateLimitSchema = z.strictObject({
  max: z.number().int().positive().default(10),
  window: duration().prefault('10m'),
});

export const ChannelCommonSchema = z.strictObject({
  name: z.string().regex(/^[a-z0-9][a-z0-9_-]{0,63}$/, 'lowercase letters, digits, - and _'),
  type: z.string().min(1),
  enabled: z.boolean().default(true),
  min_severity: SeveritySchema.default('warning'),
  resolve_messages: z.boolean().default(true),
  rate_limit: RateLimitSchema.prefault({}),
  quiet_window: duration().prefault('5m'),
});
const COMMON_KEYS = new Set(Object.keys(ChannelCommonSchema.shape));

export const NotificationsCoreSchema = {
  /** Abort a delivery attempt after this long (a timeout is retryable). */
  delivery_timeout: duration().prefault('10s'),
  /** Wait before the first retry; each later wait doubles (with jitter) up to retry_max_delay. */
  retry_delay: duration().prefault('2s'),
  /** Ceiling of one wait between attempts (a provider's Retry-After may ask for longer). */
  retry_max_delay: duration().prefault('5m'),
  /** Keep retrying a failed delivery until the alert is this old, then log it as failed. */
  max_age: duration().prefault('1h'),
  /** Give up after this many attempts as well (0: only max_age limits). */
  max_attempts: z.number().int().min(0).max(10_000).default(0),
  /** In-process queue: on a clean stop, wait this long for queued alerts to go out. */
  drain_timeout: duration().prefault('10s'),
  /**
   * In-process queue: the alerts still undelivered after the drain are written to this
   * file and delivered at the next start. null: `vigil serve` spools to
   * $XDG_STATE_HOME/vigil/alert-spool-<port>.json, an embedder does not; false: never.
   */
  spool_file: z
    .union([z.literal(false), z.string().min(1).max(4096)])
    .nullable()
    .default(null),
  /** Delivery log entries kept (successes and failures). */
  log_size: z.number().int().positive().default(500),
  /** Parallel deliveries per channel in each process; 1 keeps each incident's messages in order. */
  concurrency: z.number().int().positive().max(64).default(1),
  /** BullMQ job lock; a worker that dies mid-delivery loses its lock after this and the job runs again. */
  lock_duration: duration().prefault('30s'),
  /** How often BullMQ looks for jobs whose worker died. */
  stalled_interval: duration().prefault('30s'),
};

export type ChannelEntry = ChannelCommon & { options: Record<string, unknown> };

/** The `modes` section: `mode` (which registered mode responds) and each mode's options. */
export function modesSchema(registry: Registry) {
  const shape: Record<string, z.ZodType> = {};
  for (const m of registry.modes.values()) shape[m.type] = m.options.prefault({});
  const types = [...registry.modes.keys()];
  const mode = types.length
    ? z.enum(types as [string, ...string[]]).default(types.includes('warn') ? 'warn' : types[0])
    : z.string().optional();
  return z.strictObject({ mode, ...shape });
}

/** The sections an operator may change at run time (PATCH /knobs): every detector's and `modes`. */
export function knobSchemas(registry: Registry): Record<string, z.ZodType> {
  const out: Record<string, z.ZodType> = {};
  for (const d of registry.detectors.values()) out[d.section] = d.options;
  out.modes = modesSchema(registry);
  return out;
}

/** Builds the root schema from what is registered: one source of truth for config, knobs and the API. */
export function rootSchema(registry: Registry) {
  const channelEntry = z.unknown().transform((raw, ctx): ChannelEntry => {
    if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) {
      ctx.addIssue({ code: 'custom', message: 'expected a channel object' });
      return z.NEVER;
    }
    const entry = raw as Record<string, unknown>;
    if ('remove' in entry) {
      ctx.addIssue({
        code: 'custom',
        path: ['remove'],
        message: `no channel named ${JSON.stringify(entry.name)} below this file to remove`,
      });
      return z.NEVER;
    }
    const type = entry.type;
    if (typeof type !== 'string' || !registry.channels.has(type)) {
      const known = registry.channelTypes().join(', ');
      ctx.addIssue({
        code: 'custom',
        path: ['type'],
        message:
          typeof type === 'string'
            ? `unknown channel type "${type}" (known: ${known})`
            : `missing channel type (known: ${known})`,
      });
      return z.NEVER;
    }
    const common: Record<string, unknown> = {};
    const rest: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(entry)) (COMMON_KEYS.has(k) ? common : rest)[k] = v;
    const c = ChannelCommonSchema.safeParse(common);
    const plugin = registry.channels.get(type)!;
    const o = plugin.options.safeParse(rest);
    for (const r of [c, o]) {
      if (!r.success) for (const issue of r.error.issues) ctx.addIssue({ ...issue, path: issue.path } as never);
    }
    if (!c.success || !o.success) return z.NEVER;
    return { ...(c.data as ChannelCommon), options: o.data as Record<string, unknown> };
  });

  const sections: Record<string, z.ZodType> = {};
  for (const [name, schema] of registry.sections) sections[name] = schema.prefault({});
  for (const d of registry.detectors.values()) sections[d.section] = d.options.prefault({});

  return z
    .strictObject({
      /** Plugin modules (paths relative to the config file, or package names) loaded before validation. */
      plugins: z.array(z.string().min(1).max(1024)).default([]),
      server: ServerSchema.prefault({}),
      store: StoreSchema.prefault({}),
      notifications: z
        .strictObject({
          ...NotificationsCoreSchema,
          channels: z.array(channelEntry).default([]),
        })
        .prefault({}),
      detection: DetectionSchema.prefault({}),
      gate: GateSchema.prefault({}),
      modes: modesSchema(registry).prefault({}),
      ...sections,
    })
    .superRefine((cfg, ctx) => {
      const seen = new Set<string>();
      cfg.notifications.channels.forEach((ch, i) => {
        if (seen.has(ch.name)) {
          ctx.addIssue({
            code: 'custom',
            path: ['notifications', 'channels', i, 'name'],
            message: `duplicate channel name "${ch.name}"`,
          });
        }
        seen.add(ch.name);
      });
    });
}

export type VigilConfig = z.output<ReturnType<typeof rootSchema>> & Record<string, any>;
