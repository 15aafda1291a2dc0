import { classChannel } from '../../core/registry.ts';
import { PagerDutyChannel } from './pagerduty.channel.ts';
import { type PagerDutyOptions, PagerDutyOptionsSchema } from './pagerduty.options.ts';

export const pagerdutyPlugin = classChannel<PagerDutyOptions>('pagerduty', PagerDutyOptionsSchema, PagerDutyChannel);

export { PagerDutyOptionsSchema };
