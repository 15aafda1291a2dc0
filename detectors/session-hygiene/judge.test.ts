import { describe, expect, it } from 'vitest';
import { call, ev, HOUR, type HygieneInputList, MIN, P, R, req, SEC, turn } from './fixtures.ts';
import {
  envelopeOf,
  envelopeReadout,
  type HygieneChange,
  type HygieneState,
  HygieneTracker,
  judge,
  learnRequest,
  newEnvelopeBook,
  newHygieneState,
  onEvent,
  onRequest,
  onTick,
  readout,
} from './judge.ts';
import { defaultHygieneOptions, type HygieneOptionsInput, HygieneOptionsSchema } from './options.ts';

const M = 'prov/model-a';
const S = 'ses_h';
const T0 = Date.parse('2026-09-01T10:00:00Z');
const knobs = (o: HygieneOptionsInput = {}) => HygieneOptionsSchema.parse(o);

function run(inputs: HygieneInputList, k = knobs()) {
  const tracker = new HygieneTracker(k);
  const changes: HygieneChange[] = [];
  for (const i of inputs) changes.push(...tracker.apply(i));
  return { tracker, changes, s: (id = S) => tracker.state(id)! };
}

const prompt = (at: number, resume = false, id?: string) =>
  P({ kind: 'prompt', session_id: S, ts: at, resume, call_id: id });
const rules = (cs: readonly HygieneChange[]) => cs.map((c) => `${c.from}->${c.to}:${c.rule}`);

describe('watch number', () => {
  it.each([
    [149_999, []],
    [150_000, ['ok->warning:watch_number']],
    [199_999, ['ok->warning:watch_number']],
    [200_000, ['ok->critical:watch_number']],
  ])('a completed turn at %i per call gives %j', (perCall, want) => {
    const { changes } = run(turn(S, M, { perCall, calls: 3, resume: false, at: T0 }, 'router'));
    expect(rules(changes)).toEqual(want);
  });

  it('judges the last completed turn only, and clears when it drops (after a compaction)', () => {
    const { changes } = run([
      ...turn(S, M, { perCall: 210_000, calls: 4, resume: false, at: T0 }, 'opencode'),
      ...turn(S, M, { perCall: 60_000, calls: 4, resume: true, at: T0 + HOUR }, 'opencode'),
    ]);
    expect(rules(changes)).toEqual(['ok->critical:watch_number', 'critical->ok:null']);
    expect(changes[1].reason).toBe('ok: watch_number cleared');
  });

  it('is not judged while the turn is running', () => {
    const t = turn(S, M, { perCall: 250_000, calls: 4, resume: false, at: T0 }, 'router');
    const { changes, s } = run(t.slice(0, -1));
    expect(changes).toEqual([]);
    expect(readout(s(), knobs()).current_per_call).toBe(249_000);
  });

  it('counts a call reported by both the router and opencode once', () => {
    const k = knobs();
    const s = newHygieneState(S);
    onEvent(s, ev({ kind: 'prompt', session_id: S, ts: T0, resume: false }), k);
    for (let c = 0; c < 3; c++) {
      const last = c === 2;
      const at = T0 + (c + 1) * SEC;
      for (const i of [
        call(S, M, 100_000, at, 'router', { finish: last ? 'stop' : 'tool' }),
        call(S, M, 100_000, at, 'opencode', { finish: last ? 'stop' : 'tool' }),
      ]) {
        if (i.type === 'request') onRequest(s, i.record, k);
        else onEvent(s, i.event, k);
      }
    }
    expect(s.trend).toEqual([{ at: T0 + 3 * SEC, calls: 3, per_call: 100_000 }]);
  });

  it('a router-only session (no prompts) delimits turns by finish reasons', () => {
    const inputs = [0, 1].flatMap((t) =>
      [0, 1, 2].map((c) =>
        call(S, M, t === 0 ? 100_000 : 160_000, T0 + t * HOUR + c * SEC, 'router', {
          finish: c === 2 ? 'stop' : 'tool',
        }),
      ),
    );
    const { changes, s } = run(inputs);
    expect(s().trend.map((e) => [e.calls, e.per_call])).toEqual([
      [3, 100_000],
      [3, 160_000],
    ]);
    expect(rules(changes)).toEqual(['ok->warning:watch_number']);
  });

  it('keeps the trend bounded at trend_turns', () => {
    const inputs: HygieneInputList = [];
    for (let t = 0; t < 40; t++)
      inputs.push(...turn(S, M, { perCall: 1_000 * (t + 1), calls: 2, resume: false, at: T0 + t * MIN }, 'router'));
    const { s } = run(inputs);
    expect(s().trend).toHaveLength(32);
    expect(s().trend[0].per_call).toBe(9_000);
    expect(s().turns).toBe(40);
  });
});

