import { describe, expect, it } from 'vitest';
import { ProgressEventSchema, RequestRecordSchema } from '../../core/wire.ts';
import { generateBreakerBaseline, generateCalibration } from '../../test/fixtures/calibration.ts';
import { Tracker } from './judge.ts';
import { defaultKnobs } from './knobs.ts';

// The generator reproduces DESIGN.md's calibration table: check its figures, so a
// green judge test means the judge met the table, not an easier fixture.
describe('calibration fixture', () => {
  const cal = generateCalibration();
  const byId = new Map<
    string,
    { fps: Map<string, number>; landed: number; calls: number; requests: number; cont: number }
  >();
  for (const i of cal.inputs) {
    const id = i.type === 'progress' ? i.event.session_id : i.type === 'request' ? i.record.session_id : '';
    const s = byId.get(id) ?? { fps: new Map(), landed: 0, calls: 0, requests: 0, cont: 0 };
    byId.set(id, s);
    if (i.type === 'request') s.requests++;
    else if (i.type === 'progress' && i.event.kind === 'tool') {
      s.calls++;
      s.fps.set(i.event.fingerprint, (s.fps.get(i.event.fingerprint) ?? 0) + 1);
      if (i.event.landed) s.landed++;
    } else if (i.type === 'progress' && i.event.kind === 'continuation') s.cont++;
  }

  it.each(cal.cases.map((c) => [c.name, c] as const))('%s matches the table', (_n, c) => {
    const s = byId.get(c.id);
    expect(s).toBeDefined();
    if (!s) return;
    expect(s.calls).toBe(c.calls);
    const dup = (s.calls - s.fps.size) / s.calls;
    if (c.minDupShare !== undefined) expect(dup).toBeGreaterThanOrEqual(c.minDupShare);
    if (c.dupShare >= 0) expect(Math.abs(dup - c.dupShare)).toBeLessThan(0.006);
    else if (c.label === 'ok') expect(dup).toBeLessThanOrEqual(c.maxDupShare ?? 0.06);
    else if (c.maxDupShare !== undefined) expect(dup).toBeLessThanOrEqual(c.maxDupShare);
    const worst = Math.max(...s.fps.values());
    if (c.worst > 0) expect(worst).toBe(c.worst);
    if (c.landed === true) expect(s.landed).toBeGreaterThan(0);
    else expect(s.landed).toBe(0);
    if (c.landed === 'children') {
      const kids = cal.cases.filter((x) => x.parent === c.id && x.landed === true);
      expect(kids.length).toBeGreaterThan(0);
    }
  });

  it('has the shapes the table describes', () => {
    const post = byId.get('ses_cal_atlas_post');
    expect(post?.requests).toBe(54);
    expect(post?.cont).toBe(3);
    const healthy = cal.cases.filter((c) => c.id.startsWith('ses_cal_healthy_'));
    expect(healthy.map((c) => c.calls)).toEqual([30, 52, 74, 96]);
    for (const c of healthy) expect(c.parent).toBe('ses_cal_atlas');
  });

  const toolEvents = (id: string) =>
    cal.inputs.flatMap((i) =>
      i.type === 'progress' && i.event.kind === 'tool' && i.event.session_id === id ? [i.event] : [],
    );
  /** Longest run of consecutive events with one fingerprint and one exit. */
  const longestRun = (id: string, pick = (_t: string) => true) => {
    let best = 0;
    let run = 0;
    let prev = '';
    for (const e of toolEvents(id)) {
      const key = `${e.fingerprint}:${e.exit}`;
      run = key === prev ? run + 1 : 1;
      prev = key;
      if (pick(e.tool) && run > best) best = run;
    }
    return best;
  };
  /** Landed events of the longest run of one fingerprint landing with nothing else landing between. */
  const landingRun = (id: string) => {
    let best = 0;
    let run = 0;
    let prev = '';
    for (const e of toolEvents(id)) {
      if (!e.landed) continue;
      run = e.fingerprint === prev ? run + 1 : 1;
      prev = e.fingerprint;
      best = Math.max(best, run);
    }
    return best;
  };

  it('has the loops that land and the one-file refactor', () => {
    expect(landingRun('ses_cal_land_repeat_13')).toBe(13);
    expect(landingRun('ses_cal_land_repeat_18')).toBe(18);
    expect(landingRun('ses_cal_land_repeat_34')).toBe(34);
    expect(landingRun('ses_cal_refactor_one_file')).toBe(9);
    // between the 18 landings the reads are all new: only the landings repeat
    const lr18 = toolEvents('ses_cal_land_repeat_18').slice(24);
    expect(new Set(lr18.filter((e) => !e.landed).map((e) => e.fingerprint)).size).toBe(36);
  });

  it('has orchestrators working for hours, a child every 50 to 90 own calls, every child landing', () => {
    for (const id of ['ses_cal_orch_long', 'ses_cal_orch_long2']) {
      const own = toolEvents(id);
      expect(own.length).toBeGreaterThanOrEqual(800);
      const tasks = own.flatMap((e, i) => (e.tool === 'task' ? [i] : []));
      // 4 own calls after each dispatch (log, diff, todo), then 50 to 90 before the next
      for (let j = 1; j < tasks.length; j++) expect(tasks[j] - tasks[j - 1]).toBeGreaterThanOrEqual(54);
      for (let j = 1; j < tasks.length; j++) expect(tasks[j] - tasks[j - 1]).toBeLessThanOrEqual(94);
      expect(own[own.length - 1].ts - own[0].ts).toBeGreaterThan(3 * 3600_000);
      const kids = cal.cases.filter((c) => c.parent === id && c.id !== 'ses_cal_read_run_25');
      expect(kids.length).toBe(tasks.length - (id === 'ses_cal_orch_long2' ? 1 : 0));
      for (const c of kids) expect(byId.get(c.id)?.landed).toBeGreaterThan(0);
      // its routine: dozens of one call over the session, few in any 60 of its own calls
      const counts = [...(byId.get(id)?.fps.values() ?? [])].sort((a, b) => b - a);
      expect(counts[0]).toBeGreaterThan(20);
    }
    const stuck = toolEvents('ses_cal_orch_stuck');
    expect(stuck.filter((e) => e.tool === 'task')).toHaveLength(3);
    const lastTask = stuck.map((e) => e.tool).lastIndexOf('task');
    expect(stuck.length - lastTask).toBeGreaterThan(150);
  });

  it('has the identical runs, and polls that are not (runs of one fingerprint and exit)', () => {
    expect(longestRun('ses_cal_read_run_25')).toBe(25);
    expect(toolEvents('ses_cal_read_run_25')).toHaveLength(31);
    expect(longestRun('ses_cal_bash_run_30')).toBe(30);
    expect(longestRun('ses_cal_poll_blind')).toBe(10);
    expect(longestRun('ses_cal_poll_changing', (t) => t === 'bash')).toBeLessThanOrEqual(4);
    expect(longestRun('ses_cal_poll_changing', (t) => t === 'read')).toBe(3);
    const polls = toolEvents('ses_cal_poll_changing').filter((e) => e.target === 'curl');
    expect(new Set(polls.map((e) => e.exit)).size).toBeGreaterThanOrEqual(3);
  });

  it('has the recovered shapes: the loop resumed after two recoveries, the healthy worker re-reads once', () => {
    const compactions = (id: string) =>
      cal.inputs.filter(
        (i) => i.type === 'progress' && i.event.session_id === id && i.event.kind === 'compaction_done',
      );
    expect(compactions('ses_cal_recovered_loop')).toHaveLength(2);
    expect(compactions('ses_cal_recovered_healthy')).toHaveLength(1);
    // after each recovery the same two calls again, nothing else
    const loop = toolEvents('ses_cal_recovered_loop');
    expect(new Set(loop.slice(18).map((e) => e.fingerprint)).size).toBe(2);
    // the healthy one: its first call after the recovery is the read it looped on, then
    // more than loop_turns calls before anything lands, each one new
    const all = cal.inputs.filter(
      (i) => i.type === 'progress' && i.event.session_id === 'ses_cal_recovered_healthy',
    ) as { type: 'progress'; event: { kind: string; fingerprint?: string; landed: boolean } }[];
    const at = all.findIndex((i) => i.event.kind === 'compaction_done');
    const after = all.slice(at + 1).map((i) => i.event);
    const before = new Set(all.slice(0, at).map((i) => i.event.fingerprint));
    expect(before.has(after[0].fingerprint)).toBe(true);
    const firstLanding = after.findIndex((e) => e.landed);
    expect(firstLanding).toBeGreaterThan(defaultKnobs().loop_turns);
    expect(after.slice(1, firstLanding).every((e) => !before.has(e.fingerprint))).toBe(true);
  });

  it('sends result fingerprints for the results cases only (the others are as an older plugin sent them)', () => {
    for (const c of cal.cases) {
      const evs = toolEvents(c.id);
      expect(evs.length).toBeGreaterThan(0);
      expect(
        evs.every((e) => (e.result_fingerprint !== undefined) === (c.results === true)),
        c.id,
      ).toBe(true);
    }
  });

  /** Longest run of one fingerprint with one result. */
  const resultRun = (id: string) => {
    let best = 0;
    let run = 0;
    let prev = '';
    for (const e of toolEvents(id)) {
      const key = `${e.fingerprint}:${e.exit}:${e.result_fingerprint}`;
      run = key === prev ? run + 1 : 1;
      prev = key;
      best = Math.max(best, run);
    }
    return best;
  };

  it('has the runs with results: identical ones, and polls whose result moves', () => {
    expect(resultRun('ses_cal_res_read_run')).toBe(20);
    // the failing test's output differs only in its timings: one result after normalising
    expect(resultRun('ses_cal_res_test_run')).toBe(15);
    expect(longestRun('ses_cal_res_poll_log')).toBe(30);
    expect(resultRun('ses_cal_res_poll_log')).toBe(1);
    expect(longestRun('ses_cal_res_ci_wait')).toBe(13);
    expect(resultRun('ses_cal_res_ci_wait')).toBe(4);
  });

  it('has the cycles of period 2, 3 and 4, and the healthy alternations', () => {
    const tail = (id: string, n: number) => toolEvents(id).slice(-n);
    const period = (id: string, n: number, p: number) => {
      const t = tail(id, n).map((e) => `${e.fingerprint}:${e.result_fingerprint}`);
      return new Set(t).size === p && t.every((x, i) => i < p || x === t[i - p]);
    };
    expect(period('ses_cal_cycle_pair', 20, 2)).toBe(true);
    expect(period('ses_cal_cycle_triple', 24, 3)).toBe(true);
    expect(period('ses_cal_cycle_quad', 28, 4)).toBe(true);
    // the test-driven worker lands every round (a repeat landing: one path)
    expect(landingRun('ses_cal_cycle_tdd')).toBe(7);
    // the watch loop: the sleep repeats, the status it checks moves
    const checks = toolEvents('ses_cal_watch_ok').filter((e) => e.target.startsWith('gh run'));
    expect(new Set(checks.map((e) => e.result_fingerprint)).size).toBe(checks.length);
  });

  it('has the monologue: one text 7 times, no tool call; the chatty worker never repeats between calls', () => {
    const steps = (id: string) =>
      cal.inputs.flatMap((i) =>
        i.type === 'progress' && i.event.kind === 'assistant' && i.event.session_id === id ? [i.event] : [],
      );
    const mono = steps('ses_cal_monologue');
    expect(mono).toHaveLength(7);
    expect(new Set(mono.map((e) => e.text_fingerprint)).size).toBe(1);
    expect(byId.get('ses_cal_monologue')?.cont).toBe(6);
    const chat = steps('ses_cal_chatty');
    expect(chat.length).toBeGreaterThanOrEqual(8);
    expect(chat.every((e) => e.text_fingerprint !== undefined)).toBe(true);
  });

  it('has the busy orchestrators: a quarter to a third of their calls repeat, each child lands', () => {
    for (const id of ['ses_cal_orch_busy_30', 'ses_cal_orch_busy_35', 'ses_cal_orch_busy_stops']) {
      const own = toolEvents(id);
      const tasks = own.flatMap((e, i) => (e.tool === 'task' ? [i] : []));
      expect(tasks.length).toBeGreaterThanOrEqual(5);
      const kids = cal.cases.filter((c) => c.parent === id);
      expect(kids).toHaveLength(tasks.length);
      for (const c of kids) expect(byId.get(c.id)?.landed).toBeGreaterThan(0);
    }
    const gaps = (id: string) => {
      const tasks = toolEvents(id).flatMap((e, i) => (e.tool === 'task' ? [i] : []));
      return tasks.slice(1).map((t, j) => t - tasks[j]);
    };
    expect(Math.min(...gaps('ses_cal_orch_busy_30'))).toBeGreaterThanOrEqual(34);
    expect(Math.max(...gaps('ses_cal_orch_busy_35'))).toBeLessThanOrEqual(99);
    // the one that stops: 5 children, then its routine alone
    const stops = toolEvents('ses_cal_orch_busy_stops');
    expect(stops.filter((e) => e.tool === 'task')).toHaveLength(5);
    expect(stops.length - stops.map((e) => e.tool).lastIndexOf('task')).toBeGreaterThan(150);
    // the child that stops landing: 150 calls, none landing
    expect(byId.get('ses_cal_orch_busy_kid_stuck_kid4')).toMatchObject({ calls: 150, landed: 0 });
  });

  it('emits only inputs the wire schemas accept', () => {
    for (const i of cal.inputs) {
      if (i.type === 'progress') expect(ProgressEventSchema.safeParse(i.event).success).toBe(true);
      else if (i.type === 'request') expect(RequestRecordSchema.safeParse(i.record).success).toBe(true);
    }
  });

  it('is seeded: same seed, same inputs; another seed, other inputs', () => {
    expect(generateCalibration().inputs).toEqual(cal.inputs);
    expect(generateCalibration(7).inputs).not.toEqual(cal.inputs);
  });
});

