import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { type ProgressEvent, type ToolEvent, VerdictSchema } from '../../core/wire.ts';
import { generateCalibration, rng } from '../../test/fixtures/calibration.ts';
import { landing, replay as replayWith, request, tool, turn as turnWith } from './fixtures/inputs.ts';
import {
  ancestorsOf,
  applyRollUps,
  decodeState,
  encodeState,
  type JudgeInput,
  judge,
  LEVELS,
  newSessionState,
  onProgress,
  onRequest,
  onRollup,
  rebase,
  rollUpOf,
  type SessionState,
  Tracker,
  topTargets,
  verdictOf,
} from './judge.ts';
import { defaultKnobs, NoProgressKnobsSchema } from './knobs.ts';

const k = defaultKnobs();
const turn = (s: SessionState, call: string, o: Partial<ToolEvent> = {}) => turnWith(s, call, o, k);
const replay = (inputs: readonly JudgeInput[], knobs = k) => replayWith(inputs, knobs);

describe('calibration cases (incident #8)', () => {
  const cal = generateCalibration();
  const { t, worst } = replay(cal.inputs);

  it.each(cal.cases.map((c) => [c.name, c] as const))('%s', (_name, c) => {
    const w = LEVELS[worst.get(c.id) ?? 0];
    if (c.expect === 'flagged') expect(w).not.toBe('ok');
    else expect(w).toBe('ok');
  });

  it('flags the stuck workers and the read-only helpers, looping where the evidence is strongest', () => {
    expect(LEVELS[worst.get('ses_cal_item2_w2') ?? 0]).toBe('looping');
    expect(LEVELS[worst.get('ses_cal_explore_deleted') ?? 0]).toBe('looping');
    expect(t.verdict('ses_cal_explore_deleted')?.rule).toBe('fail_streak');
    expect(t.verdict('ses_cal_atlas_post')?.signals.continuation_turns).toBe(3);
  });

  it('keeps the orchestrator ok only because its children land (roll-up)', () => {
    const orphaned = cal.inputs.map((i): JudgeInput => {
      if (i.type === 'progress' && i.event.parent_session_id === 'ses_cal_atlas')
        return { type: 'progress', event: { ...i.event, parent_session_id: null } };
      if (i.type === 'request' && i.record.parent_session_id === 'ses_cal_atlas')
        return { type: 'request', record: { ...i.record, parent_session_id: null } };
      return i;
    });
    expect(LEVELS[replay(orphaned).worst.get('ses_cal_atlas') ?? 0]).not.toBe('ok');
  });

  it('flags the loops that land, by their repeat landings, and not the one-file refactor', () => {
    for (const id of ['ses_cal_land_repeat_13', 'ses_cal_land_repeat_18', 'ses_cal_land_repeat_34']) {
      expect(LEVELS[worst.get(id) ?? 0]).not.toBe('ok');
    }
    expect(LEVELS[worst.get('ses_cal_land_repeat_34') ?? 0]).toBe('looping');
    expect(t.verdict('ses_cal_land_repeat_34')).toMatchObject({ rule: 'landed_repeat', signals: { landed: 3 } });
    expect(t.verdict('ses_cal_land_repeat_34')?.reason).toMatch(
      /the same edit landed \d+ times: a repeat, not progress/,
    );
    expect(LEVELS[worst.get('ses_cal_refactor_one_file') ?? 0]).toBe('ok');
  });

  it('keeps the orchestrators that work for hours ok through their trees, not the one that spins', () => {
    for (const id of ['ses_cal_orch_long', 'ses_cal_orch_long2']) {
      expect(LEVELS[worst.get(id) ?? 0]).toBe('ok');
      // its routine adds up over the session: the whole-session rule alone would flag it
      expect(topTargets(t.state(id) as SessionState, 1)[0].count).toBeGreaterThan(k.session_repeat_loop);
    }
    expect(LEVELS[worst.get('ses_cal_orch_stuck') ?? 0]).toBe('looping');
  });

  it('takes an unbroken identical read run to looping well before 60 calls', () => {
    const run = replay(cal.inputs);
    let events = 0;
    let loopAt = -1;
    const t2 = new Tracker(k);
    for (const i of cal.inputs) {
      if (i.type === 'progress' && i.event.session_id === 'ses_cal_read_run_25') events++;
      for (const c of t2.apply(i)) if (c.session_id === 'ses_cal_read_run_25' && c.to === 'looping') loopAt = events;
    }
    expect(LEVELS[run.worst.get('ses_cal_read_run_25') ?? 0]).toBe('looping');
    // 6 calls of work, then the run: looping at its lookup_run_loop-th read
    expect(loopAt).toBe(6 + k.lookup_run_loop);
    expect(LEVELS[worst.get('ses_cal_poll_changing') ?? 0]).toBe('ok');
    expect(LEVELS[worst.get('ses_cal_poll_blind') ?? 0]).toBe('ok');
  });

  it('is deterministic', () => {
    const again = replay(cal.inputs).worst;
    expect([...again]).toEqual([...worst]);
  });
});

describe('calibration cases with recoveries (the service rebases the judge at each)', () => {
  const cal = generateCalibration();
  const recovered = cal.cases.filter((c) => c.recovered);

  it('has a loop that resumes after its recoveries and a healthy recovered worker', () => {
    expect(recovered.map((c) => c.recovered).sort()).toEqual(['loop', 'ok']);
  });

  it.each(recovered.map((c) => [c.name, c] as const))('%s', (_name, c) => {
    const t = new Tracker(k);
    // the worst level between recoveries, and the turns it took to be flagged looping again
    const worst: number[] = [0];
    const turnsToLoop: number[] = [];
    let turns = 0;
    for (const i of cal.inputs) {
      const id = i.type === 'progress' ? i.event.session_id : i.type === 'request' ? i.record.session_id : '';
      if (id !== c.id) continue;
      if (i.type === 'progress' && i.event.kind === 'compaction_done') {
        t.apply(i);
        t.recover(c.id, i.event.ts);
        worst.push(0);
        turns = 0;
        continue;
      }
      if (i.type === 'request') turns++;
      for (const ch of t.apply(i)) {
        const lv = LEVELS.indexOf(ch.to);
        if (ch.to === 'looping' && worst[worst.length - 1] < lv) turnsToLoop.push(turns);
        worst[worst.length - 1] = Math.max(worst[worst.length - 1], lv);
      }
    }
    expect(worst.length).toBeGreaterThan(1);
    // each recovery came after a detection
    for (const w of worst.slice(0, -1)) expect(LEVELS[w]).toBe('looping');
    expect(LEVELS[worst[worst.length - 1]]).toBe(c.recovered === 'loop' ? 'looping' : 'ok');
    // judged afresh: a resumed loop (a failing test and a read, round and round) is
    // flagged again by its own evidence, the cycle, not at once
    if (c.recovered === 'loop') {
      expect(turnsToLoop).toHaveLength(worst.length);
      for (const n of turnsToLoop.slice(1)) expect(n).toBe(2 * k.cycle_loop);
    }
  });
});