describe('the fire alarm: empty generations', () => {
  for (const source of ['router', 'opencode'] as const) {
    it(`${source}: one empty generation is one critical change; its retries raise nothing more`, () => {
      const inputs: HygieneInputList = [
        prompt(T0),
        call(S, M, 50_000, T0 + SEC, source, { finish: 'tool' }),
        call(S, M, 52_000, T0 + 2 * SEC, source, { visible: false, finish: 'stop' }),
      ];
      for (let r = 1; r <= 6; r++) {
        inputs.push(P({ kind: 'retry', session_id: S, ts: T0 + r * MIN, attempt: r }));
        inputs.push(call(S, M, 52_000, T0 + r * MIN + SEC, source, { visible: false, finish: 'stop' }));
      }
      const { changes, s } = run(inputs);
      expect(rules(changes)).toEqual(['ok->critical:empty_generation']);
      expect(changes[0].action).toBe('abort_dispatch');
      expect(changes[0].reason).toContain('empty generation');
      // raised by the first one, not re-raised by the later ones
      expect(readout(s(), knobs()).findings[0]).toMatchObject({ rule: 'empty_generation', since: T0 + 2 * SEC });
      // the retries are counted beneath it
      expect(
        s()
          .findings.filter((f) => f !== null)
          .map((f) => f!.level),
      ).toEqual(['critical', 'warning']);
    });
  }

  it('an errored or aborted call is not an empty generation', () => {
    const { changes } = run([
      prompt(T0),
      call(S, M, 50_000, T0 + SEC, 'router', { status: 500, code: 'server_error' }),
      P({
        kind: 'assistant',
        session_id: S,
        call_id: 'msg_ab',
        ts: T0 + 2 * SEC,
        visible_output: false,
        error_name: 'MessageAbortedError',
      }),
    ]);
    expect(changes).toEqual([]);
  });

  it('a step no model answered (no finish, no prompt tokens: cut while opencode waited to retry a 429) is not an empty generation', () => {
    const { changes } = run([
      prompt(T0),
      P({ kind: 'assistant', session_id: S, call_id: 'msg_cut', model: M, ts: T0 + SEC, visible_output: false }),
    ]);
    expect(changes).toEqual([]);
  });

  it('stays for the turn, even if a retry answers; a later turn with visible output clears it', () => {
    const { changes } = run([
      prompt(T0),
      call(S, M, 50_000, T0 + SEC, 'opencode', { visible: false, finish: 'stop' }),
      call(S, M, 50_000, T0 + 2 * SEC, 'opencode', { finish: 'stop' }),
      prompt(T0 + HOUR, true),
      call(S, M, 51_000, T0 + HOUR + SEC, 'opencode', { finish: 'stop' }),
    ]);
    expect(rules(changes)).toEqual(['ok->critical:empty_generation', 'critical->ok:null']);
    expect(changes[1].at).toBe(T0 + HOUR + SEC);
  });

  it('a second empty turn after the alarm cleared raises it again', () => {
    const empty = (at: number) => call(S, M, 50_000, at, 'router', { visible: false, finish: 'stop' });
    const { changes } = run([
      prompt(T0),
      empty(T0 + SEC),
      prompt(T0 + MIN),
      call(S, M, 50_000, T0 + MIN + SEC, 'router'),
      prompt(T0 + 2 * MIN),
      empty(T0 + 2 * MIN + SEC),
    ]);
    expect(rules(changes)).toEqual([
      'ok->critical:empty_generation',
      'critical->ok:null',
      'ok->critical:empty_generation',
    ]);
  });
});

