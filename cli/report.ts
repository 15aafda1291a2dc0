import type { LedgerView, Stretch } from '../detectors/money/index.ts';
import { ago, call, cut, type Remote, table } from './remote.ts';

// `vigil report [--since 24h] [--by model] [--json]`: the ledger of a running service
// (GET /ledger) as a person reads it in the morning: how many loops were caught, what
// they cost before the flag and before the action, how fast they were flagged, which
// are still open; each loop, then the loops grouped.

export const GROUPS = ['session', 'tree', 'agent', 'model', 'day'] as const;
export type Group = (typeof GROUPS)[number];

export interface ReportArgs {
  /** The window, in ms back from the service's now. */
  since: number;
  by: Group;
  json?: boolean;
  /** Loops listed at most (the summary counts all). */
  limit: number;
}

export async function report(r: Remote, a: ReportArgs, out: (s: string) => void): Promise<void> {
  const view = await call<LedgerView>(r, 'GET', `/ledger?since=${a.since}&limit=100000`);
  if (a.json) {
    out(`${JSON.stringify(view)}\n`);
    return;
  }
  out(renderReport(view, a));
}

const usd = (n: number) => `$${n.toFixed(2)}`;
const plural = (n: number, one: string, many = `${one}s`) => `${n} ${n === 1 ? one : many}`;
const day = (ms: number) => new Date(ms).toISOString().slice(0, 10);
/** `2026-09-26 02:34Z`: a reader compares times across days in the morning. */
const stamp = (ms: number) => `${new Date(ms).toISOString().slice(0, 16).replace('T', ' ')}Z`;

/** The morning text: the headline, the loops, the groups. */
export function renderReport(v: LedgerView, a: Pick<ReportArgs, 'by' | 'limit'>): string {
  const s = v.summary;
  let out = `ledger ${stamp(v.since)} to ${stamp(v.until)}\n`;
  out += `${plural(s.loops, 'loop')} caught, ${usd(s.before_action.usd)} spent in them before action (${usd(s.before_flag.usd)} before the flag), median ${s.median_calls_to_flag ?? '-'} calls to flag${s.median_minutes_to_flag === null ? '' : ` (${s.median_minutes_to_flag} min)`}, ${s.open} still open\n`;
  const o = s.by_outcome;
  out += `outcomes: ${o.acted} acted, ${o.budget} stopped by a budget, ${o.recovered} recovered, ${o.ended} ended, ${o.open} open\n`;
  const share = v.spend.usd > 0 ? ` (${Math.round((v.spend.loop_usd / v.spend.usd) * 100)}% in flagged stretches)` : '';
  const days =
    v.spend.first_day === v.spend.last_day ? v.spend.first_day : `${v.spend.first_day} to ${v.spend.last_day}`;
  out += `all spend ${days}: ${usd(v.spend.usd)} in ${v.spend.calls} calls${share}\n`;
  if (!v.stretches.length) return out;
  const shown = v.stretches.slice(-a.limit);
  out += `\n${table(
    [
      'FLAGGED',
      'SESSION',
      'AGENT',
      'MODEL',
      'RULE',
      'LEVEL',
      'CALLS TO FLAG',
      '$ TO FLAG',
      'CALLS',
      '$',
      'MIN',
      'OUTCOME',
    ],
    shown.map((x) => [
      stamp(x.flagged_at),
      cut(x.session, 28),
      cut(x.agent, 16),
      cut(x.model, 28),
      x.rule,
      x.level,
      x.to_flag.calls,
      usd(x.to_flag.usd),
      x.calls,
      usd(x.usd),
      x.minutes,
      x.outcome === 'open' ? `open (last ${ago(x.closed_at ?? x.flagged_at, v.until)})` : x.outcome,
    ]),
  )}`;
  if (shown.length < v.stretches.length) out += `(the latest ${shown.length} of ${v.stretches.length})\n`;
  out += `\nby ${a.by}\n${groupTable(v.stretches, a.by)}`;
  return out;
}

const keyOf: Record<Group, (x: Stretch) => string> = {
  session: (x) => x.session,
  tree: (x) => x.root,
  agent: (x) => x.agent ?? '-',
  model: (x) => x.model ?? 'unknown',
  day: (x) => day(x.flagged_at),
};

function groupTable(xs: readonly Stretch[], by: Group): string {
  const g = new Map<string, Stretch[]>();
  for (const x of xs) g.set(keyOf[by](x), [...(g.get(keyOf[by](x)) ?? []), x]);
  const rows = [...g.entries()]
    .map(([k, list]) => {
      const sum = (f: (x: Stretch) => number) => list.reduce((a, x) => a + f(x), 0);
      return {
        k,
        loops: list.length,
        open: list.filter((x) => x.outcome === 'open').length,
        flag: sum((x) => x.to_flag.usd),
        all: sum((x) => x.usd),
        calls: sum((x) => x.calls),
      };
    })
    .sort((a, b) => b.all - a.all);
  return table(
    [by.toUpperCase(), 'LOOPS', 'OPEN', '$ BEFORE FLAG', '$ BEFORE ACTION', 'CALLS'],
    rows.map((r) => [cut(r.k, 40), r.loops, r.open, usd(r.flag), usd(r.all), r.calls]),
  );
}