describe('stalling and looping', () => {
  it('needs no landed change AND a repeat signal', () => {
    const s = newSessionState(k);
    // 30 turns of distinct calls: no landed change, but no repeats either
    for (let i = 0; i < 30; i++) expect(turn(s, `distinct ${i}`)).toBe(0);
    // now the same read over and over, every other call (never an unbroken run)
    let level = 0;
    let reads = 0;
    for (let i = 0; i < 24 && level === 0; i++) {
      if (i % 2 === 0) reads++;
      level = turn(s, i % 2 === 0 ? 'read navbar.js' : `between ${i}`);
    }
    expect(LEVELS[level]).toBe('stalling');
    expect(reads).toBe(k.top_warn);
    expect(verdictOf(s, k)).toMatchObject({ rule: 'top_repeat', signals: { top_target: 'read read navbar.js' } });
  });

  it('goes from stalling to looping at the loop thresholds', () => {
    const s = newSessionState(k);
    const levels: number[] = [];
    for (let i = 0; i < 80; i++) levels.push(turn(s, i % 2 ? 'read navbar.js' : `other ${i}`));
    const firstStall = levels.indexOf(1);
    const firstLoop = levels.indexOf(2);
    expect(firstStall).toBeGreaterThanOrEqual(k.stall_turns - 1);
    expect(firstLoop).toBeGreaterThanOrEqual(k.loop_turns - 1);
    expect(firstLoop).toBeGreaterThan(firstStall);
    expect(verdictOf(s, k).level).toBe('looping');
  });

  it('resets on a landed change', () => {
    const s = newSessionState(k);
    for (let i = 0; i < 40; i++) turn(s, 'read navbar.js');
    expect(s.level).toBeGreaterThan(0);
    turn(s, 'edit navbar.js', { tool: 'edit', landed: true });
    expect(s.level).toBe(0);
    expect(verdictOf(s, k).signals.turns_since_landed).toBe(0);
  });

  it('counts spend: expensive turns reach stall_usd before stall_turns', () => {
    const s = newSessionState(k);
    let level = 0;
    for (let i = 0; i < 14; i++) {
      onRequest(s, request('s', { cost_usd: 0.06, prompt_tokens: 600_000 }), k);
      level = onProgress(s, tool('s', i < 1 ? `x${i}` : 'read navbar.js'), k);
    }
    expect(verdictOf(s, k).signals.turns_since_landed).toBeLessThan(k.stall_turns);
    expect(LEVELS[level]).not.toBe('ok');
  });

  it('flags a failure streak on one fingerprint ("the sandbox is broken")', () => {
    const s = newSessionState(k);
    for (let i = 0; i < 20; i++) turn(s, `distinct ${i}`);
    for (let i = 0; i < 4; i++) {
      turn(s, 'npm test', { tool: 'bash', exit: 1 });
      turn(s, `look ${i}`);
    }
    expect(s.level).toBe(0);
    turn(s, 'npm test', { tool: 'bash', exit: 1 });
    expect(verdictOf(s, k)).toMatchObject({ level: 'stalling', rule: 'fail_streak' });
    turn(s, 'npm test', { tool: 'bash', exit: 0 });
    expect(verdictOf(s, k).signals.fail_streak).toBe(0);
  });

  it('catches a slow loop spread wider than the window (whole-session repeat)', () => {
    const s = newSessionState(k);
    let level = 0;
    for (let i = 0; i < 15 * 20 && level === 0; i++) level = turn(s, i % 20 === 0 ? 'read navbar.js' : `d${i}`);
    expect(verdictOf(s, k)).toMatchObject({ level: 'stalling', rule: 'session_repeat' });
    expect(verdictOf(s, k).signals.top_count).toBeLessThan(k.top_warn);
  });

  it('stalls when continuation turns keep arriving and nothing lands', () => {
    const s = newSessionState(k);
    for (let i = 0; i < 25; i++) turn(s, `distinct ${i}`);
    onProgress(s, { kind: 'continuation', session_id: 's', landed: false, ts: 1 }, k);
    expect(s.level).toBe(0);
    onProgress(s, { kind: 'continuation', session_id: 's', landed: false, ts: 2 }, k);
    expect(verdictOf(s, k)).toMatchObject({ level: 'stalling', rule: 'continuation' });
    turn(s, 'commit', { tool: 'bash', landed: true });
    expect(verdictOf(s, k).signals.continuation_turns).toBe(0);
  });

  it('keeps long healthy work ok until the looser ceiling, which only ever stalls', () => {
    const s = newSessionState(k);
    const levels = new Set<number>();
    for (let i = 0; i < k.ceiling_turns - 1; i++) levels.add(turn(s, `distinct ${i}`));
    expect([...levels]).toEqual([0]);
    turn(s, 'distinct last');
    expect(verdictOf(s, k)).toMatchObject({ level: 'stalling', rule: 'ceiling' });
    for (let i = 0; i < 200; i++) turn(s, `more ${i}`);
    expect(verdictOf(s, k).level).toBe('stalling');
  });
});

