import type { Clock } from '../../core/clock.ts';
import type { DetectorPlugin, ModeInfo } from '../../core/contracts.ts';
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
    return new SessionHygieneDetector({
      store: c.resolve<Store>(TOKENS.Store),
      clock: c.resolve<Clock>(TOKENS.Clock),
      tree: c.resolve<SessionTree>(TOKENS.Tree),
      logger: c.resolve<Logger>(TOKENS.Logger),
      mode: c.resolve<ModeInfo>(TOKENS.ModeInfo),
      knobs,
    });
  },
});

export { HygieneOptionsSchema, SessionHygieneDetector };
