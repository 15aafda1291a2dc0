import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { rng } from '../../test/fixtures/calibration.ts';
import { request, tool } from './fixtures/inputs.ts';
import { type SessionState, Tracker, verdictOf } from './judge.ts';
import { defaultKnobs } from './knobs.ts';

// Orchestrators judged by their children's rate (tree_rhythm_factor, tree_rhythm_min),
// over random spacings: a busy orchestrator (a quarter to a third of its own calls are
// routine repeats: status checks, plan reads, todo writes, a smoke test) whose children
// keep landing at the spacing they have shown is never flagged, however far apart the
// landings; once the parent stops spawning, or a child stops landing, it is judged as any
// session, and flagged.

const k = defaultKnobs();

interface Shape {
  seed: number;
  /** share of the parent's own calls that are routine */
  routine: number;
  /** own calls between two dispatches: [spacing, spacing * spread] */
  spacing: number;
  spread: number;
  children: number;
  /** children land only once, at their end (a closing commit), or every few calls */
  commitOnly: boolean;
}

const shape = fc.record({
  seed: fc.integer({ min: 1, max: 1_000_000 }),
  routine: fc.double({ min: 0.25, max: 0.35, noNaN: true }),
  spacing: fc.integer({ min: 20, max: 90 }),
  spread: fc.double({ min: 1, max: 1.8, noNaN: true }),
  children: fc.integer({ min: 4, max: 10 }),
  commitOnly: fc.boolean(),
});

/** Where the parent stood at a moment: its calls and turns since its tree's latest landing, its rhythm's allowance. */
interface Moment {
  ownSince: number;
  childSince: number;
  inStuck: boolean;
  allowance: { own: number; child: number };
  dup: number;
  level: number;
}

/**
 * Feeds one orchestrator tree into a Tracker and watches the parent: `stopAfter`
 * children, then `tail` own calls of routine alone; a `stuck` child works 220 calls
 * without landing. Returns when the parent was first flagged and when its rhythm last
 * ended (null: never).
 */
function run(sh: Shape, o: { stopAfter?: number; tail?: number; stuck?: number } = {}, knobs = k) {
  const r = rng(sh.seed);
  const t = new Tracker(knobs);
  let n = 0;
  let flagged: Moment | null = null;
  let rhythmEnd: Moment | null = null;
  let wasInRhythm = false;
  let inStuck = false;
  const watch = () => {
    const s = t.state('orch');
    if (!s) return;
    const v = verdictOf(s, knobs);
    const ownSince = s.calls - s.callsAtLand;
    const m = (): Moment => ({
      ownSince,
      childSince: s.reqSince - (s.requests - s.reqAtLand),
      inStuck,
      allowance: allowance(s),
      dup: v.signals.dup_share,
      level: s.level,
    });
    if (flagged === null && s.level > 0) flagged = m();
    if (wasInRhythm && !v.signals.tree_rhythm) rhythmEnd = m();
    wasInRhythm = v.signals.tree_rhythm;
  };
  const call = (session: string, c: string, extra: Parameters<typeof tool>[2] = {}) => {
    const parent = session === 'orch' ? {} : { parent_session_id: 'orch' };
    t.applyRequest(request(session, { cost_usd: 0.004, ...parent }));
    t.applyProgress(tool(session, c, { ...parent, ...extra }));
    watch();
  };
  const routine: [string, string][] = [
    ['git status --short', 'bash'],
    ['.omo/plans/plan.md', 'read'],
    ['todowrite in progress', 'todowrite'],
    ['npm run smoke', 'bash'],
  ];
  const own = (count: number, share: number) => {
    for (let i = 0; i < count; i++, n++) {
      const [c, tl] = r() < share ? routine[Math.floor(r() * 4)] : [`orch look ${n}`, 'read'];
      call('orch', c, { tool: tl });
    }
  };
  const gap = () => Math.round(sh.spacing * (1 + r() * (sh.spread - 1)));
  // planning before the first dispatch: distinct calls
  own(gap(), 0);
  const kids = o.stopAfter ?? sh.children;
  for (let c = 0; c < kids; c++) {
    call('orch', 'task sisyphus-junior', { tool: 'task' });
    const kid = `kid${c}`;
    if (c === o.stuck) {
      inStuck = true;
      for (let i = 0; i < 220; i++) call(kid, `${kid} look ${i}`);
      inStuck = false;
    } else {
      const len = 15 + Math.floor(r() * 36);
      const every = 8 + Math.floor(r() * 18);
      for (let i = 0; i < len; i++) {
        const lands = sh.commitOnly ? i === len - 1 : i % every === every - 1 || i === len - 1;
        call(kid, lands ? `edit ${kid} ${i}` : `${kid} look ${i}`, lands ? { tool: 'edit', landed: true } : {});
      }
    }
    // after each child: its log, its diff, the todos
    for (const [x, tl] of [
      ['git log --oneline -5', 'bash'],
      ['git diff HEAD~1 --stat', 'bash'],
      ['todowrite in progress', 'todowrite'],
    ])
      call('orch', x, { tool: tl });
    n += 3;
    if (c < kids - 1) own(gap(), sh.routine);
  }
  own(o.tail ?? gap(), sh.routine);
  return { t, flagged: flagged as Moment | null, rhythmEnd: rhythmEnd as Moment | null };
}

