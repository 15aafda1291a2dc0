// Judge, converter and replay throughput, and memory per tracked session, each beside a
// baseline measured in the same run on the same data.
//   node --expose-gc bin/run-ts.mjs bench/judge.ts [--quick]
// Goals: judge updates/s >= 0.4x one-shot sha256 over the same strings through the
// Tracker, >= 0.6x for the pure onProgress step; converter >= 0.6x bare
// JSON.stringify + sha256 of the same args; <= 4 KB per session at 10k and 100k
// sessions with full 60-event windows of distinct fingerprints. The session-hygiene
// judge's updates/s are printed beside the no-progress judge's on the same inputs.
import 'reflect-metadata';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ProgressEvent, RequestRecord, ToolEvent } from '../core/wire.ts';
import { onRequest as npOnRequest, onProgress, SessionState, Tracker } from '../detectors/no-progress/judge.ts';
import { defaultKnobs } from '../detectors/no-progress/knobs.ts';
import { runReplay } from '../detectors/no-progress/replay/replay.ts';
import {
  envelopeOf,
  type HygieneState,
  onEvent as hyOnEvent,
  onRequest as hyOnRequest,
  learnAssistant,
  learnRequest,
  newEnvelopeBook,
  newHygieneState,
} from '../detectors/session-hygiene/judge.ts';
import { defaultHygieneOptions } from '../detectors/session-hygiene/options.ts';
import { normalizeCall, sha256Hex } from '../sensors/shared/normalize.ts';
import { generateCalibration, rng, toJsonl } from '../test/fixtures/calibration.ts';

const quick = process.argv.includes('--quick');
const gc = (globalThis as { gc?: () => void }).gc;
const knobs = defaultKnobs();

/** Best of `rounds` timed runs of fn (which does `n` operations): operations per second. */
function rate(n: number, fn: () => void, rounds = 5): number {
  return rates(n, [fn], rounds)[0];
}

/**
 * Best of `rounds` runs of each fn, their rounds interleaved, so a measurement and its
 * baseline see the same machine load (the bench machine is shared).
 */
function rates(n: number, fns: (() => void)[], rounds = 7): number[] {
  const best = fns.map(() => Number.POSITIVE_INFINITY);
  for (let r = 0; r < rounds; r++) {
    fns.forEach((fn, i) => {
      const t0 = process.hrtime.bigint();
      fn();
      const dt = Number(process.hrtime.bigint() - t0) / 1e9;
      if (dt < best[i]) best[i] = dt;
    });
  }
  return best.map((b) => n / b);
}

const fmt = (x: number) =>
  x >= 1e6 ? `${(x / 1e6).toFixed(2)}M` : x >= 1e3 ? `${(x / 1e3).toFixed(0)}k` : x.toFixed(0);
const line = (label: string, value: string, base: string, ratio: number, goal: string) =>
  console.log(
    `${label.padEnd(34)} ${value.padStart(12)}   baseline ${base.padStart(12)}   ratio ${ratio.toFixed(2)} (${goal})`,
  );

// --- a realistic call mix: the calibration fixture's calls (args rebuilt from the mix)
const r = rng(7);
const paths = Array.from(
  { length: 400 },
  (_, i) => `/home/op/cockpit/src/${['router', 'cockpit', 'admin'][i % 3]}/module_${i}.ts`,
);
const pick = <T>(xs: readonly T[]) => xs[Math.floor(r() * xs.length)];
function randomCall(): { tool: string; args: Record<string, unknown> } {
  const x = r();
  if (x < 0.45) {
    return r() < 0.5
      ? { tool: 'read', args: { filePath: pick(paths) } }
      : { tool: 'read', args: { filePath: pick(paths), offset: Math.floor(r() * 500), limit: 100 } };
  }
  if (x < 0.6)
    return { tool: 'grep', args: { pattern: `symbol${Math.floor(r() * 900)}`, path: '/home/op/cockpit/src' } };
  if (x < 0.7) return { tool: 'glob', args: { pattern: `**/*${Math.floor(r() * 90)}*.ts` } };
  if (x < 0.8)
    return { tool: 'edit', args: { filePath: pick(paths), oldString: 'const a = 1;', newString: 'const a = 2;' } };
  if (x < 0.95) {
    return {
      tool: 'bash',
      args: {
        command: pick([
          `cat ${pick(paths)}`,
          `npm test -- ${pick(paths)}`,
          `git log --oneline -5 -- ${pick(paths)}`,
          `jq .status .omo/boulder.json`,
          `head -${Math.floor(r() * 90)} ${pick(paths)}`,
          'git status --short',
        ]),
      },
    };
  }
  return {
    tool: 'todowrite',
    args: { todos: [{ id: String(Math.floor(r() * 9)), content: 'verify the thing', status: 'pending' }] },
  };
}

