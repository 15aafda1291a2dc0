import type { ChannelPlugin } from '../../core/contracts.ts';
import { TOKENS } from '../../core/tokens.ts';
import { PagerDutyChannel } from './pagerduty.channel.ts';
import { type PagerDutyOptions, PagerDutyOptionsSchema } from './pagerduty.options.ts';

export const pagerdutyPlugin: ChannelPlugin<PagerDutyOptions> = {
  kind: 'channel',
  type: 'pagerduty',
  options: PagerDutyOptionsSchema,
  create(c, opts, name) {
    const child = c.createChildContainer();
    child.register(TOKENS.PluginOptions, { useValue: opts });
    child.register(TOKENS.PluginName, { useValue: name });
    return child.resolve(PagerDutyChannel);
  },
};

export { PagerDutyOptionsSchema };
