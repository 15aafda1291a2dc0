import { afterAll, describe, expect, it } from 'vitest';
import { FakeClock } from '../../core/clock.ts';
import type { UnitOutcome, UnitPlan } from '../../core/unit.ts';
import type { Vigil } from '../../core/vigil.ts';
import { LOOP_KNOBS, loopEvents } from '../../service/admin/testkit.ts';
import { backends, flushPrefix, testPrefix, testVigil, withRedis } from '../../test/helpers/index.ts';
import { mKeys, type OpenMap } from './keys.ts';
import type { MoneyDetector } from './money.detector.ts';

// The ledger and the budgets through the kernel, on both backends: stretches open when
// no-progress flags a session and close at the action, the recovery or the session's
// end, with the spend to the flag and to the action; day counters per model; sensor
// events counted once; and two instances on one Redis agree on a budget.

const T0 = Date.parse('2026-09-26T10:00:00Z');
const prefixes: string[] = [];
afterAll(async () => {
  for (const p of prefixes) await flushPrefix(p);
});

async function vigilOn(
  backend: 'memory' | 'redis',
  mode = 'warn',
  money: Record<string, unknown> = {},
  prefix?: string,
) {
  const p = prefix ?? testPrefix();
  if (backend === 'redis') prefixes.push(p);
  const clock = new FakeClock(T0);
  const v = await testVigil({ backend, prefix: p, clock, overlay: { progress: LOOP_KNOBS, modes: { mode }, money } });
  return { v, clock, money: v.detector<MoneyDetector>('money') };
}

/** A metric's value for these labels (Prometheus registry of the instance). */
async function metric(v: Vigil, name: string, labels: Record<string, string>) {
  const m = await v.metrics.registry.getSingleMetric(name)?.get();
  return m?.values.find((x) => Object.entries(labels).every(([k, l]) => x.labels[k] === l))?.value;
}

let seq = 0;
/** One turn of a session: a model request ($0.01, 1000 prompt tokens per turn so far), then the tool call it made. */
async function turn(v: Vigil, clock: FakeClock, session: string, o: { landed?: string; usd?: number } = {}) {
  clock.advance(10_000);
  seq++;
  await v.requests({
    session_id: session,
    request_id: `r${seq}`,
    agent: 'build',
    model: 'prov/model-a',
    prompt_tokens: 1000,
    cost_usd: o.usd ?? 0.01,
    ts: clock.now(),
  });
  const ev = { ...loopEvents(session, 1)[0], kind: 'tool' as const };
  if (o.landed) {
    await v.progress({
      ...ev,
      tool: 'edit',
      fingerprint: o.landed.padEnd(64, '0'),
      target: 'src/a.ts',
      landed: true,
      ts: clock.now(),
    });
  } else await v.progress({ ...ev, ts: clock.now() });
}

