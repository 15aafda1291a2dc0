import { z } from 'zod';

// The wire shapes shared by the service, the watchdog, replay and the plugin.
// Every object is strict: an unknown key is rejected, so tool arguments, outputs,
// prompts or message text cannot ride along under a new name. Every string is
// bounded and printable ASCII (no newlines), so a field cannot smuggle content.
// Replay checks tool events, markers and request records with a hand-written copy of
// these rules (its fast reader, in the no-progress detector's replay): change both
// together; its test compares them. The HTTP routes use these schemas alone.

/** Session, call and request ids: printable ASCII without spaces (opencode `ses_...`, provider call ids). */
export const IdSchema = z
  .string()
  .min(1)
  .max(128)
  .regex(/^[\x21-\x7e]+$/, 'printable ASCII without spaces');

/** An agent name as the plugin or router header gives it ("explore", "Sisyphus-Junior"). */
export const AgentSchema = z
  .string()
  .min(1)
  .max(64)
  .regex(/^[\x20-\x7e]+$/, 'printable ASCII');

/** A tool id: opencode built-ins ("read", "bash") or MCP tools ("playwright_browser_click"). */
export const ToolSchema = z
  .string()
  .min(1)
  .max(64)
  .regex(/^[\x21-\x7e]+$/, 'printable ASCII without spaces');

/** sha256 hex of the normalised call (sensors/shared/normalize.ts), never the arguments. */
export const FingerprintSchema = z.string().regex(/^[0-9a-f]{64}$/, '64 lowercase hex chars (sha256)');

/** Coarse target: a path or a command's first tokens. One line, bounded; may be empty (tools without a path). */
export const TargetSchema = z
  .string()
  .max(256)
  .regex(/^[\x20-\x7e]*$/, 'one line of printable ASCII');

/** ISO 8601 with an offset (`Z` or `+02:00`) or epoch milliseconds; always epoch ms after parsing. */
export const TimestampSchema = z
  .union([z.number().int().min(0).max(8_640_000_000_000_000), z.iso.datetime({ offset: true })])
  .transform((v) => (typeof v === 'number' ? v : Date.parse(v)));

const ExitSchema = z.number().int().min(-2_147_483_648).max(2_147_483_647).nullable();

const common = {
  session_id: IdSchema,
  /** The parent conversation (opencode `parentID`); children's landed events roll up to it. */
  parent_session_id: IdSchema.nullable().optional(),
  agent: AgentSchema.optional(),
  ts: TimestampSchema,
};

/** One finished tool call (completed or error). */
export const ToolEventSchema = z.strictObject({
  kind: z.literal('tool').default('tool'),
  ...common,
  tool: ToolSchema,
  call_id: IdSchema,
  fingerprint: FingerprintSchema,
  target: TargetSchema,
  /** bash: `metadata.exit` (null when aborted); 1 for any call that ended in `state.status: "error"`; 0 otherwise. */
  exit: ExitSchema.optional(),
  /** A concrete change landed: see sensors/opencode/convert.ts for the narrow definition. */
  landed: z.boolean(),
  /**
   * sha256 of the call's normalised outcome (exit plus output with volatile parts
   * removed: sensors/shared/normalize.ts `resultFingerprint`), never the output. Optional: a
   * sensor without it (an older plugin) is judged on the call alone.
   */
  result_fingerprint: FingerprintSchema.optional(),
});

/**
 * A marker, not a tool call: `continuation` (a synthetic or injected "continue" user turn),
 * `compaction_done` (the session's context was summarised) or `agent_loop` (the agent's
 * own loop detection fired: it refused a repeated call and told the model so, or, with
 * `stopped`, ended the run; reported, never counted as a call or a turn: the calls it
 * refused never ran). They never enter the duplicate window and never land anything, so
 * they carry no tool, fingerprint or target. `call_id` may hold the agent's message id,
 * so a watcher re-reading the same history can drop repeats.
 */
export const MarkerEventSchema = z.strictObject({
  kind: z.enum(['continuation', 'compaction_done', 'agent_loop']),
  ...common,
  call_id: IdSchema.optional(),
  landed: z.literal(false).default(false),
  /** `agent_loop` only: the agent ended the run (not only a nudge). */
  stopped: z.boolean().optional(),
});

// Session-hygiene facts (detectors/session-hygiene, docs/session-hygiene.md): sizes,
// counts, times and bounded codes of a session's model calls, never their content.

/** `providerID/modelID`, as in request records. */
export const ModelSchema = z
  .string()
  .min(1)
  .max(200)
  .regex(/^[\x21-\x7e]+$/, 'printable ASCII without spaces');

/**
 * A machine code (finish reason, error name, provider error code or type): a word, not a
 * sentence, so no message or response body can ride along in it.
 */
