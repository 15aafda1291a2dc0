import { hostname } from 'node:os';
import { z } from 'zod';
import { ENV_NAME } from '../shared/env.ts';
import { CREDENTIALS_IN_URL, hasCredentials } from '../shared/http.ts';

export const PagerDutyOptionsSchema = z.strictObject({
  /** Env var holding the 32-character integration (routing) key; it travels in the body. */
  routing_key_env: z.string().regex(ENV_NAME, 'an environment variable name'),
  /** Events API v2 endpoint; configurable for an EU account or a test server. */
  url: z
    .url({ protocol: /^https?$/ })
    .refine((u) => !hasCredentials(u), CREDENTIALS_IN_URL)
    .default('https://events.pagerduty.com/v2/enqueue'),
  /** payload.source: the affected system, preferably a hostname. */
  source: z
    .string()
    .min(1)
    .max(255)
    .default(() => `vigil@${hostname()}`),
  /** payload.group: a logical grouping (cluster, team) for PagerDuty event rules. */
  group: z.string().min(1).max(255).default('vigil'),
  /** Per request; the notifier's delivery_timeout still caps the whole attempt. */
  timeout_ms: z.number().int().positive().max(120_000).default(5_000), // 5 s
});
export type PagerDutyOptions = z.output<typeof PagerDutyOptionsSchema>;
