import type { ChannelPlugin } from '../../core/contracts.ts';
import { TOKENS } from '../../core/tokens.ts';
import { WebhookChannel } from './webhook.channel.ts';
import { type WebhookOptions, WebhookOptionsSchema } from './webhook.options.ts';

export const webhookPlugin: ChannelPlugin<WebhookOptions> = {
  kind: 'channel',
  type: 'webhook',
  options: WebhookOptionsSchema,
  // headers_env values are env var names too; the core checks plain `*_env` strings itself.
  secrets: (o) => Object.values(o.headers_env ?? {}),
  create(c, opts, name) {
    const child = c.createChildContainer();
    child.register(TOKENS.PluginOptions, { useValue: opts });
    child.register(TOKENS.PluginName, { useValue: name });
    return child.resolve(WebhookChannel);
  },
};

export { WebhookOptionsSchema };
