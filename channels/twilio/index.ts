import type { ChannelPlugin } from '../../core/contracts.ts';
import { TOKENS } from '../../core/tokens.ts';
import { TwilioChannel } from './twilio.channel.ts';
import { type TwilioOptions, TwilioOptionsSchema } from './twilio.options.ts';

export const twilioPlugin: ChannelPlugin<TwilioOptions> = {
  kind: 'channel',
  type: 'twilio',
  options: TwilioOptionsSchema,
  create(c, opts, name) {
    const child = c.createChildContainer();
    child.register(TOKENS.PluginOptions, { useValue: opts });
    child.register(TOKENS.PluginName, { useValue: name });
    return child.resolve(TwilioChannel);
  },
};

export { TwilioOptionsSchema };