describe('retry amplification', () => {
  it('N retry attempts of one turn: one warning; a new turn clears it', () => {
    const inputs: HygieneInputList = [prompt(T0), call(S, M, 80_000, T0 + SEC, 'opencode', { finish: 'tool' })];
    for (let r = 1; r <= 8; r++) inputs.push(P({ kind: 'retry', session_id: S, ts: T0 + r * 10 * SEC, attempt: r }));
    inputs.push(prompt(T0 + HOUR, true));
    const { changes } = run(inputs);
    expect(rules(changes)).toEqual(['ok->warning:retry_amplification', 'warning->ok:null']);
    expect(changes[0].reason).toMatch(/^3 retries of one turn \(>= 3\)/);
    expect(changes[0].action).toBe('none');
  });

  it('a re-reported attempt counts once; a second failing call restarts at 1 and adds up', () => {
    const retry = (at: number, attempt: number) => P({ kind: 'retry', session_id: S, ts: at, attempt });
    const once = run([prompt(T0), retry(T0 + 1, 1), retry(T0 + 2, 2), retry(T0 + 3, 2), retry(T0 + 4, 2)]);
    expect(once.changes).toEqual([]);
    expect(readout(once.s(), knobs()).retries_this_turn).toBe(2);
    const twice = run([prompt(T0), retry(T0 + 1, 1), retry(T0 + 2, 2), retry(T0 + 3, 1)]);
    expect(rules(twice.changes)).toEqual(['ok->warning:retry_amplification']);
  });

  it('identical request records (same model, same prompt size) in one turn are retries', () => {
    const inputs: HygieneInputList = [prompt(T0)];
    for (let r = 0; r < 4; r++)
      inputs.push(call(S, M, 90_000, T0 + r * MIN, 'router', { status: 429, code: 'rate_limited' }));
    const { changes, s } = run(inputs);
    expect(rules(changes)).toEqual(['ok->warning:retry_amplification']);
    expect(readout(s(), knobs()).retries_this_turn).toBe(3);
  });

  it('growing prompts are steps, not retries', () => {
    const { changes } = run(turn(S, M, { perCall: 50_000, calls: 12, resume: false, at: T0 }, 'router'));
    expect(changes).toEqual([]);
  });
});

