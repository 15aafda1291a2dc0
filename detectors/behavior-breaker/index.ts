import type { Clock } from '../../core/clock.ts';
import type { Knobs } from '../../core/knobs.ts';
import type { Logger } from '../../core/logger.ts';
import type { Notifier } from '../../core/notifier/notifier.ts';
import type { DetectorPlugin } from '../../core/registry.ts';
import type { Store } from '../../core/store/store.ts';
import { TOKENS } from '../../core/tokens.ts';
import { BehaviorBreaker } from './breaker.detector.ts';
import { type BreakerOptions, BreakerOptionsSchema } from './breaker.options.ts';

/** The behavior breaker: its knobs are the `breaker` section (live through Knobs). */
export const behaviorBreakerPlugin: DetectorPlugin<BreakerOptions, BehaviorBreaker> = {
  kind: 'detector',
  type: 'behavior-breaker',
  section: 'breaker',
  options: BreakerOptionsSchema,
  create(c) {
    const knobs = c.resolve<Knobs>(TOKENS.Knobs);
    return new BehaviorBreaker(
      c.resolve<Store>(TOKENS.Store),
      c.resolve<Clock>(TOKENS.Clock),
      c.resolve<Logger>(TOKENS.Logger).child({ part: 'breaker' }),
      c.resolve<Notifier>(TOKENS.Notifier),
      () => knobs.get<BreakerOptions>('breaker'),
    );
  },
};

export { BreakerOptionsSchema };