describe('turns since landed', () => {
  it('counts LLM requests when the session has any, tool calls otherwise', () => {
    const plugin = newSessionState(k);
    for (let i = 0; i < 7; i++) onProgress(plugin, tool('p', `c${i}`), k);
    expect(verdictOf(plugin, k).signals.turns_since_landed).toBe(7);
    const routed = newSessionState(k);
    for (let i = 0; i < 3; i++) onRequest(routed, request('r'), k);
    for (let i = 0; i < 7; i++) onProgress(routed, tool('r', `c${i}`), k);
    expect(verdictOf(routed, k).signals.turns_since_landed).toBe(3);
  });

  it('adds children and resets on a child landed event, up every ancestor', () => {
    const t = new Tracker(k);
    t.applyRequest(request('root'));
    t.applyRequest(request('mid', { parent_session_id: 'root', cost_usd: 0.5 }));
    t.applyRequest(request('leaf', { parent_session_id: 'mid', cost_usd: 0.25 }));
    expect(t.verdict('root')?.signals).toMatchObject({ turns_since_landed: 3, usd_since_landed: 0.752 });
    expect(t.verdict('mid')?.signals.turns_since_landed).toBe(2);
    t.applyProgress(tool('leaf', 'edit', { tool: 'edit', landed: true, parent_session_id: 'mid' }));
    expect(t.verdict('root')?.signals.turns_since_landed).toBe(0);
    expect(t.verdict('mid')?.signals.turns_since_landed).toBe(0);
    expect(t.state('root')?.landed).toBe(0); // its children's, not its own
  });
});

describe('read-only agents', () => {
  const ro = (): SessionState => {
    const s = newSessionState(k);
    onProgress(s, tool('e', 'first', { agent: 'Explore' }), k);
    return s;
  };

  it('are recognised case-insensitively from the knob list', () => {
    expect(ro().readOnly).toBe(true);
  });

  it('stall on repeats of one call (8), with no landed-change precondition', () => {
    const s = ro();
    for (let i = 0; i < 7; i++) {
      onProgress(s, tool('e', 'read SPEC.md'), k);
      onProgress(s, tool('e', `elsewhere ${i}`), k);
    }
    expect(s.level).toBe(0);
    onProgress(s, tool('e', 'read SPEC.md'), k);
    expect(verdictOf(s, k)).toMatchObject({ level: 'stalling', rule: 'top_repeat' });
  });

  it('stall on a failure streak on one target, even at different offsets', () => {
    const s = ro();
    for (let i = 0; i < 5; i++) {
      onProgress(s, tool('e', `read gone.js@${i}`, { target: 'gone.js', exit: 1 }), k);
      onProgress(s, tool('e', `elsewhere ${i}`), k);
    }
    expect(verdictOf(s, k)).toMatchObject({ level: 'stalling', rule: 'fail_streak' });
  });

  it('stall when nothing new is read (novelty), and stay ok while exploring', () => {
    const healthy = ro();
    for (let i = 0; i < 100; i++) onProgress(healthy, tool('e', `file ${i}`), k);
    expect(verdictOf(healthy, k).level).toBe('ok');
    const stuck = ro();
    for (let i = 0; i < 40; i++) onProgress(stuck, tool('e', `file ${i % 5}`), k);
    expect(verdictOf(stuck, k).signals.novelty).toBeLessThan(k.novelty_min);
    expect(verdictOf(stuck, k).level).not.toBe('ok');
  });
});

describe('compaction', () => {
  it('does not count re-reads after a compaction as duplicates, and keeps the old evidence until it ages out', () => {
    const s = newSessionState(k);
    for (let i = 0; i < 30; i++) onProgress(s, tool('c', `file ${i % 15}`), k);
    const before = verdictOf(s, k).signals.dup_share;
    expect(before).toBeCloseTo(0.5, 3);
    onProgress(s, { kind: 'compaction_done', session_id: 'c', landed: false, ts: 1 }, k);
    for (let i = 0; i < 15; i++) onProgress(s, tool('c', `file ${i}`), k);
    expect(verdictOf(s, k).signals.dup_share).toBeCloseTo(15 / 45, 3);
    expect(verdictOf(s, k).signals.top_count).toBe(1);
    for (let i = 0; i < 60; i++) onProgress(s, tool('c', `new ${i}`), k);
    expect(verdictOf(s, k).signals.dup_share).toBe(0);
  });

  it('keeps turns since landed and the session table across it', () => {
    const s = newSessionState(k);
    for (let i = 0; i < 20; i++) turn(s, 'read navbar.js');
    onProgress(s, { kind: 'compaction_done', session_id: 's', landed: false, ts: 1 }, k);
    const v = verdictOf(s, k).signals;
    expect(v.turns_since_landed).toBe(20);
    expect(v.session_repeat).toBe(20);
  });
});