// 1. judge updates/s on pre-fingerprinted events vs one-shot sha256 of the same strings
{
  const N = quick ? 100_000 : 400_000;
  const SESSIONS = 2_000;
  const keys: string[] = [];
  const events: ToolEvent[] = [];
  for (let i = 0; i < N; i++) {
    const c = randomCall();
    const key = `${c.tool}\0${JSON.stringify(c.args)}`;
    keys.push(key);
    const f = normalizeCall(c.tool, c.args, { cwd: '/home/op/cockpit' });
    events.push({
      kind: 'tool',
      session_id: `ses_${i % SESSIONS}`,
      agent: 'sisyphus-junior',
      tool: c.tool,
      call_id: `call_${i}`,
      fingerprint: f.fingerprint,
      target: f.target,
      exit: r() < 0.1 ? 1 : 0,
      landed: r() < 0.02,
      ts: i,
    });
  }
  // The Tracker (session lookup, parent links, change detection) and the pure step.
  // Sessions persist across rounds, as in a long-running service.
  const tracker = new Tracker(knobs);
  const states = Array.from({ length: SESSIONS }, () => new SessionState(knobs.window));
  const [hashRate, judgeRate, pureRate] = rates(N, [
    () => {
      for (let i = 0; i < N; i++) sha256Hex(keys[i]);
    },
    () => {
      for (let i = 0; i < N; i++) tracker.applyProgress(events[i]);
    },
    () => {
      for (let i = 0; i < N; i++) onProgress(states[i % SESSIONS], events[i], knobs);
    },
  ]);
  line('judge updates/s (Tracker)', fmt(judgeRate), `${fmt(hashRate)} sha256/s`, judgeRate / hashRate, 'goal >= 0.4');
  line(
    'judge updates/s (pure onProgress)',
    fmt(pureRate),
    `${fmt(hashRate)} sha256/s`,
    pureRate / hashRate,
    'goal >= 0.6',
  );
}