export const CodeSchema = z
  .string()
  .min(1)
  .max(64)
  .regex(/^[A-Za-z0-9_.:/-]+$/, 'a code: letters, digits and _ . : / -');

const TokensSchema = z.number().int().min(0).max(1_000_000_000);
const BytesSchema = z.number().int().min(0).max(1_000_000_000_000);

/**
 * One finished model call of a session: an opencode assistant message (one per model
 * step) once it has `time.completed` or an `error`. Sizes and codes only.
 */
export const AssistantEventSchema = z.strictObject({
  kind: z.literal('assistant'),
  ...common,
  /** The assistant message id, so a re-read of the same history counts once. */
  call_id: IdSchema,
  model: ModelSchema.optional(),
  /** opencode `tokens.input`: the prompt's uncached part (cache reads and writes are apart). */
  input_tokens: TokensSchema.default(0),
  output_tokens: TokensSchema.default(0),
  reasoning_tokens: TokensSchema.default(0),
  cache_read_tokens: TokensSchema.default(0),
  cache_write_tokens: TokensSchema.default(0),
  /** opencode `finish` ("tool-calls" continues the turn; "stop" and the rest end it). */
  finish: CodeSchema.optional(),
  /** opencode `error.name` ("APIError", "MessageAbortedError", ...); never `error.data.message`. */
  error_name: CodeSchema.optional(),
  /** The provider's status or error code when the sender can read one ("400", "context_length_exceeded"). */
  error_code: CodeSchema.optional(),
  /** False when the call produced no text and no tool call (reasoning alone is not visible). */
  visible_output: z.boolean(),
  /** A compaction summary (opencode `summary: true`): not a step of the agent's work. */
  summary: z.boolean().optional(),
  /**
   * A step that made no tool call (and did not fail): sha256 of its visible text,
   * normalised (sensors/shared/normalize.ts `textFingerprint`), never the text. Absent for
   * steps with tool calls and steps that said nothing.
   */
  text_fingerprint: FingerprintSchema.optional(),
});

/** opencode `session.status` `{type: "retry", attempt, next}`: the provider call is being retried. Never its message. */
export const RetryEventSchema = z.strictObject({
  kind: z.literal('retry'),
  ...common,
  /** The assistant message being retried, when the sender knows it. */
  call_id: IdSchema.optional(),
  attempt: z.number().int().min(1).max(1_000_000),
  /** When the next attempt is due (epoch ms after parsing). */
  next: TimestampSchema.optional(),
});

/** An image entered the conversation (an opencode `file` part with an image mime): its size only. */
export const ImageEventSchema = z.strictObject({
  kind: z.literal('image'),
  ...common,
  /** The part id, so a re-read counts once. */
  call_id: IdSchema.optional(),
  bytes: BytesSchema,
});

/** The session's bulk as the sensor measured it at `ts`. */
export const SessionStatsEventSchema = z.strictObject({
  kind: z.literal('session_stats'),
  ...common,
  /** Every progress event may carry an id for the sender's own dedupe (here: of the reading). */
  call_id: IdSchema.optional(),
  /** Messages stored for the session (all of them: compaction keeps the full history). */
  messages: z.number().int().min(0).max(100_000_000),
  /** Bytes of the session's stored messages and parts. */
  stored_bytes: BytesSchema,
  /** Bytes of the history the model is sent (since the last compaction), when the sender measures it. */
  history_bytes: BytesSchema.optional(),
  /** The newest model-side write to the session (assistant message or part), epoch ms; the user's own prompt excluded. */
  updated_at: TimestampSchema.optional(),
  /** The opencode process serving the session answered (false: read from its database file only). */
  live: z.boolean(),
});

/**
 * A user prompt sent to the session: a turn starts. `resume` is true when the session was
 * idle with history before it (every resume restores the whole history). `call_id` is the
 * user message id. Never the prompt's text.
 */
export const PromptEventSchema = z.strictObject({
  kind: z.literal('prompt'),
  ...common,
  call_id: IdSchema.optional(),
  resume: z.boolean(),
});

/** A progress event: a tool call (the default `kind`), a marker, or a session-hygiene fact. */
export const ProgressEventSchema = z.discriminatedUnion('kind', [
  ToolEventSchema,
  MarkerEventSchema,
  AssistantEventSchema,
  RetryEventSchema,
  ImageEventSchema,
  SessionStatsEventSchema,
  PromptEventSchema,
]);

export type ToolEvent = z.output<typeof ToolEventSchema>;
export type MarkerEvent = z.output<typeof MarkerEventSchema>;
export type AssistantEvent = z.output<typeof AssistantEventSchema>;
export type RetryEvent = z.output<typeof RetryEventSchema>;
export type ImageEvent = z.output<typeof ImageEventSchema>;
export type SessionStatsEvent = z.output<typeof SessionStatsEventSchema>;
export type PromptEvent = z.output<typeof PromptEventSchema>;
export type ProgressEvent = z.output<typeof ProgressEventSchema>;
export type ProgressEventInput = z.input<typeof ProgressEventSchema>;