describe('restore stall', () => {
  const t = T0;
  const stats = (at: number, o: { updated_at?: number; live?: boolean; messages?: number; bytes?: number } = {}) =>
    P({
      kind: 'session_stats',
      session_id: S,
      ts: at,
      messages: o.messages ?? 3_662,
      stored_bytes: o.bytes ?? 5_000_000,
      updated_at: 'updated_at' in o ? o.updated_at : t - 4 * HOUR,
      live: o.live ?? true,
    });

  function stalled(inputs: HygieneInputList, tickAt: number) {
    const r = run(inputs, knobs({ message_ceiling: 100_000 }));
    return [...r.changes, ...onTick(r.s(), tickAt, r.tracker.knobs)];
  }

  it('a resume with no first token and nothing written since it: critical at t+121s, not at t+119s', () => {
    const inputs = [prompt(t, true, 'msg_r'), stats(t + 5 * SEC)];
    expect(stalled(inputs, t + 119 * SEC)).toEqual([]);
    const changes = stalled(inputs, t + 121 * SEC);
    expect(rules(changes)).toEqual(['ok->critical:restore_stall']);
    expect(changes[0].action).toBe('abort_and_fresh');
    expect(changes[0].reason).toBe(
      'stalled on restore: resumed 121s ago, no first token, newest write 4h before the resume, process alive: abort and open fresh; waiting buys nothing',
    );
    expect(changes[0].brief).toContain('What died: session ses_h. stalled on restore');
    expect(changes[0].brief).toContain('messages stored: 3662');
  });

  it('a first token at t+30s: nothing', () => {
    const first = call(S, M, 90_000, t + 30 * SEC, 'opencode', { finish: 'tool' });
    expect(stalled([prompt(t, true), stats(t + 5 * SEC), first], t + 121 * SEC)).toEqual([]);
  });

  it.each([
    ['a retry (the provider is being called)', P({ kind: 'retry', session_id: S, ts: t + 40 * SEC, attempt: 1 })],
    ['a request record', R({ session_id: S, request_id: 'r1', model: M, prompt_tokens: 9, ts: t + 40 * SEC })],
    ['a newer reading that shows a write', stats(t + 60 * SEC, { updated_at: t + 50 * SEC })],
  ])('%s after the resume: nothing', (_, first) => {
    expect(stalled([prompt(t, true), stats(t + 5 * SEC), first], t + 121 * SEC)).toEqual([]);
  });

  it.each([
    ['the process not answering', [stats(t + 5 * SEC, { live: false })]],
    ['no reading after the resume', [stats(t - 5 * SEC)]],
    ['no newest-write time', [stats(t + 5 * SEC, { updated_at: undefined })]],
  ])('is not concluded with %s', (_, readings) => {
    expect(stalled([prompt(t, true), ...readings], t + 121 * SEC)).toEqual([]);
  });

  it('is not concluded from a reading older than first_token_timeout', () => {
    expect(stalled([prompt(t, true), stats(t + 5 * SEC)], t + 126 * SEC)).toEqual([]);
  });

  it('the stalled step aborted (by Vigil or the user) is no first token: the verdict stays until the next prompt', () => {
    const r = run([prompt(t, true), stats(t + 5 * SEC)], knobs({ message_ceiling: 100_000 }));
    const k = r.tracker.knobs;
    const out = [...onTick(r.s(), t + 121 * SEC, k)];
    const aborted = P({
      kind: 'assistant',
      session_id: S,
      call_id: 'msg_aborted',
      model: M,
      error_name: 'MessageAbortedError',
      visible_output: false,
      ts: t + 122 * SEC,
    });
    out.push(...r.tracker.apply(aborted), ...onTick(r.s(), t + 200 * SEC, k));
    expect(rules(out)).toEqual(['ok->critical:restore_stall']);
    expect(r.s().resume_at).toBe(t);
  });

  it('a prompt that is not a resume starts no restore watch', () => {
    expect(stalled([prompt(t, false), stats(t + 5 * SEC)], t + 121 * SEC)).toEqual([]);
  });

  it('clears when the first token finally comes, and a new resume re-arms it', () => {
    const r = run([prompt(t, true), stats(t + 5 * SEC)], knobs({ message_ceiling: 100_000 }));
    const k = r.tracker.knobs;
    const out = [...onTick(r.s(), t + 121 * SEC, k)];
    out.push(...r.tracker.apply(P({ kind: 'retry', session_id: S, ts: t + 200 * SEC, attempt: 1 })));
    out.push(...r.tracker.apply(prompt(t + HOUR, true)));
    out.push(...r.tracker.apply(stats(t + HOUR + 10 * SEC)));
    out.push(...onTick(r.s(), t + HOUR + 130 * SEC, k));
    expect(rules(out)).toEqual(['ok->critical:restore_stall', 'critical->ok:null', 'ok->critical:restore_stall']);
  });
});