// 1b. the session-hygiene judge beside the no-progress judge, same inputs, same run: a
// mixed stream as the service would get it with the router and the plugin both on (per
// model step a request record, an assistant event and a tool event; per turn a prompt
// and a session_stats reading; some retries and images), 2,000 sessions interleaved.
// Each judge is offered every input; the no-progress judge skips the kinds it does not
// know, as its dispatch does. Fresh states each round, so every round does the same work.
{
  const N = quick ? 100_000 : 400_000;
  const SESSIONS = 2_000;
  const hk = defaultHygieneOptions();
  type Input = { type: 'progress'; event: ProgressEvent } | { type: 'request'; record: RequestRecord };
  const inputs: Input[] = [];
  const sidx = new Int32Array(N);
  const cursor = Array.from({ length: SESSIONS }, (_, i) => ({
    turn: 0,
    step: -1,
    phase: 0,
    base: 20_000 + (i % 40) * 5_000,
  }));
  const model = (i: number) => `prov/model-${i % 7}`;
  const pool = Array.from({ length: 4_096 }, () => {
    const c = randomCall();
    const f = normalizeCall(c.tool, c.args, { cwd: '/home/op/cockpit' });
    return { tool: c.tool, fingerprint: f.fingerprint, target: f.target };
  });
  for (let i = 0; i < N; i++) {
    const si = i % SESSIONS;
    const c = cursor[si];
    const session_id = `ses_${si}`;
    const ts = 1_796_000_000_000 + i * 50;
    sidx[i] = si;
    if (c.step < 0) {
      inputs.push({
        type: 'progress',
        event: { kind: 'prompt', session_id, ts, resume: c.turn > 0, call_id: `msg_${si}_${c.turn}_u` },
      });
      c.step = 0;
      continue;
    }
    const tokens = c.base + c.turn * 4_000 + c.step * 3_000;
    const last = c.step === 7;
    if (c.phase === 0) {
      inputs.push({
        type: 'request',
        record: {
          session_id,
          request_id: `req_${si}_${c.turn}_${c.step}`,
          model: model(si),
          prompt_tokens: tokens,
          cached_tokens: Math.round(tokens * 0.8),
          completion_tokens: 300,
          visible_output: r() > 0.002,
          finish_reason: last ? 'stop' : 'tool_calls',
          status: 200,
          ts,
        },
      });
    } else if (c.phase === 1) {
      inputs.push({
        type: 'progress',
        event: {
          kind: 'assistant',
          session_id,
          call_id: `msg_${si}_${c.turn}_${c.step}`,
          model: model(si),
          input_tokens: Math.round(tokens * 0.2),
          output_tokens: 300,
          reasoning_tokens: 0,
          cache_read_tokens: tokens - Math.round(tokens * 0.2),
          cache_write_tokens: 0,
          finish: last ? 'stop' : 'tool-calls',
          visible_output: true,
          ts,
        },
      });
    } else if (c.phase === 2) {
      const x = r();
      inputs.push({
        type: 'progress',
        event:
          x < 0.02
            ? { kind: 'retry', session_id, attempt: 1 + Math.floor(r() * 3), ts }
            : x < 0.03
              ? { kind: 'image', session_id, call_id: `prt_${i}`, bytes: 150_000, ts }
              : {
                  kind: 'tool',
                  session_id,
                  agent: 'sisyphus-junior',
                  ...pool[i % pool.length],
                  call_id: `call_${i}`,
                  exit: r() < 0.1 ? 1 : 0,
                  landed: r() < 0.02,
                  ts,
                },
      });
    } else {
      inputs.push({
        type: 'progress',
        event: {
          kind: 'session_stats',
          session_id,
          messages: c.turn * 30,
          stored_bytes: c.turn * 200_000,
          live: true,
          ts,
        },
      });
    }
    // phases: record, assistant, tool (or retry/image); a stats reading after the turn's last step
    c.phase = c.phase + 1;
    if (c.phase === 3 && !last) {
      c.phase = 0;
      c.step++;
    } else if (c.phase === 4) {
      c.phase = 0;
      c.step = -1;
      c.turn++;
    }
  }
  const known = (e: ProgressEvent) => e.kind === 'tool' || e.kind === 'continuation' || e.kind === 'compaction_done';
  let hyChanges = 0;
  const [npRate, hyRate] = rates(N, [
    () => {
      const st = Array.from({ length: SESSIONS }, () => new SessionState(knobs.window));
      for (let i = 0; i < N; i++) {
        const x = inputs[i];
        if (x.type === 'request') npOnRequest(st[sidx[i]], x.record, knobs);
        else if (known(x.event)) onProgress(st[sidx[i]], x.event, knobs);
      }
    },
    () => {
      const st: HygieneState[] = Array.from({ length: SESSIONS }, (_, i) => newHygieneState(`ses_${i}`));
      const book = newEnvelopeBook();
      hyChanges = 0;
      for (let i = 0; i < N; i++) {
        const x = inputs[i];
        if (x.type === 'request') {
          hyChanges += hyOnRequest(st[sidx[i]], x.record, hk, envelopeOf(book, x.record.model)).length;
          learnRequest(book, x.record, hk);
        } else if (x.event.kind === 'assistant' && x.event.model !== undefined) {
          hyChanges += hyOnEvent(st[sidx[i]], x.event, hk, envelopeOf(book, x.event.model)).length;
          learnAssistant(book, x.event, hk);
        } else hyChanges += hyOnEvent(st[sidx[i]], x.event, hk).length;
      }
    },
  ]);
  line('no-progress updates/s (mixed)', fmt(npRate), '(same inputs)', 1, `${fmt(N)} inputs`);
  line(
    'hygiene updates/s (mixed)',
    fmt(hyRate),
    `${fmt(npRate)} no-progress/s`,
    hyRate / npRate,
    `${hyChanges} changes`,
  );
}

