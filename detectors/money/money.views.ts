import type { Clock } from '../../core/clock.ts';
import type { Panel } from '../../core/contracts.ts';
import type { Store } from '../../core/store/store.ts';
import { anyBudget, type BudgetLevel, standing } from './budget.ts';
import { dayOf, dayStart, lastDays, nextDayAt } from './day.ts';
import { F, mKeys, type OpenMap } from './keys.ts';
import { decodeSpend, type LedgerSummary, type Stretch, stretchOf, summarize, unpack } from './ledger.ts';
import type { MoneyOptions } from './options.ts';

// What the ledger shows: GET /ledger (and `vigil report`, the ledger replay), the days'
// counters per model (GET /ledger/days, the admin chart), today's budgets, the admin
// panels. Reads only.

const DAY = 86_400_000;
/** The longest window a ledger read covers (its days are read one by one). */
const MAX_DAYS = 400;
const round6 = (x: number) => Math.round(x * 1e6) / 1e6;

/** What GET /ledger answers (and `vigil report`, and the ledger replay, print). */
export interface LedgerView {
  since: number;
  until: number;
  summary: LedgerSummary;
  /** All spend on the days the window touches, and its part in flagged stretches (day counters). */
  spend: {
    first_day: string;
    last_day: string;
    usd: number;
    tokens: number;
    calls: number;
    loop_usd: number;
    loop_tokens: number;
  };
  stretches: Stretch[];
}

/** One day's counters, per model (GET /ledger/days, the admin chart). */
export interface DayView {
  day: string;
  start: number;
  usd: number;
  tokens: number;
  calls: number;
  loop_usd: number;
  loop_tokens: number;
  loop_calls: number;
  models: Record<string, { usd: number; tokens: number; calls: number; loop_usd: number; loop_tokens: number }>;
}

export class MoneyViews {
  constructor(private readonly d: { store: Store; clock: Clock; knobs: () => MoneyOptions }) {}

  private get store(): Store {
    return this.d.store;
  }

  private async spendOf(id: string) {
    return decodeSpend(await this.store.get<unknown>(mKeys.session(id)));
  }

  /** The stretches flagged since `since` (closed and open, oldest first), their summary and the days' spend. */
  async ledger(since: number, limit = 1_000): Promise<LedgerView> {
    const k = this.d.knobs();
    const now = this.d.clock.now();
    // Days are read one by one: at most MAX_DAYS of them.
    const from = Math.max(since, now - k.retention, now - MAX_DAYS * DAY);
    const days = daysBetween(from, now, k.timezone);
    const closed: Stretch[] = [];
    for (const d of days) {
      for (const p of await this.store.list<unknown>(mKeys.stretches(d), k.max_stretches_per_day)) {
        const x = unpack(p);
        if (x && x.flagged_at >= from) closed.push(x);
      }
    }
    const open: Stretch[] = [];
    for (const [id] of await openStretches(this.store)) {
      const st = await this.spendOf(id);
      const x = st && stretchOf(id, st, 'open', null);
      if (x && x.flagged_at >= from) open.push(x);
    }
    const all = [...closed, ...open].sort((a, b) => a.flagged_at - b.flagged_at || a.session.localeCompare(b.session));
    const spend = {
      first_day: days[0],
      last_day: days[days.length - 1],
      usd: 0,
      tokens: 0,
      calls: 0,
      loop_usd: 0,
      loop_tokens: 0,
    };
    for (const d of days) {
      const c = await this.store.counts(mKeys.day(d), [F.usd, F.tokens, F.calls, F.loopUsd, F.loopTokens]);
      spend.usd += c[F.usd];
      spend.tokens += c[F.tokens];
      spend.calls += c[F.calls];
      spend.loop_usd += c[F.loopUsd];
      spend.loop_tokens += c[F.loopTokens];
    }
    spend.usd = round6(spend.usd);
    spend.loop_usd = round6(spend.loop_usd);
    return { since: from, until: now, summary: summarize(all), spend, stretches: all.slice(-limit) };
  }

  /** The last `n` days' counters, oldest first. */
  async days(n: number): Promise<DayView[]> {
    const k = this.d.knobs();
    const out: DayView[] = [];
    for (const day of lastDays(this.d.clock.now(), n, k.timezone)) {
      const c = await this.store.counts(mKeys.day(day));
      const models: DayView['models'] = {};
      for (const [f, v] of Object.entries(c)) {
        if (!f.startsWith('m|')) continue;
        const cut = f.lastIndexOf('|');
        const name = f.slice(2, cut);
        models[name] ??= { usd: 0, tokens: 0, calls: 0, loop_usd: 0, loop_tokens: 0 };
        const m = models[name];
        const what = f.slice(cut + 1);
        if (what === F.usd) m.usd = round6(v);
        else if (what === F.tokens) m.tokens = v;
        else if (what === F.calls) m.calls = v;
        else if (what === F.loopUsd) m.loop_usd = round6(v);
        else if (what === F.loopTokens) m.loop_tokens = v;
      }
      out.push({
        day,
        start: dayStart(day, k.timezone),
        usd: round6(c[F.usd] ?? 0),
        tokens: c[F.tokens] ?? 0,
        calls: c[F.calls] ?? 0,
        loop_usd: round6(c[F.loopUsd] ?? 0),
        loop_tokens: c[F.loopTokens] ?? 0,
        loop_calls: c[F.loopCalls] ?? 0,
        models,
      });
    }
    return out;
  }

