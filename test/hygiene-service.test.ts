import { afterEach, describe, expect, it } from 'vitest';
import { createRegistry } from '../builtins.ts';
import { keys } from '../core/store/keys.ts';
import type { Vigil } from '../core/vigil.ts';
import { call, HOUR, type HygieneInputList, MIN, P, SEC, turn } from '../detectors/session-hygiene/fixtures.ts';
import { SessionHygieneDetector } from '../detectors/session-hygiene/hygiene.detector.ts';
import { buildServer } from '../service/server.ts';
import { type Behaviour, behaviour, eventually, recordingPlugin, testVigil } from './helpers/index.ts';

// Session hygiene as a built-in detector, through the real service: request records on
// POST /requests, opencode facts on POST /progress, alerts through the notifier to a
// recording channel, the gate over POST /gate, the readouts. Memory backend (the Redis
// run of the same pipeline, two instances sharing one Redis, is test/hygiene-redis.e2e.test.ts).

const MODEL = 'route/long-context-model';
/** Thread B: per-call prompt tokens of its seven turns, then the death at 246k. */
const CURVE = [143_000, 164_000, 175_000, 180_000, 185_000, 206_000, 230_000, 246_000];
const T0 = Date.parse('2026-08-22T08:00:00Z');

const running: { v: Vigil; close: () => Promise<unknown> }[] = [];
afterEach(async () => {
  for (const r of running.splice(0)) {
    await r.close();
    await r.v.close();
  }
});

async function service(o: { mode?: string; hygiene?: Record<string, unknown> } = {}) {
  const rec = behaviour();
  const v = await testVigil({
    backend: 'memory',
    registry: createRegistry().register(recordingPlugin(rec)),
    channels: [{ name: 'rec', type: 'recording', min_severity: 'info', quiet_window: 0 }],
    // The post-mortem's timeline is replayed at its own dates: let old event times in.
    overlay: {
      modes: { mode: o.mode ?? 'warn' },
      server: { max_event_age: '3650d' },
      ...(o.hygiene ? { hygiene: o.hygiene } : {}),
    },
  });
  const app = await buildServer(v);
  running.push({ v, close: () => app.close() });
  return { v, app, rec };
}

type App = Awaited<ReturnType<typeof service>>['app'];

/** Sends each input where its sensor sends it; returns the verdict changes the service reported. */
async function send(app: App, inputs: HygieneInputList) {
  const verdicts: { session: string; detector: string; from: string; to: string }[] = [];
  for (const i of inputs) {
    const r =
      i.type === 'request'
        ? await app.inject({ method: 'POST', url: '/requests', payload: i.record })
        : await app.inject({ method: 'POST', url: '/progress', payload: i.event });
    expect(r.statusCode, r.body).toBe(202);
    verdicts.push(...r.json().verdicts);
  }
  return verdicts.filter((x) => x.detector === 'session-hygiene');
}

/** One turn per value, `gap` apart: a resume prompt, five router-reported calls averaging `perCall`. */
const turns = (sid: string, perCall: readonly number[], gap = 8 * HOUR) =>
  perCall.map((x, i) => turn(sid, MODEL, { perCall: x, calls: 5, resume: i > 0, at: T0 + i * gap }, 'router'));

const hygieneAlerts = (b: Behaviour, sid: string) =>
  b.sent.filter((a) => a.dedup_key === `session-hygiene:${sid}`).map((a) => [a.state, a.severity]);

