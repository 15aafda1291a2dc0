import { z } from 'zod';
import { ENV_NAME } from '../shared/env.ts';
import { CREDENTIALS_IN_URL, hasCredentials } from '../shared/http.ts';

const EnvName = z.string().regex(ENV_NAME, 'an environment variable name');
const E164 = z.string().regex(/^\+[1-9]\d{6,14}$/, 'an E.164 number: + and 7 to 15 digits');

export const TwilioOptionsSchema = z
  .strictObject({
    /** Env var holding the Account SID (AC...). */
    account_sid_env: EnvName,
    /** Env var holding the Auth Token. */
    auth_token_env: EnvName,
    /** Sender: an E.164 number or an alphanumeric sender id. */
    from: z
      .union([E164, z.string().regex(/^(?=.*[A-Za-z])[A-Za-z0-9 ]{1,11}$/, 'an alphanumeric sender id')])
      .optional(),
    /** Messaging Service (MG...). With `from` as well, Twilio sends from that number of the service's pool. */
    messaging_service_sid: z
      .string()
      .regex(/^MG[0-9a-fA-F]{32}$/, 'a Messaging Service SID (MG + 32 hex)')
      .optional(),
    /** Recipients, each sent its own SMS. */
    to: z
      .array(E164)
      .min(1)
      .max(20)
      .refine((a) => new Set(a).size === a.length, 'a number is listed twice'),
    /** Base URL instead of https://api.twilio.com (tests, a mock such as Prism). */
    url: z
      .url({ protocol: /^https?$/ })
      .refine((u) => !hasCredentials(u), CREDENTIALS_IN_URL)
      .optional(),
    /** Segment budget: the body fits this many GSM-7 segments (1 = 160 characters, n > 1 = 153 each). */
    max_segments: z.number().int().min(1).max(10).default(1),
    /** Per request (the SDK's own timeout); the notifier's delivery_timeout still caps the attempt. */
    timeout_ms: z.number().int().positive().max(120_000).default(5_000), // 5 s
  })
  .superRefine((o, ctx) => {
    if (o.from === undefined && o.messaging_service_sid === undefined) {
      ctx.addIssue({ code: 'custom', path: ['from'], message: 'set from, messaging_service_sid, or both' });
    }
  });
export type TwilioOptions = z.output<typeof TwilioOptionsSchema>;
