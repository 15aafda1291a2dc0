import { FakeClock } from '../core/clock.ts';
import type { LedgerView, MoneyDetector, Stretch } from '../detectors/money/index.ts';
import type { JudgeInput } from '../detectors/no-progress/judge.ts';
import type { NoProgressKnobs } from '../detectors/no-progress/knobs.ts';
import { createVigil } from '../index.ts';
import { table } from './remote.ts';

// `vigil replay INPUT --ledger`: recorded history through the whole kernel (every
// detector, the mode, the ledger) in process, once per response mode, with a test clock
// at each input's time; then the ledger as the service's GET /ledger would answer it.
// The history is replayed as it happened: in an acting mode the stretch ends at the
// action, so what the recording spent after it is what the action would have stopped.

/** Where a replay sends its inputs: the kernel in process, or a service over HTTP (the tests). */
export interface LedgerSink {
  progress(ev: Extract<JudgeInput, { type: 'progress' }>['event']): Promise<unknown>;
  request(r: Extract<JudgeInput, { type: 'request' }>['record']): Promise<unknown>;
  tick(now: number): Promise<unknown>;
}

/** How often time passes between inputs (detectors that keep time, the mode's timeouts). */
export const REPLAY_TICK_MS = 60_000;

const tsOf = (i: JudgeInput) => (i.type === 'progress' ? i.event.ts : i.type === 'request' ? i.record.ts : 0);

/**
 * Feeds inputs in order with the clock at each input's time, ticking every
 * REPLAY_TICK_MS of that time; at the end the clock moves past `idleClose` so the
 * sessions still flagged end. One schedule for every sink, so they agree.
 */
export async function feedLedger(
  inputs: readonly JudgeInput[],
  clock: FakeClock,
  sink: LedgerSink,
  idleClose: number,
): Promise<void> {
  let next = clock.now() + REPLAY_TICK_MS;
  const tickTo = async (t: number) => {
    while (next <= t) {
      clock.set(Math.max(clock.now(), next));
      await sink.tick(next);
      next += REPLAY_TICK_MS;
    }
  };
  for (const i of inputs) {
    const ts = tsOf(i);
    await tickTo(ts);
    clock.set(Math.max(clock.now(), ts));
    if (i.type === 'progress') await sink.progress(i.event);
    else if (i.type === 'request') await sink.request(i.record);
  }
  await tickTo(clock.now() + idleClose + 2 * REPLAY_TICK_MS);
}

export interface LedgerRun {
  mode: string;
  view: LedgerView;
}

/** Replays `inputs` in one mode and returns the ledger of everything flagged. */
export async function replayLedger(
  inputs: readonly JudgeInput[],
  mode: string,
  o: { knobs?: NoProgressKnobs } = {},
): Promise<LedgerRun> {
  const first = inputs.length ? Math.min(...inputs.slice(0, 1000).map(tsOf)) : Date.now();
  const clock = new FakeClock(first);
  const vigil = await createVigil({
    env: {},
    clock,
    overlay: ledgerOverlay(mode, o.knobs),
  });
  try {
    const money = vigil.detector<MoneyDetector>('money');
    await feedLedger(
      inputs,
      clock,
      {
        progress: (ev) => vigil.engine.progress([ev]),
        request: (r) => vigil.engine.requests([r]),
        tick: (now) => vigil.engine.tick(now),
      },
      vigil.knobs.get<{ idle_close: number }>('money').idle_close,
    );
    return { mode, view: await money.ledger(0, 100_000) };
  } finally {
    await vigil.close();
  }
}

/** The config a ledger replay runs with (the tests start a service with the same). */
export function ledgerOverlay(mode: string, knobs?: NoProgressKnobs): Record<string, unknown> {
  return {
    store: { backend: 'memory' },
    modes: { mode },
    notifications: { channels: [] },
    // The replay ticks on input time itself.
    detection: { tick_interval: 0 },
    ...(knobs ? { progress: knobs } : {}),
  };
}

const usd = (n: number) => `$${n.toFixed(2)}`;

interface PerSession {
  session: string;
  agent: string | null;
  rule: string | null;
  byMode: Map<string, Stretch[]>;
}

/** Per flagged session: the spend to the flag and to the action (or the end) in each mode; then the totals. */
export function renderLedgerReplay(runs: readonly LedgerRun[]): string {
  const per = new Map<string, PerSession>();
  for (const r of runs) {
    for (const x of r.view.stretches) {
      const p = per.get(x.session) ?? { session: x.session, agent: x.agent, rule: x.rule, byMode: new Map() };
      per.set(x.session, p);
      p.byMode.set(r.mode, [...(p.byMode.get(r.mode) ?? []), x]);
    }
  }
  const modes = runs.map((r) => r.mode);
  const head = ['SESSION', 'AGENT', 'RULE'];
  for (const m of modes) head.push(`${m}: CALLS TO FLAG`, '$ TO FLAG', '$ TO ACTION/END', 'OUTCOME');
  const rows = [...per.values()].map((p) => {
    const row: (string | number | null)[] = [p.session, p.agent, p.rule];
    for (const m of modes) {
      const xs = p.byMode.get(m) ?? [];
      if (!xs.length) {
        row.push(null, null, null, 'not flagged');
        continue;
      }
      // The first stretch's flag; every stretch of the session summed to its action or end.
      row.push(
        xs[0].to_flag.calls,
        usd(xs[0].to_flag.usd),
        usd(xs.reduce((a, x) => a + x.usd, 0)),
        xs.map((x) => `${x.outcome}/${x.level}`).join(' + '),
      );
    }
    return row;
  });
  let out = `ledger of the replay: ${per.size} flagged sessions\n\n${table(head, rows)}\n`;
  for (const r of runs) {
    const s = r.view.summary;
    out += `${r.mode}: ${s.loops} stretches, ${usd(s.before_flag.usd)} before the flag, ${usd(s.before_action.usd)} before the action or the end (${s.before_action.calls} calls), median ${s.median_calls_to_flag ?? '-'} calls to flag; of ${usd(r.view.spend.usd)} spent in all\n`;
  }
  if (runs.length > 1) {
    const [a, b] = [runs[0], runs[runs.length - 1]];
    const saved = a.view.summary.before_action.usd - b.view.summary.before_action.usd;
    const pct = a.view.summary.before_action.usd > 0 ? (saved / a.view.summary.before_action.usd) * 100 : 0;
    out += `${b.mode} against ${a.mode}: ${usd(saved)} (${pct.toFixed(0)}%) of the spend in flagged stretches comes after the action\n`;
  }
  return out;
}
