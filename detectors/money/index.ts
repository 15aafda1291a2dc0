import type { Clock } from '../../core/clock.ts';
import type { DetectorPlugin, ModeInfo } from '../../core/contracts.ts';
import type { Logger } from '../../core/logger.ts';
import type { Metrics } from '../../core/metrics.ts';
import { definePlugin } from '../../core/registry.ts';
import type { Store } from '../../core/store/store.ts';
import { TOKENS } from '../../core/tokens.ts';
import type { SessionTree } from '../../core/tree.ts';
import type { DirectiveSpec } from '../../core/wire.ts';
import { MoneyDetector, TYPE } from './money.detector.ts';
import { type MoneyOptions, MoneyOptionsSchema } from './options.ts';

/** The ledger of what flagged stretches cost, and the spend budgets: the `money` section. */
export const moneyPlugin = definePlugin<DetectorPlugin<MoneyOptions>>({
  kind: 'detector',
  type: TYPE,
  section: 'money',
  options: MoneyOptionsSchema,
  create: (c, knobs) =>
    new MoneyDetector({
      store: c.resolve<Store>(TOKENS.Store),
      clock: c.resolve<Clock>(TOKENS.Clock),
      tree: c.resolve<SessionTree>(TOKENS.Tree),
      mode: c.resolve<ModeInfo>(TOKENS.ModeInfo),
      metrics: c.resolve<Metrics>(TOKENS.Metrics),
      logger: c.resolve<Logger>(TOKENS.Logger),
      knobs,
      directives: c.resolve<(root: string, d: DirectiveSpec[]) => Promise<void>>(TOKENS.Directives),
    }),
});

export type { LedgerSummary, Stretch } from './ledger.ts';
export type { DayView, LedgerView } from './money.detector.ts';
export { MoneyDetector, MoneyOptionsSchema };
