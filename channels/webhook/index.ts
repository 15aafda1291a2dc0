import { classChannel } from '../../core/registry.ts';
import { WebhookChannel } from './webhook.channel.ts';
import { type WebhookOptions, WebhookOptionsSchema } from './webhook.options.ts';

export const webhookPlugin = classChannel<WebhookOptions>(
  'webhook',
  WebhookOptionsSchema,
  WebhookChannel,
  // headers_env values are env var names too; the core checks plain `*_env` strings itself.
  (o) => Object.values(o.headers_env ?? {}),
);

export { WebhookOptionsSchema };
