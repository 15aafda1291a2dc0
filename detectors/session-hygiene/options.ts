import { z } from 'zod';
import { duration } from '../../core/duration.ts';
import { ModelSchema } from '../../core/wire.ts';

// Every threshold of the session-hygiene judge: the `hygiene` config section. Where the
// defaults come from (two dead long-lived sessions, one at 3,662 messages / 18 MB, one
// at 246k prompt tokens per call) is in docs/session-hygiene.md.

const tokens = (def: number) => z.number().int().min(1).max(100_000_000).default(def);
const bytes = (def: number) => z.number().int().min(1).max(1_000_000_000_000).default(def);
const count = (def: number, max: number) => z.number().int().min(1).max(max).default(def);

/** Resume timestamps a session keeps: enough to decide `resume_info`, and bounded. */
export const RESUMES_KEPT = 16;

export const HygieneOptionsSchema = z
  .strictObject({
    /** Off: the detector judges nothing (the engine skips it; its routes stay). */
    enabled: z.boolean().default(true),
    /** On: retire and restore-stall verdicts open a fresh session with the brief; off: they only warn. */
    auto_fresh: z.boolean().default(false),
    /**
     * On: info tells also go to the mode and the notifier (severity info, verdict stalling,
     * so the behavior breaker counts them as stalls); off: the readout and the report only.
     */
    info_alerts: z.boolean().default(false),
    /** Acting modes: the gate refuses a conversation this long after its empty generation (a new prompt ends it sooner). */
    empty_refusal: duration().prefault('30m'),

    /** Watch number (prompt tokens per model call over the last completed turn) for "finish this question here". */
    per_call_warn: tokens(150_000),
    /** Watch number for "retire this session": the next question goes to a fresh one. */
    per_call_retire: tokens(200_000),
    /** Per-turn watch numbers kept for the readout and the report. */
    trend_turns: count(32, 256),

    /** Retries of one turn (opencode retry attempts, or identical request records) that make a warning. */
    retry_warn: count(3, 1_000),

    /** A resumed session with no first token for this long, process alive, is stalled on restore. */
    first_token_timeout: duration().prefault('120s'),
    /** Stored messages of one session that make a warning (restore stalled at 3,662 twice). */
    message_ceiling: count(3_600, 100_000_000),
    /** Stored bytes of one session that make a warning (restore stalled at 18.0 and 18.2 MB). */
    bytes_ceiling: bytes(18_000_000),

    /** Nominal context window per exact model string, shown beside the effective envelope. */
    nominal_context: z.record(ModelSchema, z.number().int().min(1).max(100_000_000)).default({}),
    /** The envelope warns only on prompts at least this large ... */
    envelope_min_tokens: tokens(100_000),
    /** ... and only once the model has this many clean completions behind its envelope. */
    envelope_min_clean: count(20, 1_000_000),
    /** Models whose envelope is kept; the least recently used go first. */
    max_models: count(256, 100_000),

    /** Info: an image entering a session whose latest call was at least this many prompt tokens. */
    image_context_tokens: tokens(100_000),
    /** Info: this many resumes of one session within `resume_window`. */
    resume_info: count(4, RESUMES_KEPT),
    resume_window: duration().prefault('24h'),
    /** Info: the history the model is sent above this many bytes. */
    history_bytes_info: bytes(1_000_000),

    /** Sessions an in-memory tracker keeps; the least recently updated go first. */
    max_sessions: count(100_000, 10_000_000),
  })
  .superRefine((o, ctx) => {
    if (o.per_call_retire < o.per_call_warn) {
      ctx.addIssue({
        code: 'custom',
        path: ['per_call_retire'],
        message: `must be >= per_call_warn (${o.per_call_warn})`,
      });
    }
  });

export type HygieneOptions = z.output<typeof HygieneOptionsSchema>;
export type HygieneOptionsInput = z.input<typeof HygieneOptionsSchema>;

/** The defaults, validated: a fresh object each call. */
export function defaultHygieneOptions(): HygieneOptions {
  return HygieneOptionsSchema.parse({});
}
