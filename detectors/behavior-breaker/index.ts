import type { Clock } from '../../core/clock.ts';
import type { DetectorPlugin, Transition } from '../../core/contracts.ts';
import type { Logger } from '../../core/logger.ts';
import { definePlugin } from '../../core/registry.ts';
import type { Store } from '../../core/store/store.ts';
import { TOKENS } from '../../core/tokens.ts';
import type { SessionTree } from '../../core/tree.ts';
import { BehaviorBreaker, TYPE } from './breaker.detector.ts';
import { type BreakerOptions, BreakerOptionsSchema } from './breaker.options.ts';

/** The behavior breaker: its knobs are the `breaker` section (live through Knobs). */
export const behaviorBreakerPlugin = definePlugin<DetectorPlugin<BreakerOptions>>({
  kind: 'detector',
  type: TYPE,
  section: 'breaker',
  options: BreakerOptionsSchema,
  create: (c, knobs) =>
    new BehaviorBreaker(
      c.resolve<Store>(TOKENS.Store),
      c.resolve<Clock>(TOKENS.Clock),
      c.resolve<Logger>(TOKENS.Logger),
      c.resolve<SessionTree>(TOKENS.Tree),
      c.resolve<(ts: readonly Transition[]) => Promise<void>>(TOKENS.Emit),
      knobs,
    ),
});

export { BehaviorBreaker, BreakerOptionsSchema };
