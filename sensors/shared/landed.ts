import type { CallFingerprint } from './normalize.ts';

// The landed rules, one implementation for every sensor (docs/detection.md). A sensor
// maps its agent's tool names onto the canonical ones (read, bash, edit, multiedit,
// write, patch) and its result onto `metadata` (`diff` text or `filediff` counts)
// before asking.
//
// landed (deliberately narrow):
// - edit / write / patch with a non-empty `metadata.diff`, or `metadata.filediff` with
//   additions + deletions > 0; a completed write without a `diff` key counts as landed
//   (it changed or created a file).
// - bash `git commit` (or `--amend`, not `--dry-run`) with exit 0.
// - a test or lint command that exits 0 after the session's previous run of the same
//   fingerprint failed: a fix landed.
// Reads, greps, todo writes, task dispatches and passing-again tests are not progress.

/**
 * Per-session memory the landed rules need: fingerprints of test/lint commands whose
 * latest run failed. Plain JSON (serialisable as is), bounded, never mutated: every
 * change returns a new tracker.
 */
export interface LandedTracker {
  readonly failing: readonly string[];
}

export const LANDED_TRACKER_MAX = 32;

export function newLandedTracker(): LandedTracker {
  return { failing: [] };
}

export interface CallOutcome {
  tool: string;
  /** `completed` or `error` */
  status: string;
  exit: number | null;
  metadata?: Record<string, unknown>;
  facts: CallFingerprint;
}

/** The landed rules, pure: (tracker, finished call) -> (landed, tracker). */
export function judgeLanded(tr: LandedTracker, c: CallOutcome): { landed: boolean; tracker: LandedTracker } {
  const f = c.facts;
  if (c.tool === 'bash' || c.tool === 'shell') {
    if (f.testLike && c.exit !== null) {
      const wasFailing = tr.failing.includes(f.fingerprint);
      if (c.exit !== 0) {
        if (wasFailing) return { landed: false, tracker: tr };
        const failing = [...tr.failing, f.fingerprint];
        if (failing.length > LANDED_TRACKER_MAX) failing.shift();
        return { landed: false, tracker: { failing } };
      }
      if (wasFailing) {
        return { landed: true, tracker: { failing: tr.failing.filter((x) => x !== f.fingerprint) } };
      }
    }
    return { landed: c.status === 'completed' && c.exit === 0 && f.gitCommit, tracker: tr };
  }
  if (c.status !== 'completed') return { landed: false, tracker: tr };
  if (
    c.tool === 'edit' ||
    c.tool === 'multiedit' ||
    c.tool === 'write' ||
    c.tool === 'patch' ||
    c.tool === 'apply_patch'
  ) {
    return { landed: hasDiff(c.tool, c.metadata), tracker: tr };
  }
  return { landed: false, tracker: tr };
}

function hasDiff(tool: string, m: Record<string, unknown> | undefined): boolean {
  if (m === undefined) return tool === 'write';
  if (typeof m.diff === 'string') return m.diff.trim().length > 0;
  const fd = m.filediff as { additions?: unknown; deletions?: unknown } | undefined;
  if (fd && typeof fd === 'object') return Number(fd.additions ?? 0) + Number(fd.deletions ?? 0) > 0;
  // multiedit: one result per edit, each with its own diff
  if (Array.isArray(m.results))
    return m.results.some((r) => hasDiff('edit', (r as { metadata?: never }).metadata ?? r));
  return tool === 'write' && !('diff' in m);
}
