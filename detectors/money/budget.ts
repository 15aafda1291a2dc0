import type { Transition } from '../../core/contracts.ts';
import type { VerdictLevel } from '../../core/wire.ts';
import { F, TYPE } from './keys.ts';
import type { CeilingOptions, MoneyOptions } from './options.ts';

// Budgets, the pure part: where one day's spend stands against a ceiling. Three scopes,
// each counted per day (money.timezone): a conversation tree, an agent name (every tree
// it works in), everything. At `warn_at` of a ceiling a warning goes out; at the
// ceiling a critical alert, and in an acting mode the gate refuses what the scope
// covers until the next day or, for a tree, a Resume (which counts that tree afresh and
// lets it past the agent and total ceilings for the rest of the day).

export type BudgetLevel = 'ok' | 'warning' | 'over';
export const RANK: Record<BudgetLevel, number> = { ok: 0, warning: 1, over: 2 };

export interface Usage {
  usd: number;
  tokens: number;
}

export interface Standing {
  level: BudgetLevel;
  /** The larger share of its ceilings used (0 with none set). */
  share: number;
  /** Which ceiling that share is of. */
  by: 'usd' | 'prompt_tokens' | null;
  used: number;
  ceiling: number | null;
}

export type Scope = { kind: 'tree'; id: string } | { kind: 'agent'; id: string } | { kind: 'total' };

export const scopeKey = (s: Scope) => (s.kind === 'total' ? 'total' : `${s.kind}:${s.id}`);

export function hasCeiling(c: CeilingOptions): boolean {
  return c.usd !== null || c.prompt_tokens !== null;
}

export function anyBudget(b: MoneyOptions['budgets']): boolean {
  return hasCeiling(b.tree) || hasCeiling(b.agent) || hasCeiling(b.total);
}

export function standing(u: Usage, c: CeilingOptions, warnAt: number): Standing {
  const su = c.usd ? u.usd / c.usd : 0;
  const st = c.prompt_tokens ? u.tokens / c.prompt_tokens : 0;
  const byUsd = c.usd !== null && su >= st;
  const share = Math.max(su, st);
  const level: BudgetLevel = !hasCeiling(c) ? 'ok' : share >= 1 ? 'over' : share >= warnAt ? 'warning' : 'ok';
  if (!hasCeiling(c)) return { level, share: 0, by: null, used: 0, ceiling: null };
  return byUsd
    ? { level, share, by: 'usd', used: u.usd, ceiling: c.usd }
    : { level, share, by: 'prompt_tokens', used: u.tokens, ceiling: c.prompt_tokens };
}

/** The verdict level a budget incident is raised at: warning as stalling, over as looping. */
export const VERDICT_OF: Record<BudgetLevel, VerdictLevel> = { ok: 'ok', warning: 'stalling', over: 'looping' };

export const money = (usd: number) => `$${usd < 10 ? usd.toFixed(2) : usd.toFixed(1)}`;
const tokens = (n: number) =>
  n >= 1_000_000 ? `${(n / 1_000_000).toFixed(1)}M` : n >= 1_000 ? `${Math.round(n / 1_000)}k` : String(n);

/** `$4.10 of $5.00 (82%)` or `410k of 500k prompt tokens (82%)`. */
export function amount(s: Standing): string {
  if (s.by === null || s.ceiling === null) return 'no ceiling';
  const pct = `${Math.floor(s.share * 100)}%`;
  return s.by === 'usd'
    ? `${money(s.used)} of ${money(s.ceiling)} (${pct})`
    : `${tokens(s.used)} of ${tokens(s.ceiling)} prompt tokens (${pct})`;
}

export function scopeLabel(s: Scope): string {
  return s.kind === 'total' ? 'all spend' : s.kind === 'tree' ? `tree ${s.id}` : `agent ${s.id}`;
}

/** One line, ASCII: what the alert and the refusal say. */
export function budgetLine(s: Scope, st: Standing, day: string): string {
  const what = st.level === 'over' ? 'over its ceiling' : 'near its ceiling';
  return `budget: ${scopeLabel(s)} ${what} on ${day}: ${amount(st)}`.slice(0, 300);
}

/** Each budget scope with a ceiling: where it stands, and whether its refusal applies to the tree. */
export function standings(
  root: string,
  agent: string | undefined,
  dt: Record<string, number>,
  tt: Record<string, number>,
  k: MoneyOptions,
): [Scope, Standing, boolean][] {
  const b = k.budgets;
  const n = (r: Record<string, number>, f: string) => r[f] ?? 0;
  // A resumed tree: counted afresh, and past the shared ceilings for the rest of the day.
  const exempt = n(tt, F.exempt) >= 1;
  const out: [Scope, Standing, boolean][] = [];
  if (hasCeiling(b.tree)) {
    const u = { usd: n(tt, F.usd) - n(tt, F.resumedUsd), tokens: n(tt, F.tokens) - n(tt, F.resumedTokens) };
    out.push([{ kind: 'tree', id: root }, standing(u, b.tree, b.warn_at), true]);
  }
  if (agent && hasCeiling(b.agent)) {
    const u = { usd: n(dt, F.agent(agent, F.usd)), tokens: n(dt, F.agent(agent, F.tokens)) };
    out.push([{ kind: 'agent', id: agent }, standing(u, b.agent, b.warn_at), !exempt]);
  }
  if (hasCeiling(b.total)) {
    out.push([
      { kind: 'total' },
      standing({ usd: n(dt, F.usd), tokens: n(dt, F.tokens) }, b.total, b.warn_at),
      !exempt,
    ]);
  }
  return out;
}

export function budgetTransition(
  scope: Scope,
  from: BudgetLevel,
  to: BudgetLevel,
  reason: string,
  day: string,
): Transition {
  const key = scopeKey(scope);
  return {
    detector: TYPE,
    subject: { kind: 'global', id: `budget:${key}` },
    from: VERDICT_OF[from],
    to: VERDICT_OF[to],
    rule: to === 'ok' ? null : 'budget',
    reason,
    source: TYPE,
    ...(to === 'ok' ? {} : { severity: to === 'over' ? 'critical' : 'warning' }),
    dedup_key: `money:budget:${key}`,
    title: `budget ${to === 'over' ? 'ceiling reached' : to === 'warning' ? 'warning' : 'clear'}: ${scopeLabel(scope)}`,
    report: `${reason}\nday: ${day}\nscope: ${scopeLabel(scope)}`,
    act: false,
  };
}

export function scopeOf(key: string): Scope {
  if (key === 'total') return { kind: 'total' };
  const cut = key.indexOf(':');
  return { kind: key.slice(0, cut) as 'tree' | 'agent', id: key.slice(cut + 1) };
}

export function amountShort(s: Standing): string {
  if (s.by === null || s.ceiling === null) return '-';
  const pct = `${Math.floor(s.share * 100)}%`;
  return s.by === 'usd'
    ? `$${s.used.toFixed(2)}/$${s.ceiling.toFixed(2)} ${pct}`
    : `${Math.round(s.used / 1000)}k/${Math.round(s.ceiling / 1000)}k tok ${pct}`;
}
