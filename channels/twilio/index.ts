import { classChannel } from '../../core/registry.ts';
import { TwilioChannel } from './twilio.channel.ts';
import { type TwilioOptions, TwilioOptionsSchema } from './twilio.options.ts';

export const twilioPlugin = classChannel<TwilioOptions>('twilio', TwilioOptionsSchema, TwilioChannel);

export { TwilioOptionsSchema };