/**
 * One billed LLM request, as the router reports it (or as derived from an opencode
 * assistant message). `prompt_tokens` includes cached tokens. `parent_session_id` and
 * `agent` are optional: the router knows them from its identity headers, and without
 * them a request-only session (no plugin) could not roll up to its parent.
 */
export const RequestRecordSchema = z.strictObject({
  session_id: IdSchema,
  parent_session_id: IdSchema.nullable().optional(),
  agent: AgentSchema.optional(),
  request_id: IdSchema,
  /** `providerID/modelID`. */
  model: z
    .string()
    .min(1)
    .max(200)
    .regex(/^[\x21-\x7e]+$/, 'printable ASCII without spaces'),
  prompt_tokens: z.number().int().min(0).max(1_000_000_000),
  cached_tokens: z.number().int().min(0).max(1_000_000_000).optional(),
  cost_usd: z.number().min(0).max(1_000_000).optional(),
  ts: TimestampSchema,
  /** Output tokens the upstream billed. */
  completion_tokens: TokensSchema.optional(),
  /** False when a completed call produced no text and no tool call (an empty generation). */
  visible_output: z.boolean().optional(),
  /** The upstream's finish reason ("stop", "tool_calls", "length", ...). */
  finish_reason: CodeSchema.optional(),
  /** HTTP status of the upstream's answer. */
  status: z.number().int().min(100).max(599).optional(),
  /** On a terminal error: the provider's error code and type, never its message or body. */
  error_code: CodeSchema.optional(),
  error_type: CodeSchema.optional(),
});
export type RequestRecord = z.output<typeof RequestRecordSchema>;
export type RequestRecordInput = z.input<typeof RequestRecordSchema>;

export const VERDICT_LEVELS = ['ok', 'stalling', 'looping'] as const;
export type VerdictLevel = (typeof VERDICT_LEVELS)[number];
export const VerdictLevelSchema = z.enum(VERDICT_LEVELS);

/** Which rule decided a non-ok verdict (null for ok). */
export const VERDICT_RULES = [
  'duplicates',
  'fail_streak',
  'top_repeat',
  'session_repeat',
  'continuation',
  'novelty',
  'ceiling',
  'landed_repeat',
  'identical_run',
  'cycle',
  'monologue',
] as const;
export type VerdictRule = (typeof VERDICT_RULES)[number];

export const VerdictSignalsSchema = z.strictObject({
  /** LLM requests since the last landed event, self plus children (tool events when no request was ever seen). */
  turns_since_landed: z.number().int().min(0),
  usd_since_landed: z.number().min(0),
  prompt_tokens_since_landed: z.number().min(0),
  /** Exact-duplicate share of the rolling window (0 below the minimum window size). */
  dup_share: z.number().min(0).max(1),
  /** Consecutive nonzero exits on one fingerprint (read-only agents: also on one target). */
  fail_streak: z.number().int().min(0),
  /** Prompt tokens of the latest request. */
  context_tokens: z.number().int().min(0),
  /** `tool target` label of the most repeated target in the window, if any repeats. */
  top_target: TargetSchema.nullable(),
  top_count: z.number().int().min(0),
  /** Lower bound of the most repeated exact call that is still recurring (seen within the window span). */
  session_repeat: z.number().int().min(0),
  /** Landed events in the current run of one write fingerprint (repeats are not progress). */
  landed_repeat: z.number().int().min(0).default(0),
  /** Length of the current unbroken run of one call with one exit (and one result, when events carry it). */
  identical_run: z.number().int().min(0).default(0),
  /** Whether that run compared results (its events carried result fingerprints). */
  identical_results: z.boolean().default(false),
  /** Repetitions of the current short cycle of calls (period 2 to 4), nothing landed; 0 without one. */
  cycle_repeats: z.number().int().min(0).default(0),
  /** Its period (2, 3 or 4; 0 without one). */
  cycle_period: z.number().int().min(0).max(4).default(0),
  /** Model steps in a row with the same text and no tool call, nothing landed. */
  monologue_run: z.number().int().min(0).default(0),
  /** An orchestrator whose tree keeps landing at the rhythm it has shown: its routine repeats do not count. */
  tree_rhythm: z.boolean().default(false),
  /** Continuation turns since the last landed event. */
  continuation_turns: z.number().int().min(0),
  /** Read-only agents: share of first-seen calls among the last `novelty_window` calls (null otherwise). */
  novelty: z.number().min(0).max(1).nullable(),
  read_only: z.boolean(),
  /** Tool calls seen in this session. */
  calls: z.number().int().min(0),
  /** Landed events of this session that counted (its own, not its children's; repeats excluded). */
  landed: z.number().int().min(0),
});
export type VerdictSignals = z.output<typeof VerdictSignalsSchema>;

