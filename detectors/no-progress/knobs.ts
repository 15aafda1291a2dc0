import { z } from 'zod';

// Every threshold of the no-progress judge: the `progress` config section.
// Starting points come from the prototype fitted on incident #8 (window 60, duplicate
// share 0.25, top repeat 12, read-only top repeat 8, whole-session repeat 15); the
// rest were chosen on the calibration fixtures (test/fixtures/calibration.ts).
// `vigil replay --labels FILE --sweep` re-fits them on real history.

const count = (def: number, max = 1_000_000) => z.number().int().min(1).max(max).default(def);
const share = (def: number) => z.number().min(0).max(1).default(def);
/** a run is at least 2 calls */
const run = (def: number) => z.number().int().min(2).max(1_000_000).default(def);
const usd = (def: number) => z.number().min(0).max(1_000_000).default(def);

/** Agents that never land a change by design: judged on repeats, failures and novelty instead. */
export const DEFAULT_READ_ONLY_AGENTS = ['explore', 'librarian', 'oracle', 'metis', 'momus', 'multimodal-looker'];

export const NoProgressKnobsSchema = z
  .strictObject({
    /** Off: the detector judges nothing and its sessions keep their last verdict. */
    enabled: z.boolean().default(true),
    /** Tool calls in the rolling window per session. A change applies to sessions seen afterwards. */
    window: z.number().int().min(10).max(1_000).default(60),
    /** Below this many calls in the window, dup_share counts as 0 (3 calls with 2 dups is not a loop). */
    dup_min_events: count(20, 1_000),

    /** stalling: no landed change for this many turns (LLM requests, self plus children) ... */
    stall_turns: count(20),
    /** ... or this much spend since the last landed change ($0.50, about 110 turns at incident #8 prices) ... */
    stall_usd: usd(0.5),
    /** ... AND one of the repeat signals at its `*_warn` threshold. */
    dup_warn: share(0.25),
    /** Consecutive nonzero exits on one fingerprint ("the sandbox is broken and it keeps retrying"). */
    fail_warn: count(5),
    /** Calls to one target in the window. */
    top_warn: count(12),
    /** One exact call repeated this often in the session (and still recurring): slow loops escape a window. */
    session_repeat_warn: count(15),
    /** Continuation turns ("continue" injected by a hook or after a compaction) since the last landed change. */
    continuation_warn: count(2),

    /** looping: the same conditions at these higher thresholds. */
    loop_turns: count(60),
    loop_usd: usd(1.5),
    dup_loop: share(0.4),
    fail_loop: count(10),
    top_loop: count(20),
    session_repeat_loop: count(30),
    continuation_loop: count(4),

    /**
     * One write fingerprint landing this many times in a row (nothing else landing between,
     * each within `window` calls of the previous): stalling, and looping at the loop value.
     * Edits are fingerprinted by path, so these sit above a long edit streak on one file.
     */
    landed_repeat_warn: run(12),
    landed_repeat_loop: run(16),
    /** Unbroken run of one identical lookup (read, grep, glob, list, todoread; same exit): stalling / looping. */
    lookup_run_warn: run(5),
    lookup_run_loop: run(8),
    /** The same for any other call (bash, MCP tools, edits): a poll with an unchanging command and exit looks identical. */
    run_warn: run(12),
    run_loop: run(20),
    /**
     * Runs whose events carry result fingerprints: one call with one RESULT, so a poll
     * whose output changes breaks the run and these can be low. Lookups, then any other call.
     */
    result_lookup_run_warn: run(3),
    result_lookup_run_loop: run(4),
    result_run_warn: run(5),
    result_run_loop: run(8),
    /** A short cycle of calls (period 2 to 4: A B A B, A B C A B C) going round this many times, nothing landing. */
    cycle_warn: run(4),
    cycle_loop: run(6),
    /** Model steps in a row with the same text and no tool call, nothing landing (sensors that send text fingerprints). */
    monologue_warn: run(3),
    monologue_loop: run(5),

    /** Descendant landings before a session is judged by its tree (an orchestrator). */
    tree_min_landings: count(1),
    /** An orchestrator's whole-session repeats do not flag it for this many turns after its tree last landed. */
    tree_grace_turns: count(240),
    /**
     * An orchestrator's routine repeats (duplicates, top and whole-session repeats) do not
     * flag it while, since its tree last landed, neither its own calls nor its descendants'
     * turns exceed this multiple of the longest such stretch its tree has shown ...
     */
    tree_rhythm_factor: z.number().min(1).max(100).default(2),
    /** ... nor this many (the first stretch between children has not been shown yet). */
    tree_rhythm_min: count(100),

    /** Plain ceiling for long healthy work without repeats: stalling only, never looping. */
    ceiling_turns: count(300),
    ceiling_usd: usd(3),

    /** Agent names (case-insensitive) judged by the read-only rules. */
    read_only_agents: z.array(z.string().min(1).max(64)).max(100).default(DEFAULT_READ_ONLY_AGENTS),
    /** Read-only agents: calls to one target in the window. */
    top_ro_warn: count(8),
    top_ro_loop: count(16),
    /** Read-only agents: first-seen calls in the last `novelty_window` calls below `novelty_min` is a stall. */
    novelty_window: count(30, 1_000),
    novelty_min: share(0.1),

    /** Prompt tokens above which the incident report blames context size. */
    context_high_tokens: count(150_000, 100_000_000),

    /** Sessions an in-memory tracker keeps; the least recently updated go first. */
    max_sessions: count(100_000, 10_000_000),
  })
  .superRefine((k, ctx) => {
    const pairs: [keyof typeof k, keyof typeof k][] = [
      ['stall_turns', 'loop_turns'],
      ['stall_usd', 'loop_usd'],
      ['dup_warn', 'dup_loop'],
      ['fail_warn', 'fail_loop'],
      ['top_warn', 'top_loop'],
      ['top_ro_warn', 'top_ro_loop'],
      ['session_repeat_warn', 'session_repeat_loop'],
      ['continuation_warn', 'continuation_loop'],
      ['landed_repeat_warn', 'landed_repeat_loop'],
      ['lookup_run_warn', 'lookup_run_loop'],
      ['run_warn', 'run_loop'],
      ['result_lookup_run_warn', 'result_lookup_run_loop'],
      ['result_run_warn', 'result_run_loop'],
      ['cycle_warn', 'cycle_loop'],
      ['monologue_warn', 'monologue_loop'],
    ];
    for (const [warn, loop] of pairs) {
      if ((k[loop] as number) < (k[warn] as number)) {
        ctx.addIssue({ code: 'custom', path: [loop], message: `must be >= ${warn} (${k[warn]})` });
      }
    }
    if (k.novelty_window > k.window) {
      ctx.addIssue({ code: 'custom', path: ['novelty_window'], message: `must be <= window (${k.window})` });
    }
  });

export type NoProgressKnobs = z.output<typeof NoProgressKnobsSchema>;
export type NoProgressKnobsInput = z.input<typeof NoProgressKnobsSchema>;

/** The defaults, validated: a fresh object each call. */
export function defaultKnobs(): NoProgressKnobs {
  return NoProgressKnobsSchema.parse({});
}