describe('thread B replayed through POST /progress and POST /requests', () => {
  it('warns at the 164k turn and retires at the 206k turn, through the notifier', async () => {
    const { v, app, rec } = await service();
    const sid = 'ses_threadB';
    const perTurn: string[][] = [];
    for (const t of turns(sid, CURVE.slice(0, 7))) {
      perTurn.push((await send(app, t)).map((x) => `${x.from}->${x.to}`));
    }
    // turn index: 0=143k 1=164k 2=175k 3=180k 4=185k 5=206k 6=230k
    expect(perTurn).toEqual([[], ['ok->stalling'], [], [], [], ['stalling->looping'], []]);
    await eventually(() => hygieneAlerts(rec, sid).length === 2);
    expect(hygieneAlerts(rec, sid)).toEqual([
      ['trigger', 'warning'],
      ['escalate', 'critical'],
    ]);
    const [warn, retire] = rec.sent.filter((a) => a.dedup_key === `session-hygiene:${sid}`);
    expect(warn.title).toBe(`hygiene warning: watch_number (${sid})`);
    expect(warn.summary).toContain('watch number 164k prompt tokens per call');
    expect(retire.summary).toContain('206k');
    expect(retire.source).toBe('session-hygiene');
    // the report carries the trend, and the retire carries the fresh-session brief
    expect(retire.details).toContain('143k -> 164k -> 175k -> 180k -> 185k -> 206k');
    expect(retire.details).toContain('Brief for the fresh session:');
    expect(retire.details).toContain('There is no continuity');
    expect(retire.details).toMatch(/^[\x20-\x7e\n]+$/);

    // the readout: watch number now, its trend as a series, the level
    const row = (await app.inject({ method: 'GET', url: '/sessions' })).json().find((r: any) => r.session === sid);
    expect(row).toMatchObject({ verdict: 'looping', hygiene_level: 'critical', hygiene_rule: 'watch_number' });
    expect(row.watch_number).toBe(230_000);
    expect(row.series.watch_number).toEqual(CURVE.slice(0, 7));
    expect(row.detectors['session-hygiene']).toMatchObject({ level: 'looping', source: 'session-hygiene' });
    // retire in warn mode: the plugin gets the brief (a `fresh` directive), no abort
    const ds = (await app.inject({ method: 'GET', url: `/directives?session=${sid}` })).json().directives;
    const fresh = ds.filter((d: any) => d.type === 'fresh');
    expect(fresh).toHaveLength(1);
    expect(fresh[0]).toMatchObject({ session_id: sid, open_session: false });
    expect(fresh[0].report).toContain(`What died: session ${sid}.`);
    expect(ds.some((d: any) => d.type === 'abort')).toBe(false);
    // the incident is one per conversation
    expect(await v.store.get(keys.incident(`session-hygiene:${sid}`))).toMatchObject({ open: true, seq: 2 });
  });

  it('a healthy 40k-per-call session raises nothing', async () => {
    const { v, app } = await service();
    const sid = 'ses_healthy';
    const got = [];
    for (const t of turns(
      sid,
      CURVE.map(() => 40_000),
    ))
      got.push(...(await send(app, t)));
    expect(got).toEqual([]);
    expect(await v.store.get(keys.incident(`session-hygiene:${sid}`))).toBeUndefined();
    const row = (await app.inject({ method: 'GET', url: '/sessions' })).json().find((r: any) => r.session === sid);
    expect(row).toMatchObject({ verdict: 'ok', hygiene_level: 'ok', watch_number: 40_000 });
    expect(row.series.watch_number).toHaveLength(8);
  });

  it('info tells stay in the readout unless info_alerts is on', async () => {
    // four resumes within a day (five turns an hour apart): the resume-count tell (info)
    for (const info_alerts of [false, true]) {
      const { app, rec, v } = await service({ hygiene: { info_alerts } });
      const sid = `ses_resumes_${info_alerts}`;
      const got = [];
      for (const t of turns(sid, [40_000, 40_000, 40_000, 40_000, 40_000], HOUR)) got.push(...(await send(app, t)));
      const row = (await app.inject({ method: 'GET', url: '/sessions' })).json().find((r: any) => r.session === sid);
      expect(row.hygiene_level).toBe('info');
      expect(row.hygiene_rule).toBe('resume_count');
      if (!info_alerts) {
        expect(got).toEqual([]);
        expect(row.verdict).toBe('ok');
        expect(await v.store.get(keys.incident(`session-hygiene:${sid}`))).toBeUndefined();
      } else {
        expect(got.map((x) => `${x.from}->${x.to}`)).toEqual(['ok->stalling']);
        await eventually(() => hygieneAlerts(rec, sid).length === 1);
        expect(hygieneAlerts(rec, sid)).toEqual([['trigger', 'info']]);
      }
    }
  });
});

/** A session with a few healthy calls, then one completed call that produced nothing visible. */
function emptyGeneration(sid: string, at: number): HygieneInputList {
  return [
    P({ kind: 'prompt', session_id: sid, ts: at, call_id: `msg_${sid}`, resume: false }),
    call(sid, MODEL, 60_000, at + 10 * SEC, 'router', { finish: 'tool' }),
    call(sid, MODEL, 62_000, at + 20 * SEC, 'router', { visible: false, finish: 'stop' }),
  ];
}
const gate = (app: App, conversation: string) =>
  app.inject({ method: 'POST', url: '/gate', payload: { conversation, model: MODEL } }).then((r) => r.json());

