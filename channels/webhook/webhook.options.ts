import { z } from 'zod';
import { ENV_NAME } from '../shared/env.ts';
import { CREDENTIALS_IN_URL, hasCredentials } from '../shared/http.ts';

const EnvName = z.string().regex(ENV_NAME, 'an environment variable name');
/** RFC 9110 token: what a header name may contain. */
const HeaderName = z.string().regex(/^[A-Za-z0-9!#$%&'*+.^_`|~-]+$/, 'not a valid header name');
/** Headers the channel writes itself: an operator overriding them would break the format or the signature. */
const RESERVED = new Set([
  'content-type',
  'content-length',
  'host',
  'connection',
  'transfer-encoding',
  'webhook-id',
  'webhook-timestamp',
  'webhook-signature',
]);

/** ntfy's JSON publish goes to the root (or a base path ending in /), never to /<topic>. */
export function ntfyRoot(url: string): boolean {
  return URL.canParse(url) && new URL(url).pathname.endsWith('/');
}

export const WEBHOOK_FORMATS = ['generic', 'ntfy', 'slack'] as const;

export const WebhookOptionsSchema = z
  .strictObject({
    /** Where to POST. For ntfy: the server root (https://ntfy.sh), the topic goes in the body. */
    url: z
      .url({ protocol: /^https?$/ })
      .refine((u) => !hasCredentials(u), CREDENTIALS_IN_URL)
      .optional(),
    /** Env var holding the URL instead, for URLs that are secrets (Slack incoming webhooks). */
    url_env: EnvName.optional(),
    /** generic: the alert as JSON, signed per Standard Webhooks; ntfy: JSON publish; slack: incoming webhook. */
    format: z.enum(WEBHOOK_FORMATS).default('generic'),
    /** generic only, required: env var holding the signing secret (`whsec_` + base64). */
    secret_env: EnvName.optional(),
    /** ntfy only: the topic (on a public server the topic is the password: prefer topic_env). */
    topic: z
      .string()
      .regex(/^[-_A-Za-z0-9]{1,64}$/, 'an ntfy topic: 1-64 of A-Z a-z 0-9 _ -')
      .optional(),
    /** ntfy only: env var holding the topic instead. */
    topic_env: EnvName.optional(),
    /** Extra headers sent as given (not secrets: use headers_env for those). */
    headers: z.record(HeaderName, z.string().max(1024)).default({}),
    /** Extra headers whose values are read from env vars, e.g. {Authorization: NTFY_AUTH} = "Bearer tk_...". */
    headers_env: z.record(HeaderName, EnvName).default({}),
    /** Per request; the notifier's delivery_timeout still caps the whole attempt. */
    timeout_ms: z.number().int().positive().max(120_000).default(5_000), // 5 s
  })
  .superRefine((o, ctx) => {
    if ((o.url === undefined) === (o.url_env === undefined)) {
      ctx.addIssue({ code: 'custom', path: ['url'], message: 'set exactly one of url, url_env' });
    }
    if (o.format === 'generic' && o.secret_env === undefined) {
      ctx.addIssue({
        code: 'custom',
        path: ['secret_env'],
        message: 'required for format generic: the env var holding the whsec_ signing secret',
      });
    }
    if (o.format !== 'generic' && o.secret_env !== undefined) {
      ctx.addIssue({ code: 'custom', path: ['secret_env'], message: `only for format generic (not ${o.format})` });
    }
    if (o.format === 'ntfy' && o.url !== undefined && !ntfyRoot(o.url)) {
      ctx.addIssue({
        code: 'custom',
        path: ['url'],
        message: 'format ntfy publishes JSON to the server root (https://ntfy.sh/): put the topic in topic',
      });
    }
    if (o.format === 'ntfy' && (o.topic === undefined) === (o.topic_env === undefined)) {
      ctx.addIssue({ code: 'custom', path: ['topic'], message: 'format ntfy needs exactly one of topic, topic_env' });
    }
    if (o.format !== 'ntfy') {
      for (const k of ['topic', 'topic_env'] as const) {
        if (o[k] !== undefined) ctx.addIssue({ code: 'custom', path: [k], message: 'only for format ntfy' });
      }
    }
    for (const k of ['headers', 'headers_env'] as const) {
      for (const h of Object.keys(o[k])) {
        if (RESERVED.has(h.toLowerCase())) {
          ctx.addIssue({ code: 'custom', path: [k, h], message: 'set by the channel itself' });
        }
      }
    }
  });
export type WebhookOptions = z.output<typeof WebhookOptionsSchema>;
