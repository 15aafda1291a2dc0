import type { Clock } from '../../core/clock.ts';
import type { DetectorPlugin } from '../../core/contracts.ts';
import { definePlugin } from '../../core/registry.ts';
import type { Store } from '../../core/store/store.ts';
import { TOKENS } from '../../core/tokens.ts';
import type { SessionTree } from '../../core/tree.ts';
import { type NoProgressKnobs, NoProgressKnobsSchema } from './knobs.ts';
import { NoProgressDetector, TYPE } from './no-progress.detector.ts';

/** The no-progress detector: its knobs are the `progress` section (live through Knobs). */
export const noProgressPlugin = definePlugin<DetectorPlugin<NoProgressKnobs>>({
  kind: 'detector',
  type: TYPE,
  section: 'progress',
  options: NoProgressKnobsSchema,
  create: (c, knobs) =>
    new NoProgressDetector(
      c.resolve<Store>(TOKENS.Store),
      c.resolve<Clock>(TOKENS.Clock),
      c.resolve<SessionTree>(TOKENS.Tree),
      knobs,
    ),
});

export { NoProgressDetector, NoProgressKnobsSchema };