  /** Today's budgets: the ceilings, all spend and each agent's, and the incidents raised. */
  async budgets(): Promise<Record<string, unknown>> {
    const k = this.d.knobs();
    const now = this.d.clock.now();
    const day = dayOf(now, k.timezone);
    const c = await this.store.counts(mKeys.day(day));
    const agents: Record<string, { usd: number; prompt_tokens: number; level: BudgetLevel }> = {};
    for (const [f, v] of Object.entries(c)) {
      if (!f.startsWith('a|')) continue;
      const cut = f.lastIndexOf('|');
      const name = f.slice(2, cut);
      agents[name] ??= { usd: 0, prompt_tokens: 0, level: 'ok' };
      const a = agents[name];
      if (f.slice(cut + 1) === F.usd) a.usd = round6(v);
      else a.prompt_tokens = v;
    }
    for (const a of Object.values(agents))
      a.level = standing({ usd: a.usd, tokens: a.prompt_tokens }, k.budgets.agent, k.budgets.warn_at).level;
    const total = { usd: round6(c[F.usd] ?? 0), prompt_tokens: c[F.tokens] ?? 0 };
    return {
      day,
      next_day_at: new Date(nextDayAt(now, k.timezone)).toISOString(),
      ceilings: k.budgets,
      total: {
        ...total,
        level: standing({ usd: total.usd, tokens: total.prompt_tokens }, k.budgets.total, k.budgets.warn_at).level,
      },
      agents,
      raised: (await this.store.get<Record<string, BudgetLevel>>(mKeys.raised(day))) ?? {},
    };
  }

  /** The admin page: spend per day and model (a chart), open stretches, today's budgets. */
  async panels(): Promise<Panel[]> {
    const k = this.d.knobs();
    const days = await this.days(14);
    const models = [...new Set(days.flatMap((d) => Object.keys(d.models)))].sort();
    const spend: Panel = {
      title: `Spend per day and model, in flagged stretches and in total (last ${days.length} days)`,
      columns: [
        { key: 'day', label: 'day' },
        { key: 'model', label: 'model' },
        { key: 'usd', label: '$ total' },
        { key: 'loop_usd', label: '$ in loops' },
        { key: 'share', label: 'share in loops' },
        { key: 'calls', label: 'calls' },
        { key: 'tokens', label: 'prompt tokens' },
      ],
      rows: days.flatMap((d) =>
        Object.entries(d.models).map(([model, m]) => ({
          day: d.day,
          model,
          usd: m.usd,
          loop_usd: m.loop_usd,
          share: m.usd > 0 ? `${Math.round((m.loop_usd / m.usd) * 100)}%` : null,
          calls: m.calls,
          tokens: m.tokens,
        })),
      ),
      chart: {
        x: days.map((d) => d.start),
        unit: 'usd',
        series: models.flatMap((m) => [
          { label: `${m}: total`, group: m, values: days.map((d) => d.models[m]?.usd ?? 0) },
          { label: `${m}: in loops`, group: m, dashed: true, values: days.map((d) => d.models[m]?.loop_usd ?? 0) },
        ]),
      },
    };
    const view = await this.ledger(0, 50);
    const open: Panel = {
      title: 'Open flagged stretches (spend so far)',
      columns: [
        { key: 'session', label: 'session' },
        { key: 'agent', label: 'agent' },
        { key: 'model', label: 'model' },
        { key: 'level', label: 'level' },
        { key: 'calls', label: 'calls' },
        { key: 'usd', label: '$' },
        { key: 'calls_to_flag', label: 'calls to flag' },
        { key: 'flagged_at', label: 'flagged' },
      ],
      rows: view.stretches
        .filter((x) => x.outcome === 'open')
        .map((x) => ({
          session: x.session,
          agent: x.agent,
          model: x.model,
          level: x.level,
          calls: x.calls,
          usd: x.usd,
          calls_to_flag: x.to_flag.calls,
          flagged_at: new Date(x.flagged_at).toISOString(),
        })),
    };
    const out = [spend, open];
    if (anyBudget(k.budgets)) {
      const b = await this.budgets();
      const rows = [
        { scope: 'all spend', ...(b.total as object) },
        ...Object.entries(b.agents as Record<string, object>).map(([a, v]) => ({ scope: `agent ${a}`, ...v })),
      ];
      out.push({
        title: `Budgets on ${b.day} (ceilings: tree ${ceilingText(k.budgets.tree)}, agent ${ceilingText(k.budgets.agent)}, all ${ceilingText(k.budgets.total)})`,
        columns: [
          { key: 'scope', label: 'scope' },
          { key: 'usd', label: '$ today' },
          { key: 'prompt_tokens', label: 'prompt tokens today' },
          { key: 'level', label: 'level' },
        ],
        rows,
      });
    }
    return out;
  }
}

/** Every tree's open stretches, from the o:<root> keys (a scan of the keys under o:). */
export async function openStretches(store: Store): Promise<[id: string, e: OpenMap[string]][]> {
  const ks = new Set(await store.keys(mKeys.openPrefix));
  const out = new Map<string, OpenMap[string]>();
  for (const key of ks) for (const [id, e] of Object.entries((await store.get<OpenMap>(key)) ?? {})) out.set(id, e);
  return [...out];
}

function ceilingText(c: MoneyOptions['budgets']['tree']): string {
  const parts = [c.usd !== null ? `$${c.usd}` : '', c.prompt_tokens !== null ? `${c.prompt_tokens} tok` : ''];
  return parts.filter(Boolean).join(' + ') || 'none';
}

/** Day keys from the day of `from` to the day of `to`, in order. */
function daysBetween(from: number, to: number, tz: string): string[] {
  const out: string[] = [];
  let at = from;
  while (at <= to && out.length <= MAX_DAYS) {
    out.push(dayOf(at, tz));
    at = nextDayAt(at, tz);
  }
  return out;
}
