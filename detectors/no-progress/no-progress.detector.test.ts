import { afterAll, describe, expect, it } from 'vitest';
import { FakeClock } from '../../core/clock.ts';
import type { Vigil } from '../../core/vigil.ts';
import { generateCalibration } from '../../test/fixtures/calibration.ts';
import { backends, flushPrefix, testPrefix, testVigil, withRedis } from '../../test/helpers/index.ts';
import { type JudgeInput, Tracker } from './judge.ts';
import { defaultKnobs } from './knobs.ts';
import type { NoProgressDetector } from './no-progress.detector.ts';

const np = (v: Vigil) => v.detector<NoProgressDetector>('no-progress');

// The service's store-backed shell must agree with the in-memory Tracker (replay, the
// watchdog) on every calibration session, on both backends, and two instances sharing
// one Redis must agree with one process.

const cal = generateCalibration();
const idOf = (i: JudgeInput) =>
  i.type === 'progress' ? i.event.session_id : i.type === 'request' ? i.record.session_id : '';
// A few hundred inputs per session keep the Redis run short; the worst level is what matters.
const sessions = [...new Set(cal.inputs.map(idOf))];

function expected(inputs: readonly JudgeInput[]) {
  const t = new Tracker(defaultKnobs());
  const worst = new Map<string, string>();
  const rank = { ok: 0, stalling: 1, looping: 2 } as const;
  for (const i of inputs) {
    for (const c of t.apply(i))
      if (rank[c.to] > rank[(worst.get(c.session_id) ?? 'ok') as 'ok']) worst.set(c.session_id, c.to);
  }
  return { t, worst };
}

async function feed(vs: Vigil[], inputs: readonly JudgeInput[]) {
  const worst = new Map<string, string>();
  const rank = { ok: 0, stalling: 1, looping: 2 } as const;
  let n = 0;
  for (const i of inputs) {
    const v = vs[n++ % vs.length];
    const changes =
      i.type === 'progress'
        ? await v.engine.progress([i.event])
        : i.type === 'request'
          ? await v.engine.requests([i.record])
          : [];
    for (const c of changes)
      if (c.detector === 'no-progress' && rank[c.to] > rank[(worst.get(c.subject.id) ?? 'ok') as 'ok'])
        worst.set(c.subject.id, c.to);
  }
  return worst;
}

const prefixes: string[] = [];
afterAll(async () => {
  for (const p of prefixes) await flushPrefix(p);
});

describe('no-progress detector (store-backed) agrees with the Tracker', () => {
  const { t, worst } = expected(cal.inputs);

  it.each(backends())(
    'on every calibration session (%s)',
    async (backend) => {
      const prefix = testPrefix();
      if (backend === 'redis') prefixes.push(prefix);
      const v = await testVigil({ backend, prefix });
      try {
        const got = await feed([v], cal.inputs);
        for (const id of sessions) {
          expect(got.get(id) ?? 'ok', id).toBe(worst.get(id) ?? 'ok');
          expect((await np(v).effective(id)).level, id).toBe(t.verdict(id)?.level ?? 'ok');
        }
      } finally {
        await v.close();
      }
    },
    120_000,
  );

  it.runIf(withRedis)(
    'two instances on one Redis, events alternating between them, agree with one process',
    async () => {
      const prefix = testPrefix();
      prefixes.push(prefix);
      const a = await testVigil({ backend: 'redis', prefix });
      const b = await testVigil({ backend: 'redis', prefix });
      try {
        // The flagged item-3 worker and the orchestrator with its children.
        const pick = new Set(
          cal.cases.filter((c) => /item 3|orchestrator \(Atlas\)/i.test(c.name) || c.parent).map((c) => c.id),
        );
        const inputs = cal.inputs.filter((i) => pick.has(idOf(i)));
        const one = expected(inputs);
        const got = await feed([a, b], inputs);
        for (const id of pick) {
          expect(got.get(id) ?? 'ok', id).toBe(one.worst.get(id) ?? 'ok');
          expect((await np(b).effective(id)).level, id).toBe(one.t.verdict(id)?.level ?? 'ok');
        }
      } finally {
        await a.close();
        await b.close();
      }
    },
    120_000,
  );
});

describe('recoveries: the calibration cases through auto_recover', () => {
  const byCase = (id: string) => cal.inputs.filter((i) => idOf(i) === id);
  const tsOf = (i: JudgeInput) => (i.type === 'progress' ? i.event.ts : i.type === 'request' ? i.record.ts : 0);

  /** Feeds one session with the clock at each input's time; returns the stages the tree went through. */
  async function stages(backend: 'memory' | 'redis', id: string) {
    const prefix = testPrefix();
    if (backend === 'redis') prefixes.push(prefix);
    const clock = new FakeClock(tsOf(byCase(id)[0]));
    const v = await testVigil({ backend, prefix, clock, overlay: { modes: { mode: 'auto_recover' } } });
    try {
      const seen: number[] = [];
      for (const i of byCase(id)) {
        clock.set(Math.max(clock.now(), tsOf(i)));
        if (i.type === 'progress') await v.engine.progress([i.event]);
        else if (i.type === 'request') await v.engine.requests([i.record]);
        const stage = (await v.engine.treeState(id))?.stage ?? 0;
        if (stage !== seen.at(-1)) seen.push(stage);
      }
      return { seen, level: (await np(v).effective(id)).level };
    } finally {
      await v.close();
    }
  }

  it.each(backends())(
    'the loop that resumes after each recovery escalates to the hard stop; the healthy one stays at stage 1 (%s)',
    async (backend) => {
      expect(await stages(backend, 'ses_cal_recovered_loop')).toEqual({ seen: [0, 1, 2, 3], level: 'looping' });
      expect(await stages(backend, 'ses_cal_recovered_healthy')).toEqual({ seen: [0, 1], level: 'ok' });
    },
    120_000,
  );
});