describe.each(backends())('the ledger (%s)', (backend) => {
  it('warn: a stretch opens at the flag, runs on, and ends at the session s last input once it is idle', async () => {
    const { v, clock, money } = await vigilOn(backend);
    try {
      for (let i = 0; i < 10; i++) await turn(v, clock, 'ses_w');
      let l = await money.ledger(0);
      expect(l.summary).toMatchObject({ loops: 1, open: 1 });
      expect(l.stretches[0]).toMatchObject({
        session: 'ses_w',
        agent: 'build',
        model: 'prov/model-a',
        detector: 'no-progress',
        level: 'looping',
        mode: 'warn',
        outcome: 'open',
        calls: 10,
        usd: 0.1,
        to_flag: { calls: 3, tokens: 3000, usd: 0.03, minutes: 0.3 },
        to_action: null,
      });
      const last = clock.now();
      // Idle for idle_close (30m): the stretch ends at the last input.
      clock.advance(31 * 60_000);
      await v.engine.tick();
      l = await money.ledger(0);
      expect(l.stretches[0]).toMatchObject({ outcome: 'ended', closed_at: last, calls: 10, minutes: 1.5 });
      expect(l.summary).toMatchObject({
        loops: 1,
        open: 0,
        before_flag: { calls: 3, usd: 0.03 },
        before_action: { calls: 10, usd: 0.1 },
        median_calls_to_flag: 3,
      });
      expect(l.spend).toMatchObject({ usd: 0.1, calls: 10, loop_usd: 0.1 });
      const byOutcome = { model: 'prov/model-a', outcome: 'ended' };
      expect(await metric(v, 'vigil_ledger_stretches_total', byOutcome)).toBe(1);
      expect(await metric(v, 'vigil_ledger_usd_before_flag_total', byOutcome)).toBeCloseTo(0.03, 9);
      expect(await metric(v, 'vigil_ledger_usd_total', byOutcome)).toBeCloseTo(0.1, 9);
      expect(await metric(v, 'vigil_spend_usd_total', { model: 'prov/model-a' })).toBeCloseTo(0.1, 9);
      expect(await metric(v, 'vigil_ledger_open_stretches', {})).toBe(0);
      expect(await v.metrics.registry.metrics()).toContain(
        'vigil_ledger_calls_total{model="prov/model-a",outcome="ended"} 10',
      );
    } finally {
      await v.close();
    }
  });

  it('auto_recover: the stretch ends at the action, with the spend to the flag and to the action', async () => {
    const { v, clock, money } = await vigilOn(backend, 'auto_recover');
    try {
      for (let i = 0; i < 10; i++) await turn(v, clock, 'ses_r');
      const [x, ...rest] = (await money.ledger(0)).stretches;
      expect(rest).toEqual([]);
      // Flagged (stalling) at the 3rd turn; refused and recovered at looping, the 6th.
      expect(x).toMatchObject({
        outcome: 'acted',
        mode: 'auto_recover',
        level: 'looping',
        calls: 6,
        usd: 0.06,
        to_flag: { calls: 3, usd: 0.03 },
        to_action: { calls: 6, usd: 0.06, minutes: 0.8 },
      });
      // What the session spent after the action is in no stretch; the day's loop share says so.
      const [today] = (await money.days(1)).slice(-1);
      expect(today).toMatchObject({ usd: 0.1, loop_usd: 0.06, calls: 10, loop_calls: 6 });
      expect(today.models['prov/model-a']).toMatchObject({ usd: 0.1, loop_usd: 0.06 });
    } finally {
      await v.close();
    }
  });

  it('a landed change closes the stretch as recovered; landing the same call again is not progress', async () => {
    const { v, clock, money } = await vigilOn(backend);
    try {
      await turn(v, clock, 'ses_l', { landed: 'aa' });
      for (let i = 0; i < 4; i++) await turn(v, clock, 'ses_l');
      expect((await money.ledger(0)).summary.open).toBe(1);
      await turn(v, clock, 'ses_l', { landed: 'aa' }); // the same edit again
      expect((await money.ledger(0)).summary.open).toBe(1);
      await turn(v, clock, 'ses_l', { landed: 'bb' }); // a new change
      const l = await money.ledger(0);
      expect(l.summary).toMatchObject({ loops: 1, open: 0, by_outcome: { recovered: 1 } });
      // From the first landing on: 5 more turns and the turn that landed the new change.
      expect(l.stretches[0]).toMatchObject({ outcome: 'recovered', calls: 6, to_flag: { calls: 3 } });
    } finally {
      await v.close();
    }
  });

  it('a sensor s assistant events count tokens (no dollars); once a router reports the session they are not counted again', async () => {
    const { v, clock, money } = await vigilOn(backend);
    try {
      const at = () => clock.advance(1_000);
      const assistant = (id: string, n: number) => ({
        kind: 'assistant' as const,
        session_id: 'ses_s',
        agent: 'build',
        call_id: id,
        model: 'prov/model-b',
        input_tokens: n,
        cache_read_tokens: 2 * n,
        cache_write_tokens: 0,
        visible_output: true,
        ts: at(),
      });
      await v.progress([assistant('m1', 100), assistant('m2', 100)]);
      let d = (await money.days(1))[0];
      expect(d.models['prov/model-b']).toMatchObject({ calls: 2, tokens: 600, usd: 0 });
      await v.requests({
        session_id: 'ses_s',
        request_id: 'q1',
        model: 'prov/model-b',
        prompt_tokens: 300,
        cost_usd: 0.02,
        ts: at(),
      });
      await v.progress(assistant('m3', 100)); // the same call the router reported
      d = (await money.days(1))[0];
      expect(d.models['prov/model-b']).toMatchObject({ calls: 3, tokens: 900, usd: 0.02 });
    } finally {
      await v.close();
    }
  });

  it('keeps stretches for `retention`: a day s list and counters expire', async () => {
    const { v, clock, money } = await vigilOn(backend, 'auto_recover', { retention: '2d' });
    try {
      for (let i = 0; i < 6; i++) await turn(v, clock, 'ses_old');
      expect((await money.ledger(0)).stretches).toHaveLength(1);
      clock.advance(4 * 86_400_000);
      expect((await money.ledger(0)).stretches).toHaveLength(0);
    } finally {
      await v.close();
    }
  });
});