describe('session bulk ceilings', () => {
  const stats = (messages: number, stored_bytes: number, history_bytes?: number) =>
    P({ kind: 'session_stats', session_id: S, ts: T0, messages, stored_bytes, history_bytes, live: true });

  it.each([
    [3_599, 17_999_999, []],
    [3_600, 1_000, ['ok->warning:message_ceiling']],
    [10, 18_000_000, ['ok->warning:bytes_ceiling']],
    [3_662, 19_117_759, ['ok->warning:message_ceiling']],
  ])('%i messages, %i bytes: %j', (m, b, want) => {
    expect(rules(run([stats(m, b)]).changes)).toEqual(want);
  });

  it('names the numbers and clears below the ceiling', () => {
    const { changes } = run([stats(3_662, 100), stats(100, 19_117_759), stats(100, 100)]);
    expect(rules(changes)).toEqual([
      'ok->warning:message_ceiling',
      'warning->warning:bytes_ceiling',
      'warning->ok:null',
    ]);
    expect(changes[0].reason).toMatch(/^3662 messages stored \(>= 3600\)/);
    expect(changes[1].reason).toMatch(/^19\.1 MB stored \(>= 18\.0 MB\)/);
  });

  it('are knobs', () => {
    expect(rules(run([stats(600, 100)], knobs({ message_ceiling: 600 })).changes)).toEqual([
      'ok->warning:message_ceiling',
    ]);
  });
});

describe('secondary tells (info)', () => {
  it('an image entering a conversation at >= 100k per call, not below', () => {
    const img = (at: number) => P({ kind: 'image', session_id: S, ts: at, bytes: 198_000 });
    const below = run([prompt(T0), call(S, M, 99_999, T0 + SEC, 'router', { finish: 'tool' }), img(T0 + 2 * SEC)]);
    expect(below.changes).toEqual([]);
    const at = run([prompt(T0), call(S, M, 100_000, T0 + SEC, 'router', { finish: 'tool' }), img(T0 + 2 * SEC)]);
    expect(rules(at.changes)).toEqual(['ok->info:image_over_100k']);
    expect(at.changes[0].reason).toMatch(/^image of 198 KB entered at 100k prompt tokens per call/);
    // it rides in the prefix until the context drops (a compaction)
    expect(at.tracker.apply(call(S, M, 101_000, T0 + 3 * SEC, 'router', { finish: 'tool' }))).toEqual([]);
    expect(rules(at.tracker.apply(call(S, M, 30_000, T0 + HOUR, 'router', { finish: 'tool' })))).toEqual([
      'info->ok:null',
    ]);
  });

  it('resume count >= 4 within 24h, cleared as the window passes', () => {
    const inputs = [0, 1, 2, 3, 4].map((i) => prompt(T0 + i * HOUR, i > 0));
    const r = run(inputs.slice(0, 4));
    expect(r.changes).toEqual([]);
    const after = r.tracker.apply(inputs[4]);
    expect(rules(after)).toEqual(['ok->info:resume_count']);
    expect(rules(onTick(r.s(), T0 + 25 * HOUR, r.tracker.knobs))).toEqual(['info->ok:null']);
  });

  it('a resent prompt (same message id) is one resume', () => {
    const inputs = [prompt(T0), ...[1, 2, 3, 4].flatMap((i) => [prompt(T0 + i * MIN, true, `msg_${i % 2}`)])];
    expect(run(inputs).changes).toEqual([]);
  });

  it('history sent to the model over 1 MB', () => {
    const st = (h: number) =>
      P({ kind: 'session_stats', session_id: S, ts: T0, messages: 9, stored_bytes: 9, history_bytes: h, live: true });
    expect(run([st(1_000_000)]).changes).toEqual([]);
    expect(rules(run([st(1_000_001)]).changes)).toEqual(['ok->info:history_bytes']);
  });

  it('an info tell never masks a warning, and surfaces when the warning clears', () => {
    const st = (m: number) =>
      P({
        kind: 'session_stats',
        session_id: S,
        ts: T0,
        messages: m,
        stored_bytes: 9,
        history_bytes: 2_000_000,
        live: true,
      });
    const { changes } = run([st(4_000), st(10)]);
    expect(rules(changes)).toEqual(['ok->warning:message_ceiling', 'warning->info:history_bytes']);
  });
});