describe('state encoding', () => {
  it('round-trips mid-session and continues with identical verdicts', () => {
    const cal = generateCalibration();
    const t = new Tracker(k);
    const half = Math.floor(cal.inputs.length / 2);
    for (const i of cal.inputs.slice(0, half)) t.apply(i);
    const copies = new Map<string, SessionState>();
    for (const [id, s] of t.states) {
      const bytes = encodeState(s);
      const back = decodeState(bytes);
      expect(encodeState(back)).toEqual(bytes);
      expect(verdictOf(back, k)).toEqual(verdictOf(s, k));
      copies.set(id, back);
    }
    for (const i of cal.inputs.slice(half)) {
      if (i.type === 'rollup') continue;
      const id = i.type === 'progress' ? i.event.session_id : i.record.session_id;
      const a = t.state(id);
      const b = copies.get(id);
      if (!a || !b) continue;
      if (i.type === 'progress') {
        expect(onProgress(b, i.event, k)).toBe(onProgress(a, i.event, k));
      } else {
        expect(onRequest(b, i.record, k)).toBe(onRequest(a, i.record, k));
      }
    }
    for (const [id, b] of copies) {
      const a = t.state(id);
      if (a) expect(verdictOf(b, k).signals).toEqual(verdictOf(a, k).signals);
    }
  });

  it('is compact: a fresh session under 320 bytes, a full window under 3 KB', () => {
    const s = newSessionState(k);
    onProgress(s, tool('x', 'a', { agent: 'build' }), k);
    expect(encodeState(s).length).toBeLessThan(320);
    for (let i = 0; i < 100; i++) onProgress(s, tool('x', `c${i}`), k);
    expect(encodeState(s).length).toBeLessThan(3_000);
  });

  it('keeps any text, ASCII or not, as UTF-8 (a lone surrogate as TextEncoder writes it)', () => {
    const wellFormed = (x: string | undefined) =>
      x === undefined ? undefined : new TextDecoder().decode(new TextEncoder().encode(x));
    const text = fc.string({ unit: 'binary', maxLength: 40 });
    fc.assert(
      fc.property(text, text, text, (agent, toolName, target) => {
        const s = newSessionState(k);
        for (let i = 0; i < 3; i++) onProgress(s, tool('x', `c${i}`, { agent, tool: toolName, target }), k);
        const bytes = encodeState(s);
        const back = decodeState(bytes);
        expect(back.agent).toBe(wellFormed(s.agent));
        expect(back.topTarget).toBe(wellFormed(s.topTarget));
        expect(back.names).toEqual(s.names?.map(wellFormed));
        expect(encodeState(back)).toEqual(bytes);
      }),
      { numRuns: 300 },
    );
  });

  it('rejects a truncated state', () => {
    const s = newSessionState(k);
    for (let i = 0; i < 30; i++) onProgress(s, tool('x', `c${i}`), k);
    const bytes = encodeState(s);
    expect(() => decodeState(bytes.subarray(0, 20))).toThrow();
  });

  it('rejects an unknown version', () => {
    const bytes = encodeState(newSessionState(k));
    bytes[0] = 99;
    expect(() => decodeState(bytes)).toThrow(/version/);
  });
});

describe('verdicts', () => {
  it('are valid against the wire schema, one ASCII line, and never carry arguments', () => {
    const { t } = replay(generateCalibration().inputs);
    for (const id of t.states.keys()) {
      const v = t.verdict(id);
      expect(VerdictSchema.parse(v)).toEqual(v);
    }
  });

  it('judge() returns the state and the verdict', () => {
    const s = newSessionState(k);
    const r = judge(s, { type: 'progress', event: tool('j', 'a') }, k);
    expect(r.state).toBe(s);
    expect(r.verdict.level).toBe('ok');
    expect(
      judge(s, { type: 'rollup', rollup: { landed: true, requests: 0, tools: 1, usd: 0, tokens: 0 } }, k).verdict.level,
    ).toBe('ok');
  });
});

describe('Tracker', () => {
  it('returns verdict changes only', () => {
    const t = new Tracker(k);
    const changes = [];
    for (let i = 0; i < 40; i++) {
      changes.push(...t.applyRequest(request('w')));
      changes.push(...t.applyProgress(tool('w', i % 2 ? `other ${i}` : 'read navbar.js')));
    }
    expect(changes.map((c) => `${c.from}->${c.to}`)).toEqual(['ok->stalling']);
    expect(changes[0].verdict.reason).toMatch(/^stalling: /);
  });

  it('reports an ancestor whose level moved through a roll-up', () => {
    const t = new Tracker(k);
    for (let i = 0; i < k.ceiling_turns; i++) t.applyRequest(request('root'));
    expect(t.verdict('root')?.level).toBe('stalling');
    const changes = t.applyProgress(tool('kid', 'edit', { tool: 'edit', landed: true, parent_session_id: 'root' }));
    expect(changes.map((c) => [c.session_id, c.to])).toEqual([['root', 'ok']]);
  });

  it('ignores a parent link that would make a cycle', () => {
    const t = new Tracker(k);
    t.applyProgress(tool('a', 'x', { parent_session_id: 'b' }));
    t.applyProgress(tool('b', 'x', { parent_session_id: 'a' }));
    expect(ancestorsOf('a', t.parentOf)).toEqual(['b']);
    expect(ancestorsOf('b', t.parentOf)).toEqual([]);
  });

  it('evicts the least recently updated sessions beyond max_sessions', () => {
    const t = new Tracker(NoProgressKnobsSchema.parse({ max_sessions: 10 }));
    for (let i = 0; i < 25; i++) t.applyProgress(tool(`s${i}`, 'x'));
    expect(t.size).toBeLessThanOrEqual(10);
    expect(t.state('s24')).toBeDefined();
    expect(t.state('s0')).toBeUndefined();
  });

  it('shares applyRollUps with a service-owned store', () => {
    const store = new Map<string, SessionState>();
    const parents = new Map([
      ['leaf', 'mid'],
      ['mid', 'root'],
    ]);
    const stateOf = (id: string) => {
      let s = store.get(id);
      if (!s) {
        s = newSessionState(k);
        store.set(id, s);
      }
      return s;
    };
    const seen: string[] = [];
    applyRollUps(
      'leaf',
      { landed: false, requests: 1, tools: 0, usd: 0.1, tokens: 5 },
      (id) => parents.get(id),
      stateOf,
      k,
      (id) => seen.push(id),
    );
    expect([...store.keys()]).toEqual(['mid', 'root']);
    expect(verdictOf(stateOf('root'), k).signals.turns_since_landed).toBe(1);
    expect(seen).toEqual([]);
  });
});

describe('whole-session table (Space-Saving)', () => {
  it('never over-counts a repeat (the rule uses the lower bound)', () => {
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 0, max: 300 }), { minLength: 1, maxLength: 600 }), (calls) => {
        const s = newSessionState(k);
        const truth = new Map<number, number>();
        for (const c of calls) {
          truth.set(c, (truth.get(c) ?? 0) + 1);
          onProgress(s, tool('p', `call ${c}`), k);
        }
        const max = Math.max(...truth.values());
        return verdictOf(s, k).signals.session_repeat <= max;
      }),
      { seed: 42, numRuns: 60 },
    );
  });

  it('finds the heavy repeat in a long session of distinct calls', () => {
    const s = newSessionState(k);
    const events: ProgressEvent[] = [];
    for (let i = 0; i < 600; i++) events.push(tool('h', i % 10 === 0 ? 'heavy' : `d${i}`));
    for (const e of events) onProgress(s, e, k);
    expect(verdictOf(s, k).signals.session_repeat).toBeGreaterThanOrEqual(50);
  });
});

