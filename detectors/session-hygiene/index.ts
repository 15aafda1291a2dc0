import type { Clock } from '../../core/clock.ts';
import type { DetectorPlugin } from '../../core/contracts.ts';
import type { Knobs } from '../../core/knobs.ts';
import type { Logger } from '../../core/logger.ts';
import { definePlugin } from '../../core/registry.ts';
import type { Store } from '../../core/store/store.ts';
import { TOKENS } from '../../core/tokens.ts';
import type { SessionTree } from '../../core/tree.ts';
import { SessionHygieneDetector, TYPE } from './hygiene.detector.ts';
import { type HygieneOptions, HygieneOptionsSchema } from './options.ts';

/** The session-hygiene detector: its knobs are the `hygiene` section (live through Knobs). */
export const sessionHygienePlugin = definePlugin<DetectorPlugin<HygieneOptions>>({
  kind: 'detector',
  type: TYPE,
  section: 'hygiene',
  options: HygieneOptionsSchema,
  create: (c, knobs) => {
    const live = c.resolve<Knobs>(TOKENS.Knobs);
    return new SessionHygieneDetector({
      store: c.resolve<Store>(TOKENS.Store),
      clock: c.resolve<Clock>(TOKENS.Clock),
      tree: c.resolve<SessionTree>(TOKENS.Tree),
      logger: c.resolve<Logger>(TOKENS.Logger),
      // The kernel's `modes.mode`: whether the configured response acts.
      mode: () => String(live.get<{ mode?: unknown }>('modes')?.mode ?? 'warn'),
      knobs,
    });
  },
});

export { HygieneOptionsSchema, SessionHygieneDetector };