describe('the empty-generation fire alarm', () => {
  it('raises exactly one critical alert; in an acting mode the gate refuses its retries while a sibling passes', async () => {
    const { v, app, rec } = await service({ mode: 'auto_recover' });
    const at = Date.now();
    const got = await send(app, emptyGeneration('ses_empty', at));
    expect(got.map((x) => `${x.from}->${x.to}`)).toEqual(['ok->looping']);
    // retries of the same prefix come back empty too: no second alert
    for (let r = 1; r <= 3; r++) {
      const retry = call('ses_empty', MODEL, 62_000, at + (20 + r * 5) * SEC, 'router', {
        visible: false,
        finish: 'stop',
      });
      expect(await send(app, [retry])).toEqual([]);
    }
    await eventually(() => hygieneAlerts(rec, 'ses_empty').length === 1);
    expect(hygieneAlerts(rec, 'ses_empty')).toEqual([['trigger', 'critical']]);
    expect(await v.store.get(keys.incident('session-hygiene:ses_empty'))).toMatchObject({ seq: 1 });

    const refused = await gate(app, 'ses_empty');
    expect(refused).toMatchObject({ action: 'refuse', status: 429 });
    expect(refused.reason).toMatch(/empty generation.*re-ask in a fresh session/);
    expect(refused.retry_after_s).toBeGreaterThan(0);
    expect(await gate(app, 'ses_sibling')).toMatchObject({ action: 'allow' });
    // the plugin is told to abort the dispatch; act: false, so the mode itself does nothing
    const ds = (await app.inject({ method: 'GET', url: '/directives?session=ses_empty' })).json().directives;
    expect(ds.filter((d: any) => d.type === 'abort').map((d: any) => d.session_id)).toEqual(['ses_empty']);
    expect((await v.engine.treeState('ses_empty'))?.stage).toBe(0);

    // the user re-asks in the same conversation: a new turn, the refusal ends
    await send(app, [
      P({ kind: 'prompt', session_id: 'ses_empty', ts: at + 5 * MIN, call_id: 'msg_again', resume: true }),
    ]);
    expect(await gate(app, 'ses_empty')).toMatchObject({ action: 'allow' });
  });

  it('in warn mode it only alerts: the gate lets the retries through, no abort', async () => {
    const { app, rec } = await service({ mode: 'warn' });
    await send(app, emptyGeneration('ses_warn', Date.now()));
    await eventually(() => hygieneAlerts(rec, 'ses_warn').length === 1);
    expect(await gate(app, 'ses_warn')).toMatchObject({ action: 'allow' });
    const ds = (await app.inject({ method: 'GET', url: '/directives?session=ses_warn' })).json().directives;
    expect(ds.some((d: any) => d.type === 'abort')).toBe(false);
  });

  it('the refusal ends after empty_refusal', async () => {
    const { app } = await service({ mode: 'auto_compact', hygiene: { empty_refusal: '1s' } });
    await send(app, emptyGeneration('ses_old', Date.now() - MIN));
    expect(await gate(app, 'ses_old')).toMatchObject({ action: 'allow' });
  });
});