/** A tool event that lands (an edit with a diff). */
describe('repeat landings', () => {
  it('are not progress: the same write landing again does not reset the counters', () => {
    const s = newSessionState(k);
    turn(s, 'edit nav.js', { tool: 'edit', landed: true });
    expect(s.landedNow).toBe(true);
    for (let i = 0; i < 5; i++) turn(s, `look ${i}`);
    turn(s, 'edit nav.js', { tool: 'edit', landed: true });
    expect(s.landedNow).toBe(false);
    expect(verdictOf(s, k).signals).toMatchObject({ turns_since_landed: 6, landed: 1, landed_repeat: 2 });
    // another file landing is progress again
    turn(s, 'edit other.js', { tool: 'edit', landed: true });
    expect(s.landedNow).toBe(true);
    expect(verdictOf(s, k).signals).toMatchObject({ turns_since_landed: 0, landed: 2, landed_repeat: 1 });
  });

  it('count only within the window: the same file landing again much later is progress', () => {
    const s = newSessionState(k);
    turn(s, 'edit nav.js', { tool: 'edit', landed: true });
    for (let i = 0; i < k.window; i++) turn(s, `work ${i}`);
    turn(s, 'edit nav.js', { tool: 'edit', landed: true });
    expect(s.landedNow).toBe(true);
    expect(verdictOf(s, k).signals.turns_since_landed).toBe(0);
  });

  it('flag a run: stalling at landed_repeat_warn, looping at landed_repeat_loop, named in the reason', () => {
    // the run's own rule, apart from the window rules its counters now also feed
    const kk = NoProgressKnobsSchema.parse({ stall_turns: 200, loop_turns: 200, stall_usd: 100, loop_usd: 100 });
    const s = newSessionState(kk);
    for (let i = 0; i < 10; i++) onProgress(s, tool('s', `work ${i}`), kk);
    const levels: number[] = [];
    for (let i = 0; i < kk.landed_repeat_loop; i++) {
      levels.push(onProgress(s, tool('s', 'edit nav.js', { tool: 'edit', target: 'src/nav.js', landed: true }), kk));
      onProgress(s, tool('s', `read nav.js at offset ${i * 40}`, { target: 'src/nav.js' }), kk);
    }
    expect(levels.indexOf(1)).toBe(kk.landed_repeat_warn - 1);
    expect(levels.indexOf(2)).toBe(kk.landed_repeat_loop - 1);
    const v = verdictOf(s, kk);
    expect(v).toMatchObject({ level: 'looping', rule: 'landed_repeat' });
    expect(v.reason).toContain(
      `the same edit landed ${kk.landed_repeat_loop} times: a repeat, not progress (edit src/nav.js)`,
    );
    expect(VerdictSchema.parse(v)).toEqual(v);
  });

  it('never applies to shell landings: a commit or a test fix proves a new state', () => {
    const s = newSessionState(k);
    for (let i = 0; i < 20; i++) turn(s, 'git commit', { tool: 'bash', target: 'git commit', landed: true });
    expect(s.landedNow).toBe(true);
    expect(verdictOf(s, k).signals).toMatchObject({ landed: 20, landed_repeat: 1 });
  });

  it('do not reset the ancestors either (Tracker and the service roll-up alike)', () => {
    const t = new Tracker(k);
    for (let i = 0; i < 5; i++) t.applyRequest(request('root'));
    t.applyProgress(landing('kid', 'nav.js', { parent_session_id: 'root' }));
    expect(t.verdict('root')?.signals.turns_since_landed).toBe(0);
    for (let i = 0; i < 6; i++) {
      t.applyRequest(request('kid', { parent_session_id: 'root' }));
      t.applyProgress(landing('kid', 'nav.js', { parent_session_id: 'root' }));
    }
    expect(t.verdict('root')?.signals.turns_since_landed).toBe(6);
    expect(t.state('root')?.treeLandings).toBe(1);

    // the service shell: apply, then roll up what the judge says counted
    const kid = newSessionState(k);
    const root = newSessionState(k);
    const up = (ev: ToolEvent) => {
      const input: JudgeInput = { type: 'progress', event: ev };
      onProgress(kid, ev, k);
      const r = rollUpOf(input, kid);
      if (r) onRollup(root, r, k);
      return r;
    };
    expect(up(landing('kid', 'a.js'))?.landed).toBe(true);
    expect(up(landing('kid', 'a.js'))?.landed).toBe(false);
    expect(up(landing('kid', 'b.js'))?.landed).toBe(true);
    expect(root.treeLandings).toBe(2);
  });

  it('property: one write landing N times in a row, nothing else landing, is flagged within N landings', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 40 }),
        fc.integer({ min: 0, max: 20 }),
        fc.array(fc.integer({ min: 0, max: 4 }), { minLength: 40, maxLength: 40 }),
        fc.integer({ min: 0, max: 5 }),
        fc.boolean(),
        (prefix, extra, gaps, pool, withRequests) => {
          const t = new Tracker(k);
          const s = (ev: ToolEvent) => {
            if (withRequests) t.applyRequest(request('w', { parent_session_id: 'p' }));
            t.applyProgress({ ...ev, parent_session_id: 'p' });
          };
          for (let i = 0; i < prefix; i++) s(i % 7 === 3 ? landing('w', `prefix${i}.js`) : tool('w', `prefix ${i}`));
          let flaggedAt = -1;
          let parentTurns = -1;
          for (let n = 1; n <= k.landed_repeat_warn + extra; n++) {
            s(landing('w', 'loop.js'));
            const st = t.state('w') as SessionState;
            if (flaggedAt < 0 && st.level > 0) flaggedAt = n;
            const pt = verdictOf(t.state('p') as SessionState, k).signals.turns_since_landed;
            // after the run's first landing the parent never resets: each landing adds a turn
            if (n > 1 && pt <= parentTurns) return false;
            parentTurns = pt;
            // between landings: 0 to 4 calls that land nothing, from a small pool (repeats allowed)
            for (let g = 0; g < gaps[n % gaps.length]; g++) s(tool('w', `between ${(n + g) % (pool + 1)}`));
          }
          return flaggedAt > 0 && flaggedAt <= k.landed_repeat_warn;
        },
      ),
      { seed: 18, numRuns: 150 },
    );
  });
});