describe.runIf(withRedis)('two instances on one Redis', () => {
  it('agree on a budget: spend recorded on one, the gate of the other refuses the tree', async () => {
    const prefix = testPrefix();
    const budgets = { budgets: { tree: { usd: 0.05 } } };
    const a = await vigilOn('redis', 'auto_recover', budgets, prefix);
    const b = await vigilOn('redis', 'auto_recover', budgets, prefix);
    try {
      const rec = (i: number) => ({
        session_id: 'ses_shared',
        request_id: `s${i}`,
        model: 'prov/model-a',
        prompt_tokens: 10,
        cost_usd: 0.02,
        ts: T0,
      });
      await a.v.requests([rec(1), rec(2)]);
      expect((await b.v.gate({ conversation: 'ses_shared' })).action).toBe('allow');
      await a.v.requests(rec(3));
      expect(await b.v.gate({ conversation: 'ses_shared' })).toMatchObject({ action: 'refuse', status: 429 });
      expect((await b.v.gate({ conversation: 'ses_other' })).action).toBe('allow');
      // A Resume on the second instance lifts it for the first.
      await b.v.engine.resume('ses_shared', 'operator');
      expect((await a.v.gate({ conversation: 'ses_shared' })).action).toBe('allow');
    } finally {
      await a.v.close();
      await b.v.close();
    }
  });
});

/** Every commit of the instance's units: the plan and what the store answered. */
function commits(v: Vigil) {
  const base = v.store.base;
  const real = base.commitUnit.bind(base);
  const seen: { plan: UnitPlan; r: UnitOutcome }[] = [];
  /** While set, commits wait until this many arrived, then go on together. */
  const hold = { n: 0, waiting: [] as (() => void)[] };
  base.commitUnit = async (plan: UnitPlan) => {
    if (hold.n) {
      const go = new Promise<void>((res) => hold.waiting.push(res));
      if (hold.waiting.length === hold.n) {
        hold.n = 0;
        for (const f of hold.waiting.splice(0)) f();
      }
      await go;
    }
    const r = await real(plan);
    seen.push({ plan: structuredClone(plan), r });
    return r;
  };
  return { seen, hold };
}

/** A session's model request ($0.01, 1000 prompt tokens). */
async function request(v: Vigil, clock: FakeClock, session: string) {
  clock.advance(10_000);
  seq++;
  await v.requests({
    session_id: session,
    request_id: `q${seq}`,
    agent: 'build',
    model: 'prov/model-a',
    prompt_tokens: 1000,
    cost_usd: 0.01,
    ts: clock.now(),
  });
}
const call = (v: Vigil, clock: FakeClock, session: string, parent?: string) =>
  v.progress({ ...loopEvents(session, 1, parent ? { parent } : {})[0], kind: 'tool' as const, ts: clock.now() });
/** A turn of a session (in the tree under `parent`): its request, then the same tool call again (a loop). */
async function treeTurn(v: Vigil, clock: FakeClock, session: string, parent?: string) {
  await request(v, clock, session);
  await call(v, clock, session, parent);
}

const MONEY = 'p:money:';
/** The money keys a unit read or replaced (counters and lists are added to, never compared). */
const compared = (plan: UnitPlan) => [
  ...new Set(
    [
      ...plan.reads.map(([k]) => k),
      ...plan.writes.flatMap((w) => (w.op === 'set' || w.op === 'del' ? [w.key] : [])),
    ].filter((k) => k.startsWith(MONEY)),
  ),
];