describe('effective envelope', () => {
  const k = knobs({ nominal_context: { [M]: 1_048_576 } });
  const cleanRec = (n: number, tokens: number, model = M) => ({
    session_id: `ses_e${n}`,
    request_id: `r${n}`,
    model,
    prompt_tokens: tokens,
    visible_output: true,
    ts: T0 + n,
  });
  const clean = (n: number, tokens: number, model = M) => R(cleanRec(n, tokens, model));

  it('is the largest prompt that completed cleanly, per exact model string, beside the nominal window', () => {
    const book = newEnvelopeBook();
    for (const [i, x] of [120_000, 235_000, 180_000].entries()) learnRequest(book, req(cleanRec(i, x)), k);
    // failures and empty generations are not clean
    learnRequest(
      book,
      req({
        session_id: 's',
        request_id: 'x1',
        model: M,
        prompt_tokens: 246_000,
        status: 400,
        error_code: 'context_length_exceeded',
        ts: T0 + 10,
      }),
      k,
    );
    learnRequest(
      book,
      req({ session_id: 's', request_id: 'x2', model: M, prompt_tokens: 300_000, visible_output: false, ts: T0 + 11 }),
      k,
    );
    learnRequest(book, req(cleanRec(20, 999_000, `${M}-v2`)), k);
    const rows = envelopeReadout(book, k);
    expect(rows.map((r) => [r.model, r.effective, r.nominal, r.clean_calls, r.failures])).toEqual([
      [M, 235_000, 1_048_576, 3, 1],
      [`${M}-v2`, 999_000, null, 1, 0],
    ]);
    expect(rows[0].share_of_nominal).toBeCloseTo(0.224, 3);
    expect(rows[0].recent_failures[0]).toMatchObject({
      prompt_tokens: 246_000,
      status: 400,
      code: 'context_length_exceeded',
    });
  });

  it('a request above it warns; within it, or before enough clean calls, nothing', () => {
    const warm: HygieneInputList = [];
    for (let i = 0; i < 20; i++) warm.push(clean(i, 120_000 + i * 1_000));
    // 19 clean calls: not enough evidence yet
    expect(
      run(
        [...warm.slice(0, 19), R({ session_id: S, request_id: 'q', model: M, prompt_tokens: 200_000, ts: T0 + 50 })],
        k,
      ).changes,
    ).toEqual([]);
    const above = run(
      [...warm, R({ session_id: S, request_id: 'q', model: M, prompt_tokens: 200_000, ts: T0 + 50 })],
      k,
    );
    expect(rules(above.changes)).toEqual(['ok->warning:envelope']);
    expect(above.changes[0].reason).toBe(
      `prompt 200k on ${M} is above its effective envelope: largest clean prompt 139k of 20 clean calls (nominal window 1049k)`,
    );
    expect(above.changes[0].model).toBe(M);
    const within = run(
      [...warm, R({ session_id: S, request_id: 'q', model: M, prompt_tokens: 139_000, ts: T0 + 50 })],
      k,
    );
    expect(within.changes).toEqual([]);
    const other = run(
      [...warm, R({ session_id: S, request_id: 'q', model: `${M}-v2`, prompt_tokens: 200_000, ts: T0 + 50 })],
      k,
    );
    expect(other.changes).toEqual([]);
  });

  it('below envelope_min_tokens growth is ordinary', () => {
    const warm: HygieneInputList = [];
    for (let i = 0; i < 20; i++) warm.push(clean(i, 20_000 + i));
    expect(
      run([...warm, R({ session_id: S, request_id: 'q', model: M, prompt_tokens: 90_000, ts: T0 + 50 })], k).changes,
    ).toEqual([]);
  });

  it('keeps at most max_models, the least recently used go first', () => {
    const kk = knobs({ max_models: 2 });
    const book = newEnvelopeBook();
    for (const [i, m] of ['a/1', 'b/2', 'c/3'].entries()) learnRequest(book, req(cleanRec(i, 1_000, m)), kk);
    expect(envelopeReadout(book, kk).map((r) => r.model)).toEqual(['b/2', 'c/3']);
    expect(envelopeOf(book, 'a/1')).toBeNull();
  });

  it('a model named __proto__ is an ordinary entry, also after a JSON round trip', () => {
    const book = newEnvelopeBook();
    learnRequest(book, req(cleanRec(1, 5_000, '__proto__')), k);
    const back = JSON.parse(JSON.stringify(book));
    learnRequest(back, req(cleanRec(2, 7_000, '__proto__')), k);
    expect(envelopeOf(back, '__proto__')?.largest_clean).toBe(7_000);
    expect(Object.getPrototypeOf(back.models)).toBe(Object.prototype);
  });
});