describe('identical runs', () => {
  it('take an unbroken run of one lookup to stalling at lookup_run_warn and looping at lookup_run_loop', () => {
    const s = newSessionState(k);
    for (let i = 0; i < 6; i++) turn(s, `work ${i}`);
    const levels: number[] = [];
    for (let i = 0; i < 25; i++) levels.push(turn(s, 'read settings.js', { target: 'src/settings.js' }));
    expect(levels.indexOf(1)).toBe(k.lookup_run_warn - 1);
    expect(levels.indexOf(2)).toBe(k.lookup_run_loop - 1);
    expect(verdictOf(s, k)).toMatchObject({ level: 'looping', rule: 'identical_run', signals: { identical_run: 25 } });
    expect(verdictOf(s, k).reason).toContain('read src/settings.js x25 in a row, the same exit each time');
  });

  it('give other calls (polls) the higher run_* thresholds', () => {
    const s = newSessionState(k);
    for (let i = 0; i < k.run_warn - 1; i++) turn(s, 'gh pr checks 42', { tool: 'bash', exit: 8 });
    expect(s.level).toBe(0);
    turn(s, 'gh pr checks 42', { tool: 'bash', exit: 8 });
    expect(verdictOf(s, k)).toMatchObject({ level: 'stalling', rule: 'identical_run' });
  });

  it('break when the exit changes, when the command numbers change, or after a compaction', () => {
    // (40 polls of one command with nothing landing still fill the window with
    // duplicates: that rule is not about runs)
    const exits = newSessionState(k);
    for (let i = 0; i < 40; i++) {
      turn(exits, 'curl health', { tool: 'bash', exit: [7, 7, 22, 0][i % 4] });
      expect(verdictOf(exits, k).signals.identical_run).toBeLessThanOrEqual(2);
      expect(verdictOf(exits, k).rule).not.toBe('identical_run');
    }

    const numbers = newSessionState(k);
    for (let i = 0; i < 30; i++) turn(numbers, `tail -n +${i * 40} dev.log`, { tool: 'bash' });
    expect(verdictOf(numbers, k)).toMatchObject({ level: 'ok', signals: { identical_run: 1 } });

    const aborted = newSessionState(k);
    turn(aborted, 'x', { tool: 'bash', exit: 0 });
    turn(aborted, 'x', { tool: 'bash', exit: null });
    expect(verdictOf(aborted, k).signals.identical_run).toBe(1);

    const compacted = newSessionState(k);
    for (let i = 0; i < k.lookup_run_warn - 1; i++) turn(compacted, 'read a.js');
    onProgress(compacted, { kind: 'compaction_done', session_id: 's', landed: false, ts: 1 }, k);
    turn(compacted, 'read a.js');
    expect(verdictOf(compacted, k).signals.identical_run).toBe(1);
    expect(compacted.level).toBe(0);
  });

  it('property: polling whose exit changes every few calls never reaches a run flag', () => {
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 0, max: 3 }), { minLength: 1, maxLength: 200 }), (exits) => {
        const s = newSessionState(k);
        let prev = -1;
        let same = 0;
        for (const e of exits) {
          same = e === prev ? same + 1 : 1;
          prev = e;
          // a poll changes its result at least every run_warn - 1 calls
          const exit = same >= k.run_warn ? (e + 1) % 4 : e;
          if (exit !== e) {
            prev = exit;
            same = 1;
          }
          turn(s, 'poll the server', { tool: 'bash', exit });
          if (verdictOf(s, k).rule === 'identical_run') return false;
        }
        return true;
      }),
      { seed: 6, numRuns: 100 },
    );
  });
});

/**
 * An orchestrator tree: per cycle, `own` calls of its own (a routine call every
 * `every` calls: status, plan read, todo write, in turn), a dispatch, then a child of
 * `kid` calls that lands at `lands` positions, then a log check. One request per call.
 */
function orchestratorTree(seed: number, cycles: number, every: number): JudgeInput[] {
  const r = rng(seed);
  const out: JudgeInput[] = [];
  const call = (session: string, c: string, o: Partial<ToolEvent> = {}) => {
    const parent = session === 'orch' ? undefined : { parent_session_id: 'orch' };
    out.push({ type: 'request', record: request(session, { cost_usd: 0.004, ...parent }) });
    out.push({ type: 'progress', event: tool(session, c, { ...parent, ...o }) });
  };
  const routine = ['git status --short', 'read .omo/plans/plan.md', 'todowrite in progress'];
  let n = 0;
  let turnOf = 0;
  for (let c = 0; c < cycles; c++) {
    const own = 20 + Math.floor(r() * 71);
    for (let i = 0; i < own; i++, n++) call('orch', n % every === 0 ? routine[turnOf++ % 3] : `orch look ${n}`);
    call('orch', 'task sisyphus-junior', { tool: 'task' });
    const kid = `kid${c}`;
    const len = 10 + Math.floor(r() * 51);
    const first = Math.floor(r() * Math.min(len, 30));
    const last = Math.max(first, len - 1 - Math.floor(r() * 20));
    for (let i = 0; i < len; i++) {
      const lands = i === first || i === last || r() < 0.05;
      call(kid, lands ? `edit ${kid} file ${i}` : `${kid} look ${i}`, lands ? { tool: 'edit', landed: true } : {});
    }
    call('orch', 'git log --oneline -5', { tool: 'bash' });
  }
  return out;
}

/** A parent `o` in a Tracker: own(n) makes n calls, a third of them routine (a status check, a plan read, a todo write in turn). */
function routineParent(t: Tracker) {
  const routine = ['git status', 'read plan.md', 'todowrite'];
  let n = 0;
  return (calls: number) => {
    for (let i = 0; i < calls; i++, n++) {
      t.applyRequest(request('o'));
      t.applyProgress(tool('o', n % 3 === 0 ? routine[(n / 3) % 3] : `look ${n}`));
    }
  };
}