describe('the restore stall, on the engine tick', () => {
  it('is detected at the first tick at or after first_token_timeout, aborted and briefed in an acting mode', async () => {
    const { v, app, rec } = await service({ mode: 'auto_recover', hygiene: { first_token_timeout: '20s' } });
    const sid = 'ses_stall';
    const t = Date.now();
    const stats = (at: number, updated_at: number) =>
      P({
        kind: 'session_stats',
        session_id: sid,
        ts: at,
        messages: 900,
        stored_bytes: 4_300_000,
        updated_at,
        live: true,
      });
    await send(app, [
      ...turn(sid, MODEL, { perCall: 60_000, calls: 3, resume: false, at: t - HOUR }, 'opencode'),
      P({ kind: 'prompt', session_id: sid, ts: t, call_id: 'msg_resume', resume: true }),
      stats(t + 5 * SEC, t - HOUR + MIN),
      stats(t + 15 * SEC, t - HOUR + MIN),
    ]);
    expect(await v.engine.tick(t + 19_999)).toEqual([]);
    const fired = await v.engine.tick(t + 20_000);
    expect(fired.map((x) => [x.detector, x.to, x.rule])).toEqual([['session-hygiene', 'looping', 'restore_stall']]);
    expect(await v.engine.tick(t + 21_000)).toEqual([]);
    await eventually(() => hygieneAlerts(rec, sid).length === 1);
    expect(hygieneAlerts(rec, sid)).toEqual([['trigger', 'critical']]);
    const ds = (await app.inject({ method: 'GET', url: `/directives?session=${sid}` })).json().directives;
    // the mode's own toast of the new verdict, then ours (abort the resume, the brief)
    expect(ds.map((d: any) => d.type)).toEqual(['toast', 'abort', 'fresh']);
    expect(ds[2].report).toContain('FRESH SESSION');
  });

  it('a resumed session whose model answers raises nothing', async () => {
    const { v, app } = await service({ mode: 'auto_recover', hygiene: { first_token_timeout: '20s' } });
    const sid = 'ses_answers';
    const t = Date.now();
    await send(app, [
      P({ kind: 'prompt', session_id: sid, ts: t, call_id: 'msg_r', resume: true }),
      P({
        kind: 'session_stats',
        session_id: sid,
        ts: t + SEC,
        messages: 10,
        stored_bytes: 10_000,
        updated_at: t - MIN,
        live: true,
      }),
      call(sid, MODEL, 30_000, t + 3 * SEC, 'opencode', { finish: 'stop' }),
    ]);
    expect(await v.engine.tick(t + 60_000)).toEqual([]);
  });
});

describe('readouts and routes', () => {
  it('GET /envelopes: the effective envelope per model beside its nominal window', async () => {
    const { app } = await service({ hygiene: { nominal_context: { [MODEL]: 1_048_576, 'other/model': 200_000 } } });
    await send(app, turns('ses_env', [100_000, 120_000]).flat());
    const r = await app.inject({ method: 'GET', url: '/envelopes' });
    expect(r.statusCode).toBe(200);
    const rows = r.json().envelopes;
    expect(rows.map((x: any) => x.model)).toEqual(['other/model', MODEL]);
    expect(rows[1]).toMatchObject({ effective: 124_000, nominal: 1_048_576, clean_calls: 10, failures: 0 });
    expect(rows[0]).toMatchObject({ effective: 0, nominal: 200_000, clean_calls: 0 });
    const doc = (await app.inject({ method: 'GET', url: '/openapi.json' })).json();
    expect(Object.keys(doc.paths)).toContain('/envelopes');
  });

  it('panels, health and the report', async () => {
    const { app } = await service();
    await send(app, turns('ses_p', [160_000]).flat());
    const panels = (await app.inject({ method: 'GET', url: '/panels' })).json();
    const mine = (Array.isArray(panels) ? panels : panels.panels).filter((p: any) => p.detector === 'session-hygiene');
    expect(mine.map((p: any) => p.title)).toEqual([
      expect.stringMatching(/^Session hygiene: watch number per session/),
      'Session hygiene: effective envelope per model',
    ]);
    expect(mine[0].rows[0]).toMatchObject({ session: 'ses_p', level: 'warning', watch_number: 160_000 });
    expect(mine[1].rows[0]).toMatchObject({ model: MODEL, effective: 164_000 });
    const health = (await app.inject({ method: 'GET', url: '/health' })).json();
    expect(health.detectors['session-hygiene']).toMatchObject({ enabled: true, sessions: 1, warning_sessions: 1 });
    const report = (await app.inject({ method: 'GET', url: '/sessions/ses_p/report' })).body;
    expect(report).toContain('Session hygiene of ses_p: warning (watch_number, action finish_question)');
  });

  it('enabled: false switches it off (no state, no verdicts); its route stays', async () => {
    const { v, app } = await service({ hygiene: { enabled: false } });
    expect(await send(app, turns('ses_off', [250_000]).flat())).toEqual([]);
    expect(await v.detector<SessionHygieneDetector>('session-hygiene').sessions()).toEqual([]);
    expect((await app.inject({ method: 'GET', url: '/envelopes' })).statusCode).toBe(200);
  });
});
