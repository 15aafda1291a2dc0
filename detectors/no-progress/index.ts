import type { Clock } from '../../core/clock.ts';
import type { Knobs } from '../../core/knobs.ts';
import type { Logger } from '../../core/logger.ts';
import type { DetectorPlugin } from '../../core/registry.ts';
import type { Store } from '../../core/store/store.ts';
import { TOKENS } from '../../core/tokens.ts';
import { type NoProgressKnobs, NoProgressKnobsSchema } from './knobs.ts';
import { NoProgressDetector } from './no-progress.detector.ts';

/** The no-progress detector: its knobs are the `progress` section (live through Knobs). */
export const noProgressPlugin: DetectorPlugin<NoProgressKnobs, NoProgressDetector> = {
  kind: 'detector',
  type: 'no-progress',
  section: 'progress',
  options: NoProgressKnobsSchema,
  create(c) {
    const knobs = c.resolve<Knobs>(TOKENS.Knobs);
    return new NoProgressDetector(
      c.resolve<Store>(TOKENS.Store),
      c.resolve<Clock>(TOKENS.Clock),
      c.resolve<Logger>(TOKENS.Logger),
      () => knobs.get<NoProgressKnobs>('progress'),
    );
  },
};

export { NoProgressKnobsSchema };