export const VerdictSchema = z.strictObject({
  level: VerdictLevelSchema,
  rule: z.enum(VERDICT_RULES).nullable(),
  /** One line, ASCII, no content: counts, a path or a command's first tokens at most. */
  reason: z
    .string()
    .max(300)
    .regex(/^[\x20-\x7e]*$/),
  signals: VerdictSignalsSchema,
});
export type Verdict = z.output<typeof VerdictSchema>;

/** One line of printable ASCII: reasons and summaries that cross the wire carry no content. */
export const LineSchema = (max: number) =>
  z
    .string()
    .max(max)
    .regex(/^[\x20-\x7e]*$/, 'printable ASCII');

/** A verdict from outside the detectors (the watchdog), tagged with its source. */
export const ExternalVerdictSchema = z.strictObject({
  session_id: IdSchema,
  parent_session_id: IdSchema.nullable().optional(),
  agent: AgentSchema.optional(),
  level: VerdictLevelSchema,
  /** One line, no content. */
  reason: LineSchema(300),
  source: z
    .string()
    .min(1)
    .max(64)
    .regex(/^[a-z0-9_.-]+$/)
    .default('watchdog'),
  /** The watchdog's local model, recorded beside the deterministic verdict. */
  second_opinion: z
    .strictObject({
      model: z.string().min(1).max(200),
      looping: z.boolean(),
      reason: LineSchema(300),
    })
    .optional(),
});
export type ExternalVerdict = z.output<typeof ExternalVerdictSchema>;
export type ExternalVerdictInput = z.input<typeof ExternalVerdictSchema>;

/** What the router asks before each model request. */
export const GateQuerySchema = z.strictObject({
  conversation: IdSchema,
  agent: AgentSchema.optional(),
  parent: IdSchema.optional(),
  model: ModelSchema.optional(),
});
export type GateQuery = z.output<typeof GateQuerySchema>;

/** The gate's answer. `refuse` is a scoped 429; `limit` caps the context; `model_tripped` is for routing. */
export const GateAnswerSchema = z.object({
  action: z.enum(['allow', 'refuse', 'limit']),
  status: z.literal(429).optional(),
  retry_after_s: z.number().optional(),
  reason: z.string().optional(),
  max_context_tokens: z.number().optional(),
  /** How the router should enforce a limit: cap (trim or refuse) or overflow (a context-overflow error). */
  limit_mechanism: z.enum(['cap', 'overflow']).optional(),
  model_tripped: z.boolean(),
});
export type GateAnswer = z.output<typeof GateAnswerSchema>;

export const DIRECTIVE_TYPES = ['toast', 'abort', 'compact', 'lift', 'fresh', 'block'] as const;
export type DirectiveType = (typeof DIRECTIVE_TYPES)[number];

/** An action for a sensor (core/sensor.ts maps each to the capability it needs), queued per tree until acknowledged. */
export const DirectiveSpecSchema = z.strictObject({
  type: z.enum(DIRECTIVE_TYPES),
  /** The session to act on (abort, compact, fresh) or about (toast, lift). */
  session_id: IdSchema,
  toast: z
    .strictObject({
      title: z.string().max(120),
      message: z.string().max(300),
      variant: z.enum(['info', 'success', 'warning', 'error']),
    })
    .optional(),
  /** compact: the incident report the plugin appends to the compaction prompt; fresh: the brief. */
  report: z.string().max(16_384).optional(),
  /** compact: continue the session after the compaction. */
  auto_continue: z.boolean().optional(),
  /** fresh: open the fresh session with the brief (`report`) instead of only showing it. */
  open_session: z.boolean().optional(),
  /**
   * block and lift: `session` (the default) is that session only; `tree` is every
   * session of the tree `session_id` roots (a hard stop; its lift is a Resume). A block
   * makes the sensor refuse the scope's tool calls, with `reason` and `report` as the
   * error, and stays pending until lifted, so a restarted sensor blocks again.
   */
  scope: z.enum(['session', 'tree']).optional(),
  reason: z.string().max(300).optional(),
});
export type DirectiveSpec = z.output<typeof DirectiveSpecSchema>;

export const DirectiveSchema = DirectiveSpecSchema.extend({
  id: z.string().min(1).max(64),
  root_id: IdSchema,
  created_at: z.number(),
});
export type Directive = z.output<typeof DirectiveSchema>;

/** The sensor acknowledges the directives it carried out (or cannot carry out). */
export const DirectiveAckSchema = z.strictObject({
  acks: z
    // session_id: the session the directive was issued for; an ack naming another is refused.
    .array(z.strictObject({ id: z.string().min(1).max(64), root_id: IdSchema, session_id: IdSchema }))
    .min(1)
    .max(500),
});