describe('the judge is pure and its state is small JSON', () => {
  function history(): HygieneInputList {
    const inputs: HygieneInputList = [];
    const per = [143_000, 164_000, 175_000, 180_000, 185_000, 206_000, 230_000];
    per.forEach((x, i) => {
      inputs.push(...turn(S, M, { perCall: x, calls: 4, resume: i > 0, at: T0 + i * HOUR }, 'router'));
      inputs.push(
        P({
          kind: 'session_stats',
          session_id: S,
          ts: T0 + i * HOUR + 5 * MIN,
          messages: 500 * (i + 1),
          stored_bytes: 3_000_000 * (i + 1),
          live: true,
        }),
      );
    });
    return inputs;
  }

  it('the same inputs give the same changes, also through a JSON round trip of the state at every step', () => {
    const k = defaultHygieneOptions();
    const direct = run(history(), k).changes;
    let s: HygieneState = newHygieneState(S);
    const stored: HygieneChange[] = [];
    for (const i of history()) {
      s = JSON.parse(JSON.stringify(s));
      stored.push(
        ...judge(
          s,
          i.type === 'progress' ? { type: 'progress', event: i.event } : { type: 'request', record: i.record },
          k,
        ).changes,
      );
    }
    expect(rules(direct)).toEqual(['ok->warning:watch_number', 'warning->critical:watch_number']);
    expect(stored).toEqual(direct);
  });

  it('ignores kinds it does not use (tool calls only count as signs of life)', () => {
    const { changes } = run([
      P({
        kind: 'tool',
        session_id: S,
        ts: T0,
        tool: 'read',
        call_id: 'c1',
        fingerprint: 'a'.repeat(64),
        target: 'a.ts',
        landed: false,
      }),
      P({ kind: 'compaction_done', session_id: S, ts: T0 + 1 }),
    ]);
    expect(changes).toEqual([]);
  });

  it('stays under 3 KB of JSON after 2,000 turns with every kind of input', () => {
    const inputs: HygieneInputList = [];
    for (let t = 0; t < 2_000; t++) {
      const at = T0 + t * 10 * MIN;
      inputs.push(
        ...turn(
          S,
          M,
          { perCall: 30_000 + (t % 50) * 1_000, calls: 3, resume: t > 0, at },
          t % 2 ? 'router' : 'opencode',
        ),
      );
      inputs.push(P({ kind: 'image', session_id: S, ts: at + 1, call_id: `prt_${t}`, bytes: 1_000 }));
      inputs.push(P({ kind: 'retry', session_id: S, ts: at + 2, attempt: 1 }));
      inputs.push(
        P({
          kind: 'session_stats',
          session_id: S,
          ts: at + 3,
          messages: t,
          stored_bytes: t * 1_000,
          history_bytes: t,
          updated_at: at,
          live: true,
        }),
      );
    }
    const { s } = run(inputs);
    const json = JSON.stringify(s());
    expect(s().turns).toBe(2_000);
    expect(json.length).toBeLessThan(3_072);
  });

  it('every reason is one ASCII line of at most 300 characters', () => {
    const r = run([
      ...history(),
      P({ kind: 'image', session_id: S, ts: T0 + 9 * HOUR, bytes: 1 }),
      call(S, M, 230_000, T0 + 9 * HOUR + 1, 'router', { visible: false }),
    ]);
    const f = readout(r.s(), r.tracker.knobs).findings;
    expect(f.length).toBeGreaterThan(3);
    for (const x of f) expect(x.reason).toMatch(/^[\x20-\x7e]{1,300}$/);
  });
});