// 2. converter events/s (normalise + fingerprint) vs bare JSON.stringify + sha256
{
  const N = quick ? 50_000 : 200_000;
  const calls = Array.from({ length: N }, randomCall);
  const [bare, conv] = rates(N, [
    () => {
      for (let i = 0; i < N; i++) sha256Hex(calls[i].tool + JSON.stringify(calls[i].args));
    },
    () => {
      for (let i = 0; i < N; i++) normalizeCall(calls[i].tool, calls[i].args, { cwd: '/home/op/cockpit' });
    },
  ]);
  line('converter events/s', fmt(conv), `${fmt(bare)} stringify+sha/s`, conv / bare, 'goal >= 0.6');
}

// 3. replay events/s end to end (JSONL file -> parse -> validate -> judge -> result)
{
  const cal = generateCalibration();
  const copies = quick ? 4 : 20;
  let jsonl = '';
  for (let c = 0; c < copies; c++) jsonl += toJsonl(cal.inputs).replaceAll('"ses_cal_', `"ses_c${c}_`);
  const dir = mkdtempSync(join(tmpdir(), 'vigil-bench-'));
  const file = join(dir, 'calibration.jsonl');
  writeFileSync(file, jsonl);
  const n = cal.inputs.length * copies;
  const t0 = process.hrtime.bigint();
  const res = await runReplay(file);
  const dt = Number(process.hrtime.bigint() - t0) / 1e9;
  const parseRate = rate(
    n,
    () => {
      for (const l of jsonl.split('\n')) if (l) JSON.parse(l);
    },
    3,
  );
  rmSync(dir, { recursive: true, force: true });
  line(
    `replay inputs/s (${fmt(n)} lines)`,
    fmt(n / dt),
    `${fmt(parseRate)} JSON.parse/s`,
    n / dt / parseRate,
    `${res.sessions.length} sessions`,
  );
}

// 4. heap per tracked session, full windows of distinct fingerprints
function used(): number {
  gc?.();
  gc?.();
  const m = process.memoryUsage();
  return m.heapUsed + m.arrayBuffers;
}

function fill(n: number): { tracker: Tracker; perSession: number } {
  const before = used();
  const tracker = new Tracker({ ...knobs, max_sessions: Math.max(knobs.max_sessions, n) });
  for (let s = 0; s < n; s++) {
    const sid = `ses_${s.toString(36).padStart(8, '0')}_${'x'.repeat(16)}`;
    for (let i = 0; i < knobs.window; i++) {
      // fresh strings per event, as JSON.parse gives them
      const ev = JSON.parse(
        `{"kind":"tool","session_id":"${sid}","agent":"sisyphus-junior","tool":"read","call_id":"call_${i}","fingerprint":"${sha256Hex(`${s}:${i}`)}","target":"src/module_${s}_${i}.ts","exit":0,"landed":false,"ts":${i}}`,
      ) as ProgressEvent;
      tracker.applyProgress(ev);
    }
  }
  return { tracker, perSession: (used() - before) / n };
}

function naive(n: number): { keep: unknown; perSession: number } {
  // the naive layout: per session a Map of hex fingerprints to counts and a ring of strings
  const before = used();
  const keep = new Map<string, { counts: Map<string, number>; ring: string[] }>();
  for (let s = 0; s < n; s++) {
    const st = { counts: new Map<string, number>(), ring: [] as string[] };
    for (let i = 0; i < knobs.window; i++) {
      const fp = sha256Hex(`${s}:${i}`);
      st.counts.set(fp, (st.counts.get(fp) ?? 0) + 1);
      st.ring.push(fp);
    }
    keep.set(`ses_${s.toString(36).padStart(8, '0')}_${'x'.repeat(16)}`, st);
  }
  return { keep, perSession: (used() - before) / n };
}

if (!gc) console.log('(run with node --expose-gc for the memory figures)');
for (const n of [10_000, 100_000]) {
  const base = n === 10_000 ? naive(n) : undefined;
  const { tracker, perSession } = fill(n);
  const kb = (x: number) => `${(x / 1024).toFixed(2)} KB`;
  console.log(
    `${`heap per session at ${fmt(n)}`.padEnd(34)} ${kb(perSession).padStart(12)}   baseline ${base ? `${kb(base.perSession)} naive` : '(naive at 10k)'}   (goal <= 4 KB)   sessions ${tracker.size}`,
  );
  void base?.keep;
}