// Where the open stretches are kept: one key per tree (o:<root>), so the unit of work of
// one tree's input never reads what another tree's input writes (on Redis such a read
// is a conflict that judges the unit again). Counted through the unit layer's commits.
describe.each(backends())('open stretches, tree by tree (%s)', (backend) => {
  it('a tree s unit reads and replaces only its own tree s money keys', async () => {
    const { v, clock, money } = await vigilOn(backend);
    try {
      // (the service ticks at its start: the layout before is looked for once)
      await v.engine.tick();
      await treeTurn(v, clock, 'ses_warm');
      const { seen } = commits(v);
      // Two trees, turn by turn: each is flagged at its third turn (a stretch opens) and runs on.
      for (let i = 0; i < 6; i++) for (const s of ['ses_a', 'ses_b']) await treeTurn(v, clock, s);
      const l = await money.ledger(0);
      expect(l.stretches.map((x) => [x.session, x.outcome])).toEqual([
        ['ses_a', 'open'],
        ['ses_b', 'open'],
      ]);
      expect(await money.health()).toMatchObject({ open_stretches: 2 });
      const own = (s: string) => new Set([mKeys.session(s), mKeys.open(s)]);
      let opened = 0;
      for (const { plan } of seen) {
        const ks = compared(plan);
        if (ks.includes(mKeys.open('ses_a')) || ks.includes(mKeys.open('ses_b'))) opened++;
        // Each unit is one session's input: all it compares is that tree's.
        const tree = ks.some((k) => own('ses_a').has(k)) ? own('ses_a') : own('ses_b');
        expect(ks.filter((k) => !tree.has(k))).toEqual([]);
      }
      expect(opened).toBeGreaterThanOrEqual(2);
    } finally {
      await v.close();
    }
  });

  it('max_open: a tree past it closes its oldest at once; all trees past it, on the minute s check', async () => {
    const { v, clock, money } = await vigilOn(backend, 'warn', { max_open: 10 });
    try {
      // Eleven trees of one session each, flagged one after the other.
      for (let t = 0; t < 11; t++) for (let i = 0; i < 3; i++) await treeTurn(v, clock, `ses_t${t}`);
      expect(await money.health()).toMatchObject({ open_stretches: 11 });
      clock.advance(60_000);
      await v.engine.tick();
      let l = await money.ledger(0);
      expect(l.stretches.filter((x) => x.outcome !== 'open').map((x) => [x.session, x.outcome])).toEqual([
        ['ses_t0', 'ended'],
      ]);
      expect(await money.health()).toMatchObject({ open_stretches: 10 });
      // One tree: a parent and eleven children flagged; the oldest child closes at the twelfth flag.
      for (let c = 0; c < 11; c++) for (let i = 0; i < 3; i++) await treeTurn(v, clock, `ses_c${c}`, 'ses_p');
      l = await money.ledger(0);
      const inTree = l.stretches.filter((x) => x.root === 'ses_p');
      expect(inTree.filter((x) => x.outcome === 'open')).toHaveLength(10);
      expect(inTree.filter((x) => x.outcome !== 'open').map((x) => [x.session, x.outcome])).toEqual([
        ['ses_c0', 'ended'],
      ]);
      expect(Object.keys((await v.store.get<OpenMap>(mKeys.open('ses_p'))) ?? {})).toHaveLength(10);
    } finally {
      await v.close();
    }
  });
});

describe.runIf(withRedis)('two trees on Redis', () => {
  it('opening stretches in concurrent units: no conflict on the ledger s keys', async () => {
    const { v, clock, money } = await vigilOn('redis', 'warn');
    try {
      await v.engine.tick();
      await treeTurn(v, clock, 'ses_warm');
      for (let i = 0; i < 2; i++) for (const s of ['ses_c', 'ses_d']) await treeTurn(v, clock, s);
      await request(v, clock, 'ses_c');
      await request(v, clock, 'ses_d');
      const { seen, hold } = commits(v);
      // The third call of each flags it: both units judged before either commits.
      hold.n = 2;
      await Promise.all([call(v, clock, 'ses_c'), call(v, clock, 'ses_d')]);
      // (the breaker's keys are shared by all trees: a conflict there is not the ledger's)
      const conflicts = seen.flatMap(({ r }) => (!r.ok && 'conflicts' in r ? r.conflicts.map(([k]) => k) : []));
      expect(conflicts.filter((k) => k.startsWith(MONEY))).toEqual([]);
      // Each flagging unit committed its own tree's stretch.
      const wrote = seen.filter(({ r }) => r.ok).flatMap(({ plan }) => compared(plan));
      expect(wrote).toContain(mKeys.open('ses_c'));
      expect(wrote).toContain(mKeys.open('ses_d'));
      expect((await money.ledger(0)).stretches.map((x) => [x.session, x.outcome])).toEqual([
        ['ses_c', 'open'],
        ['ses_d', 'open'],
      ]);
    } finally {
      await v.close();
    }
  });
});