describe('calibration fixture: a breaker baseline that arrives after the stalls', () => {
  const cal = generateBreakerBaseline();
  const requests = cal.inputs.flatMap((i) => (i.type === 'request' ? [i.record] : []));

  it('serves each session from its own model only', () => {
    for (const c of cal.cases) {
      const models = new Set(requests.filter((q) => q.session_id === c.id).map((q) => q.model));
      expect([...models]).toEqual([c.model]);
    }
    expect(cal.cases.filter((c) => c.model === cal.model)).toHaveLength(4);
  });

  it('flags the 3 loops of the one model before any other model serves a session; nothing else', () => {
    const t = new Tracker(defaultKnobs());
    const flaggedAt = new Map<string, number>();
    let firstOther = Number.POSITIVE_INFINITY;
    for (const i of cal.inputs) {
      if (i.type === 'request' && i.record.model !== cal.model) firstOther = Math.min(firstOther, i.record.ts);
      for (const c of t.apply(i)) {
        const ts = i.type === 'progress' ? i.event.ts : i.type === 'request' ? i.record.ts : 0;
        if (c.to !== 'ok' && !flaggedAt.has(c.session_id)) flaggedAt.set(c.session_id, ts);
      }
    }
    expect([...flaggedAt.keys()].sort()).toEqual(['ses_brk_bad_1', 'ses_brk_bad_2', 'ses_brk_bad_3']);
    for (const at of flaggedAt.values()) expect(at).toBeLessThan(firstOther);
  });

  it('the baseline session is the fifth the other models serve', () => {
    const order: string[] = [];
    for (const q of requests) if (q.model !== cal.model && !order.includes(q.session_id)) order.push(q.session_id);
    expect(order.length).toBeGreaterThan(5);
    expect(order[4]).toBe(cal.baseline);
  });
});