describe('orchestrators, judged by their trees', () => {
  it('stay ok while the children land, though routine repeats add up over the session', () => {
    const inputs = orchestratorTree(3, 24, 8);
    const { t, worst } = replay(inputs);
    expect(worst.get('orch') ?? 0).toBe(0);
    expect(t.verdict('orch')?.signals.session_repeat).toBeGreaterThan(k.session_repeat_loop);
    // the same orchestrator without its children's roll-ups is flagged on those repeats
    const own = inputs.filter(
      (i) => (i.type === 'progress' ? i.event.session_id : i.type === 'request' ? i.record.session_id : '') === 'orch',
    );
    expect(replay(own).worst.get('orch')).toBeGreaterThan(0);
  });

  it('lose the grace once the tree has not landed for tree_grace_turns turns, whatever its rhythm', () => {
    const t = new Tracker(k);
    // a long first stretch: its rhythm alone would allow twice as long
    for (let i = 0; i < 200; i++) {
      t.applyRequest(request('o'));
      t.applyProgress(tool('o', `plan ${i}`));
    }
    for (let i = 0; i < k.tree_min_landings; i++)
      t.applyProgress(landing('kid', `f${i}.js`, { parent_session_id: 'o' }));
    expect((t.state('o') as SessionState).ownGapMax).toBe(200);
    const levels: number[] = [];
    for (let i = 0; i < k.tree_grace_turns + 10; i++) {
      t.applyRequest(request('o'));
      t.applyProgress(tool('o', i % 10 === 0 ? 'git status' : `look ${i}`));
      levels.push((t.state('o') as SessionState).level);
    }
    expect(levels.indexOf(1)).toBe(k.tree_grace_turns - 1);
    expect(t.verdict('o')?.rule).toBe('session_repeat');
  });

  it('lose the grace once the parent stops spawning: past its rhythm, judged as any session', () => {
    const t = new Tracker(k);
    // 40 own calls, a child landing, 60 own calls, a child landing: its longest stretch is 60
    const own = routineParent(t);
    own(40);
    t.applyProgress(landing('kid1', 'a.js', { parent_session_id: 'o' }));
    own(60);
    t.applyProgress(landing('kid2', 'b.js', { parent_session_id: 'o' }));
    expect(t.state('o')).toMatchObject({ ownGapMax: 60 });
    const levels: number[] = [];
    for (let i = 0; i < 150; i++) {
      own(1);
      levels.push((t.state('o') as SessionState).level);
    }
    // a third of its calls repeat: in rhythm for 2 x 60 own calls, then the duplicates count
    expect(levels.indexOf(1)).toBe(k.tree_rhythm_factor * 60 - 1);
    expect(t.verdict('o')).toMatchObject({ rule: 'duplicates', signals: { tree_rhythm: false } });
  });

  it('lose the grace once a child stops landing: its turns past the rhythm', () => {
    const t = new Tracker(k);
    const own = routineParent(t);
    own(50);
    t.applyProgress(landing('kid1', 'a.js', { parent_session_id: 'o' }));
    own(50);
    t.applyProgress({ ...tool('kid2', 'task', { tool: 'task' }), session_id: 'o' });
    // the child works and never lands: its requests roll up to the parent
    let flaggedAt = -1;
    for (let i = 0; i < 200 && flaggedAt < 0; i++) {
      t.applyRequest(request('kid2', { parent_session_id: 'o' }));
      t.applyProgress(tool('kid2', `kid look ${i}`, { parent_session_id: 'o' }));
      if ((t.state('o') as SessionState).level > 0) flaggedAt = i + 1;
    }
    // in rhythm while its turns stay under max(tree_rhythm_min, factor x the longest stretch)
    expect(flaggedAt).toBeGreaterThanOrEqual(k.tree_rhythm_min - 60);
    expect(flaggedAt).toBeLessThanOrEqual(k.tree_rhythm_min);
    expect(t.verdict('o')?.signals.tree_rhythm).toBe(false);
  });

  it('an orchestrator spinning on its routine is flagged once past its rhythm, inside the grace', () => {
    const t = new Tracker(k);
    for (let i = 0; i < 5; i++) t.applyProgress(landing('kid', `f${i}.js`, { parent_session_id: 'o' }));
    let at = -1;
    for (let i = 0; i < 150 && at < 0; i++) {
      t.applyRequest(request('o'));
      t.applyProgress(tool('o', i % 2 ? 'git status' : `read plan ${i % 6}`));
      if ((t.state('o') as SessionState).level > 0) at = i + 1;
    }
    // its stretches so far were empty: the rhythm allows tree_rhythm_min own calls
    expect(at).toBe(k.tree_rhythm_min);
    expect(verdictOf(t.state('o') as SessionState, k).signals.turns_since_landed).toBeLessThan(k.tree_grace_turns);
    expect(t.verdict('o')?.level).toBe('looping');
  });

  it('property: a healthy orchestrator tree with steadily landing children never stalls the orchestrator', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 1_000_000 }),
        fc.integer({ min: 4, max: 30 }),
        fc.integer({ min: 6, max: 20 }),
        (seed, cycles, every) => {
          const { worst } = replay(orchestratorTree(seed, cycles, every));
          return (worst.get('orch') ?? 0) === 0;
        },
      ),
      { seed: 2, numRuns: 40 },
    );
  });
});

describe('event kinds', () => {
  it('ignores a kind it does not know (another detector reads it)', () => {
    const s = newSessionState(k);
    for (let i = 0; i < 30; i++) turn(s, 'read a.js');
    const before = encodeState(s);
    const other = { kind: 'session_idle', session_id: 's', landed: false, ts: s.lastTs } as unknown as ProgressEvent;
    onProgress(s, other, k);
    expect(encodeState(s)).toEqual(before);
    expect(rollUpOf({ type: 'progress', event: other }, s)).toBeNull();
  });
});

