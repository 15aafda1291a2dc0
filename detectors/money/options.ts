import { z } from 'zod';
import { duration } from '../../core/duration.ts';

// The `money` config section (docs/money.md): the ledger of what flagged stretches cost,
// and the spend budgets. Live through Knobs.

/** An IANA time zone Intl knows ("UTC", "Europe/Berlin"): where a day starts. */
const TimeZone = z
  .string()
  .min(1)
  .max(64)
  .refine(
    (tz) => {
      try {
        new Intl.DateTimeFormat('en-CA', { timeZone: tz });
        return true;
      } catch {
        return false;
      }
    },
    { message: 'not a time zone Intl knows (e.g. "UTC", "Europe/Berlin")' },
  );

/** A ceiling: dollars and prompt tokens, each off when null. */
const Ceiling = z
  .strictObject({
    /** Dollars of one day's spend (request records' cost_usd). */
    usd: z.number().positive().max(1_000_000).nullable().default(null),
    /** Prompt tokens of one day (cached included); counts records that report no cost too. */
    prompt_tokens: z.number().int().positive().max(1_000_000_000_000).nullable().default(null),
  })
  .prefault({});

export const MoneyOptionsSchema = z.strictObject({
  /** Off: nothing is counted, no stretch recorded, no budget enforced. */
  enabled: z.boolean().default(true),
  /**
   * The detectors whose flags open a stretch: no-progress's are the loops (the watchdog's
   * verdicts come through it); session-hygiene's bulk warnings are not loops.
   */
  detectors: z.array(z.string().min(1).max(64)).max(32).default(['no-progress']),
  /** Closed stretches and daily totals are kept this long. */
  retention: duration().prefault('30d'),
  /** Stretches kept per day at most (the oldest of that day go first). */
  max_stretches_per_day: z.number().int().min(10).max(1_000_000).default(5_000),
  /**
   * Open stretches tracked at most (bounded memory): a tree past it closes its oldest as
   * ended at once; past it over all trees the oldest close as ended at the minute's idle
   * check (each tree keeps its own, so no input reads a count of all of them).
   */
  max_open: z.number().int().min(10).max(100_000).default(2_000),
  /** A flagged session with no input for this long has ended: its stretch closes. */
  idle_close: duration().prefault('30m'),
  /** Where a day starts, for daily totals and budgets (IANA name). */
  timezone: TimeZone.default('UTC'),
  budgets: z
    .strictObject({
      /** At this share of a ceiling a warning goes out. */
      warn_at: z.number().gt(0).max(1).default(0.8),
      /** Per conversation tree, per day. */
      tree: Ceiling,
      /** Per agent name, per day (every tree the agent works in). */
      agent: Ceiling,
      /** Everything, per day. */
      total: Ceiling,
    })
    .prefault({}),
});

export type MoneyOptions = z.output<typeof MoneyOptionsSchema>;
export type CeilingOptions = MoneyOptions['budgets']['tree'];
