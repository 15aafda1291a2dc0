import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { type ProgressEvent, type RequestRecord, type ToolEvent, VerdictSchema } from '../../core/wire.ts';
import { sha256Hex } from '../../opencode/normalize.ts';
import { generateCalibration } from '../../test/fixtures/calibration.ts';
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
  type SessionState,
  Tracker,
  verdictOf,
} from './judge.ts';
import { defaultKnobs, NoProgressKnobsSchema } from './knobs.ts';

const k = defaultKnobs();
let seq = 0;

function tool(session: string, call: string, o: Partial<ToolEvent> = {}): ToolEvent {
  seq++;
  return {
    kind: 'tool',
    session_id: session,
    tool: o.tool ?? 'read',
    call_id: `call_${seq}`,
    fingerprint: sha256Hex(call),
    target: o.target ?? call,
    exit: 0,
    landed: false,
    ts: seq,
    ...o,
  };
}

function request(session: string, o: Partial<RequestRecord> = {}): RequestRecord {
  seq++;
  return {
    session_id: session,
    request_id: `r${seq}`,
    model: 'p/m',
    prompt_tokens: 50_000,
    cost_usd: 0.002,
    ts: seq,
    ...o,
  };
}

/** One LLM turn: a request then its tool call. */
function turn(s: SessionState, call: string, o: Partial<ToolEvent> = {}) {
  onRequest(s, request('s'), k);
  return onProgress(s, tool('s', call, o), k);
}

/** Worst verdict per session over a stream, and the progress-event index of the first flag. */
function replay(inputs: readonly JudgeInput[], knobs = k) {
  const t = new Tracker(knobs);
  const worst = new Map<string, number>();
  for (const i of inputs) {
    for (const c of t.apply(i)) worst.set(c.session_id, Math.max(worst.get(c.session_id) ?? 0, LEVELS.indexOf(c.to)));
  }
  return { t, worst };
}

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

  it('is deterministic', () => {
    const again = replay(cal.inputs).worst;
    expect([...again]).toEqual([...worst]);
  });
});

describe('stalling and looping', () => {
  it('needs no landed change AND a repeat signal', () => {
    const s = newSessionState(k);
    // 30 turns of distinct calls: no landed change, but no repeats either
    for (let i = 0; i < 30; i++) expect(turn(s, `distinct ${i}`)).toBe(0);
    // now the same read over and over
    let level = 0;
    let at = 0;
    for (let i = 0; i < 12 && level === 0; i++, at = i) level = turn(s, 'read navbar.js');
    expect(LEVELS[level]).toBe('stalling');
    expect(at).toBeLessThanOrEqual(12);
    expect(verdictOf(s, k).signals.top_target).toBe('read read navbar.js');
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
    for (let i = 0; i < 7; i++) onProgress(s, tool('e', 'read SPEC.md'), k);
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

  it('is compact: a fresh session under 256 bytes, a full window under 3 KB', () => {
    const s = newSessionState(k);
    onProgress(s, tool('x', 'a', { agent: 'build' }), k);
    expect(encodeState(s).length).toBeLessThan(256);
    for (let i = 0; i < 100; i++) onProgress(s, tool('x', `c${i}`), k);
    expect(encodeState(s).length).toBeLessThan(3_000);
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
      changes.push(...t.applyProgress(tool('w', 'read navbar.js')));
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