describe('state encoding, version 2', () => {
  it('round-trips the run, the landing run and the tree landings', () => {
    const s = newSessionState(k);
    onProgress(s, landing('x', 'a.js', { agent: 'atlas' }), k);
    onProgress(s, landing('x', 'a.js'), k);
    for (let i = 0; i < 3; i++) onProgress(s, tool('x', 'poll', { tool: 'bash', exit: null }), k);
    onRollup(s, { landed: true, requests: 0, tools: 1, usd: 0, tokens: 0 }, k);
    const back = decodeState(encodeState(s));
    for (const f of [
      'runLen',
      'runNull',
      'runHi',
      'runLo',
      'runExit',
      'runTool',
      'runTarget',
      'landRun',
      'landSeq',
      'landRepeats',
      'landHi',
      'landLo',
      'landTool',
      'landTarget',
      'treeLandings',
      'landedNow',
    ] as const) {
      expect(back[f]).toEqual(s[f]);
    }
    expect(back).toMatchObject({ runLen: 3, runNull: true, landRun: 2, landRepeats: 1, treeLandings: 1 });
    expect(encodeState(back)).toEqual(encodeState(s));
  });
});

/** One turn of the loop from the incident: a failing `sh check.sh`, then a read of one file. */
function loopTurn(s: SessionState, i: number) {
  return i % 2 === 0
    ? turn(s, 'bash sh check.sh', { tool: 'bash', target: 'sh check.sh', exit: 1 })
    : turn(s, 'read docs/spec.md', { target: 'docs/spec.md' });
}

describe('a recovery (rebase)', () => {
  it('judges the session afresh: ok, every loop counter restarted, the totals kept', () => {
    const s = newSessionState(k);
    turn(s, 'edit a.js', { tool: 'edit', landed: true });
    let i = 0;
    while (LEVELS[s.level] !== 'looping') loopTurn(s, i++);
    const before = verdictOf(s, k).signals;
    expect(before.fail_streak).toBeGreaterThan(0);
    expect(rebase(s, k, 5_000)).toBe(0);
    const v = verdictOf(s, k);
    expect(v.level).toBe('ok');
    expect(v.signals).toMatchObject({
      turns_since_landed: 0,
      usd_since_landed: 0,
      dup_share: 0,
      fail_streak: 0,
      top_count: 0,
      session_repeat: 0,
      identical_run: 0,
      landed_repeat: 0,
      continuation_turns: 0,
      calls: before.calls,
      landed: 1,
    });
    expect(s).toMatchObject({ recoveries: 1, recoveredAt: 5_000, requests: before.calls });
    // an older recovery time never moves it back
    rebase(s, k, 4_000);
    expect(s).toMatchObject({ recoveries: 2, recoveredAt: 5_000 });
  });

  it('a loop that resumes is a new transition, once its own evidence is back (not at once)', () => {
    const s = newSessionState(k);
    let i = 0;
    while (LEVELS[s.level] !== 'looping') loopTurn(s, i++);
    rebase(s, k, 1);
    let n = 0;
    const levels: string[] = [];
    while (LEVELS[s.level] !== 'looping' && n < 500) {
      const from = s.level;
      loopTurn(s, n++);
      if (s.level !== from) levels.push(LEVELS[s.level]);
    }
    expect(levels).toEqual(['stalling', 'looping']);
    // a cycle of two calls: cycle_loop rounds
    expect(n).toBe(2 * k.cycle_loop);
    expect(verdictOf(s, k).rule).toBe('cycle');
  });

  it('a resumed loop that is no cycle needs the turn precondition again', () => {
    const s = newSessionState(k);
    const slow = (j: number) => turn(s, j % 3 === 0 ? 'read docs/spec.md' : `look ${j % 40}`, { target: 'x' });
    let j = 0;
    while (LEVELS[s.level] !== 'looping' && j < 500) slow(j++);
    expect(LEVELS[s.level]).toBe('looping');
    rebase(s, k, 1);
    let n = 0;
    while (LEVELS[s.level] !== 'looping' && n < 500) slow(j + n++);
    expect(n).toBeGreaterThanOrEqual(k.loop_turns);
    expect(n).toBeLessThanOrEqual(k.loop_turns + 2);
  });

  it('a recovered session that re-reads the call it looped on, then explores without landing, stays ok', () => {
    const s = newSessionState(k);
    let i = 0;
    while (LEVELS[s.level] !== 'looping') loopTurn(s, i++);
    rebase(s, k, 1);
    turn(s, 'read docs/spec.md', { target: 'docs/spec.md' });
    for (let j = 0; j < k.loop_turns + 20; j++) {
      turn(s, `read src/file_${j}.ts`);
      expect(LEVELS[s.level]).toBe('ok');
    }
  });

  it('leaves a read-only agent ok until it repeats itself again', () => {
    const s = newSessionState(k);
    onProgress(s, tool('e', 'a', { agent: 'explore' }), k);
    // each file read 20 times: over session_repeat_warn, so kept counts would flag it at once
    for (let j = 0; j < 80; j++) onProgress(s, tool('e', `file ${j % 4}`), k);
    expect(LEVELS[s.level]).not.toBe('ok');
    rebase(s, k, 1);
    onProgress(s, tool('e', 'file 0'), k);
    expect(LEVELS[s.level]).toBe('ok');
    for (let j = 0; j < 40; j++) onProgress(s, tool('e', `file ${j % 4}`), k);
    expect(LEVELS[s.level]).not.toBe('ok');
  });

  it('the Tracker reports the change of a recovered session', () => {
    const t = new Tracker(k);
    for (let j = 0; j < 30; j++) t.apply({ type: 'progress', event: tool('tr', 'read one.md') });
    expect(t.verdict('tr')?.level).toBe('looping');
    expect(t.recover('tr', 9)).toMatchObject({ session_id: 'tr', from: 'looping', to: 'ok' });
    expect(t.recover('tr', 10)).toBeUndefined();
    expect(t.recover('nobody', 10)).toBeUndefined();
  });
});

describe('state encoding, version 3', () => {
  it('round-trips the recoveries and the latest recovery time', () => {
    const s = newSessionState(k);
    for (let j = 0; j < 10; j++) loopTurn(s, j);
    rebase(s, k, 1_790_000_000_123);
    loopTurn(s, 0);
    const back = decodeState(encodeState(s));
    expect(back).toMatchObject({ recoveries: 1, recoveredAt: 1_790_000_000_123 });
    expect(verdictOf(back, k)).toEqual(verdictOf(s, k));
    expect(encodeState(back)).toEqual(encodeState(s));
  });
});