/** The rhythm's allowance for the parent's state: own calls, descendants' turns. */
const allowance = (s: SessionState) => ({
  own: Math.max(k.tree_rhythm_min, k.tree_rhythm_factor * s.ownGapMax),
  child: Math.max(k.tree_rhythm_min, k.tree_rhythm_factor * s.childGapMax),
});

describe('orchestrators judged by their children rate (property)', () => {
  it('a busy orchestrator whose children keep landing at the spacing shown is never flagged', () => {
    fc.assert(
      fc.property(shape, (sh) => run(sh).flagged === null),
      { seed: 2424, numRuns: 150 },
    );
  });

  it('one that stops spawning is judged as any session once its own calls pass the rhythm, and flagged', () => {
    fc.assert(
      fc.property(shape, fc.integer({ min: 2, max: 4 }), (sh, stopAfter) => {
        const { flagged, rhythmEnd: end } = run(sh, { stopAfter, tail: 400 });
        if (flagged === null || end === null) return false;
        // never flagged in rhythm; the rhythm ends at its own-call allowance (or the tree grace's turns)
        const at = Math.min(end.allowance.own, k.tree_grace_turns - end.childSince);
        if (flagged.ownSince < end.ownSince || end.ownSince !== at) return false;
        // a window a quarter duplicates is flagged at once from there, as any session's
        return end.dup < k.dup_warn || end.level > 0;
      }),
      { seed: 2425, numRuns: 100 },
    );
  });

  it('one whose child stops landing is judged as any session once the child turns pass the rhythm', () => {
    fc.assert(
      fc.property(shape, fc.integer({ min: 1, max: 3 }), (sh, stuck) => {
        const { flagged, rhythmEnd: end } = run(sh, { stuck });
        if (end === null || !end.inStuck) return false;
        if (flagged !== null && flagged.childSince < end.childSince && flagged.inStuck) return false;
        const at = Math.min(end.allowance.child, k.tree_grace_turns - end.ownSince);
        if (end.childSince !== at) return false;
        return end.dup < k.dup_warn || end.level > 0;
      }),
      { seed: 2426, numRuns: 100 },
    );
  });

  it('without the rhythm, the same busy orchestrators are flagged between two landings', () => {
    // what the rule fixes: at a quarter to a third of routine repeats, the duplicates
    // rule alone flags a productive orchestrator in one of its longer stretches
    const off = { ...k, tree_rhythm_min: 1, tree_rhythm_factor: 1 };
    const shapes = [1, 2, 3, 4, 5, 6].map((seed) => ({
      seed,
      routine: 0.32,
      spacing: 60,
      spread: 1.5,
      children: 8,
      commitOnly: true,
    }));
    for (const sh of shapes) expect(run(sh).flagged).toBeNull();
    expect(shapes.filter((sh) => run(sh, {}, off).flagged !== null).length).toBeGreaterThanOrEqual(5);
  });
});
