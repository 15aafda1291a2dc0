import { desktopPlugin } from './channels/desktop/index.ts';
import { pagerdutyPlugin } from './channels/pagerduty/index.ts';
import { twilioPlugin } from './channels/twilio/index.ts';
import { webhookPlugin } from './channels/webhook/index.ts';
import { Registry } from './core/registry.ts';
import { behaviorBreakerPlugin } from './detectors/behavior-breaker/index.ts';
import { noProgressPlugin } from './detectors/no-progress/index.ts';
import { autoCompactPlugin } from './modes/auto-compact/index.ts';
import { autoLimitContextPlugin } from './modes/auto-limit-context/index.ts';
import { autoRecoverPlugin } from './modes/auto-recover/index.ts';
import { warnPlugin } from './modes/warn/index.ts';

/** A registry with every built-in plugin. Third parties add theirs with `registry.register(plugin)`. */
export function createRegistry(): Registry {
  return new Registry()
    .register(desktopPlugin)
    .register(webhookPlugin)
    .register(pagerdutyPlugin)
    .register(twilioPlugin)
    .register(noProgressPlugin)
    .register(behaviorBreakerPlugin)
    .register(warnPlugin)
    .register(autoCompactPlugin)
    .register(autoLimitContextPlugin)
    .register(autoRecoverPlugin);
}
