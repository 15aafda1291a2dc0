import type { Counter } from 'prom-client';
import { z } from 'zod';
import type { Clock } from '../../core/clock.ts';
import type {
  Detector,
  GateContext,
  GateVote,
  ModeEvent,
  ModeInfo,
  Panel,
  PluginRoute,
  SessionInfo,
  SessionReadout,
  Transition,
  TreeState,
} from '../../core/contracts.ts';
import { duration } from '../../core/duration.ts';
import type { Logger } from '../../core/logger.ts';
import { Lru } from '../../core/lru.ts';
import type { Metrics } from '../../core/metrics.ts';
import { keys } from '../../core/store/keys.ts';
import type { Store } from '../../core/store/store.ts';
import type { SessionTree } from '../../core/tree.ts';
import { afterCommit, onDiscard } from '../../core/unit.ts';
import type { DirectiveSpec, ProgressEvent, RequestRecord, ToolEvent } from '../../core/wire.ts';
import {
  amountShort,
  anyBudget,
  type BudgetLevel,
  budgetLine,
  budgetTransition,
  hasCeiling,
  RANK,
  type Scope,
  type Standing,
  scopeKey,
  scopeLabel,
  scopeOf,
  standings,
} from './budget.ts';
import { dayOf, dayStart, nextDayAt } from './day.ts';
import { F, M_TTL, mKeys, type OpenMap, TYPE } from './keys.ts';
import {
  addSpend,
  decodeSpend,
  encodeSpend,
  type Flag,
  flag,
  landed,
  newSessionSpend,
  type Outcome,
  pack,
  restart,
  type SessionSpend,
  type SpendInput,
  type Stretch,
  stretchOf,
} from './ledger.ts';
import { moneyMetrics } from './money.metrics.ts';
import { type DayView, type LedgerView, MoneyViews, openStretches } from './money.views.ts';
import type { MoneyOptions } from './options.ts';

export type { DayView, LedgerView };
export { TYPE };

// The service's shell around the ledger and budgets (ledger.ts, budget.ts): the spend of
// every request record and sensor-reported model call is added to its session, its day
// (totals, per model, per agent) and its tree's day; the mode's decisions (onTree) open
// a session's stretch when a detector flags it and close it when a mode acts; the gate
// refuses what a budget ceiling covers, in an acting mode. Every write is a
// compare-and-set or a counter add, so instances agree. docs/money.md has the rules.

const NONE: readonly Transition[] = Object.freeze([]);
const DAY = 86_400_000;
const VERDICT_RANK = { ok: 0, stalling: 1, looping: 2 } as const;

type OpenEntry = OpenMap[string];

export interface MoneyDeps {
  store: Store;
  clock: Clock;
  tree: Pick<SessionTree, 'meta' | 'infoNow' | 'rootOf'>;
  mode: ModeInfo;
  metrics: Metrics;
  logger: Logger;
  knobs: () => MoneyOptions;
  /** Queues actions for the sensor (TOKENS.Directives): the block of a refused tree, its lift. */
  directives: (root: string, specs: DirectiveSpec[]) => Promise<void>;
}

const round6 = (x: number) => Math.round(x * 1e6) / 1e6;

/** The model-call spend a router's record reports. */
export function recordSpend(r: RequestRecord): SpendInput {
  return {
    kind: 'request',
    calls: 1,
    tokens: r.prompt_tokens,
    usd: r.cost_usd ?? 0,
    ts: r.ts,
    model: r.model,
    agent: r.agent,
  };
}

interface ModelFields {
  usd: string;
  tokens: string;
  calls: string;
  metrics: { usd: Counter.Internal; tokens: Counter.Internal; calls: Counter.Internal };
}

export class MoneyDetector implements Detector {
  readonly type = TYPE;
  /** Sessions known to report model calls (their tool calls are not calls) and request records. */
  private readonly reportsCalls = new Lru<string, true>(100_000);
  private readonly reportsRequests = new Lru<string, true>(100_000);
  /** `<day>|<scope>` -> the budget level raised there (at least). */
  private readonly raisedAt = new Lru<string, BudgetLevel>(20_000);
  /** `<day>|<root>`: trees this process knows a budget blocked at the sensor that day. */
  private readonly blockedAt = new Lru<string, true>(20_000);
  /** A day whose budget blocks still wait for their lift (something else held the tree). */
  private liftPending: string | undefined;
  private lastDay: string | undefined;
  private lastIdleCheck = Number.NEGATIVE_INFINITY;

  private readonly c: ReturnType<typeof moneyMetrics>;
  private readonly views: MoneyViews;
  /**
   * A model's and an agent's hash field names and labelled counters, built once: every
   * spent call names them, and there are few models and agents.
   */
  private readonly byModel = new Lru<string, ModelFields>(1_000);
  private readonly byAgent = new Lru<string, { usd: string; tokens: string }>(1_000);

  constructor(private readonly d: MoneyDeps) {
    this.c = moneyMetrics(d.metrics, () => this.openCount());
    this.views = new MoneyViews(d);
  }

  private get store(): Store {
    return this.d.store;
  }

  private modelFields(model: string): ModelFields {
    let m = this.byModel.peek(model);
    if (!m) {
      m = {
        usd: F.model(model, F.usd),
        tokens: F.model(model, F.tokens),
        calls: F.model(model, F.calls),
        metrics: {
          usd: this.c.spendUsd.labels(model),
          tokens: this.c.spendTokens.labels(model),
          calls: this.c.spendCalls.labels(model),
        },
      };
      // Each model's series exists from its first input on, at 0 until it adds any.
      m.metrics.usd.inc(0);
      m.metrics.tokens.inc(0);
      m.metrics.calls.inc(0);
      this.byModel.set(model, m);
    }
    return m;
  }

  private agentFields(agent: string): { usd: string; tokens: string } {
    let a = this.byAgent.peek(agent);
    if (!a) {
      a = { usd: F.agent(agent, F.usd), tokens: F.agent(agent, F.tokens) };
      this.byAgent.set(agent, a);
    }
    return a;
  }

  /** Read-modify-write of a session's spend (stored packed); `fn` may run again on a conflict. */
  private mutate<R>(id: string, fn: (st: SessionSpend | undefined) => { st?: SessionSpend; result: R }): Promise<R> {
    return this.store.update<unknown, R>(mKeys.session(id), (cur) => {
      const r = fn(decodeSpend(cur));
      return { value: r.st ? encodeSpend(r.st) : cur, result: r.result, ttlMs: M_TTL.session };
    });
  }

  private async spendOf(id: string): Promise<SessionSpend | undefined> {
    return decodeSpend(await this.store.get<unknown>(mKeys.session(id)));
  }

  // -------------------------------------------------------------------------
  // inputs: spend

  onRequest(r: RequestRecord, s: SessionInfo): Promise<readonly Transition[]> {
    this.reportsRequests.set(r.session_id, true);
    this.reportsCalls.set(r.session_id, true);
    return this.spend(r.session_id, s, recordSpend(r));
  }

  onProgress(ev: ProgressEvent, s: SessionInfo): readonly Transition[] | Promise<readonly Transition[]> {
    if (ev.kind === 'assistant') {
      if (this.reportsRequests.has(ev.session_id)) return NONE;
      return this.spend(ev.session_id, s, {
        kind: 'assistant',
        calls: 1,
        // The whole prompt: its uncached part and what the cache read and wrote.
        tokens: ev.input_tokens + ev.cache_read_tokens + ev.cache_write_tokens,
        usd: 0,
        ts: ev.ts,
        model: ev.model,
        agent: ev.agent,
      });
    }
    if (ev.kind !== 'tool') return NONE;
    if (ev.landed) return this.landedCall(ev);
    // Most tool calls cost nothing here: their session reports its model calls.
    if (this.reportsCalls.has(ev.session_id)) return NONE;
    return this.spend(ev.session_id, s, { kind: 'tool', calls: 1, tokens: 0, usd: 0, ts: ev.ts, agent: ev.agent });
  }

  private async spend(id: string, s: SessionInfo, x: SpendInput): Promise<readonly Transition[]> {
    const k = this.d.knobs();
    const r = await this.mutate(id, (cur) => {
      const st = cur ?? newSessionSpend(x.ts);
      const added = addSpend(st, x);
      const f = st.f;
      const flagged = f ? { model: f.model, agent: f.agent } : undefined;
      return { st, result: { c: added.c, k: added.k, u: added.u, req: st.req, mc: st.mc, flagged } };
    });
    if (r.mc) this.reportsCalls.set(id, true);
    if (r.req) this.reportsRequests.set(id, true);
    if (r.c === 0 && r.k === 0 && r.u === 0) return NONE;
    const now = this.d.clock.now();
    const day = dayOf(now, k.timezone);
    const meta = x.model && x.agent ? undefined : await this.d.tree.meta(id);
    const model = x.model ?? r.flagged?.model ?? meta?.models.at(-1) ?? 'unknown';
    const agent = x.agent ?? r.flagged?.agent ?? meta?.agent;
    const mf = this.modelFields(model);
    const budgets = anyBudget(k.budgets);
    // Without a budget nothing reads the totals back, so a zero add is left out (most
    // tool calls add one call and nothing else); with one, every total is read back.
    const deltas: Record<string, number> = {};
    if (r.u || budgets) deltas[F.usd] = deltas[mf.usd] = r.u;
    if (r.k || budgets) deltas[F.tokens] = deltas[mf.tokens] = r.k;
    if (r.c || budgets) deltas[F.calls] = deltas[mf.calls] = r.c;
    if (agent && (r.u || r.k || budgets)) {
      const af = this.agentFields(agent);
      if (r.u || budgets) deltas[af.usd] = r.u;
      if (r.k || budgets) deltas[af.tokens] = r.k;
    }
    if (r.flagged) addLoop(deltas, model, r);
    // The new totals are read back only when a budget is set (they are what it compares).
    const dayKey = mKeys.day(day);
    const [dt, tt] = await Promise.all([
      budgets
        ? this.store.incr(dayKey, deltas, k.retention + DAY)
        : this.store.add(dayKey, deltas, k.retention + DAY).then(() => ({})),
      // A tree's own counters only while a tree ceiling is set (one key per tree and day).
      // The zero adds read back where a Resume rebased the tree, in the same step.
      hasCeiling(k.budgets.tree)
        ? this.store.incr(
            mKeys.tree(day, s.root),
            { [F.usd]: r.u, [F.tokens]: r.k, [F.calls]: r.c, [F.resumedUsd]: 0, [F.resumedTokens]: 0, [F.exempt]: 0 },
            M_TTL.tree,
          )
        : this.treeExemption(day, s.root, k),
    ]);
    // (prom-client hashes the labels on every inc: a zero one is skipped, its series exists from modelFields)
    // (metrics count once the unit commits: never for an attempt judged again)
    afterCommit(() => {
      if (r.u) mf.metrics.usd.inc(r.u);
      if (r.k) mf.metrics.tokens.inc(r.k);
      if (r.c) mf.metrics.calls.inc(r.c);
    });
    if (!budgets) return NONE;
    const out: Transition[] = [];
    const list = standings(s.root, agent, dt, tt, k);
    for (const [scope, st] of list) {
      if (st.level === 'ok') continue;
      const t = await this.raise(day, scope, st);
      if (t) out.push(t);
    }
    // In an acting mode the tree is refused: at the gate (a router), and at the sensor (a block).
    const over = this.d.mode.acts() ? list.find(([, st, refusable]) => st.level === 'over' && refusable) : undefined;
    if (over) await this.blockTree(day, s.root, budgetLine(over[0], over[1], day));
    return out;
  }

  /**
   * Has the sensor refuse the tree's tool calls (a tree-wide block), once per tree and
   * day: a session that reports no model requests through a router is held too. A
   * Resume lifts it (the mode's tree-wide lift); so does the next day.
   */
  private async blockTree(day: string, root: string, reason: string): Promise<void> {
    if (this.blockedAt.get(`${day}|${root}`)) return;
    const fresh = await this.store.update<Record<string, 'blocked' | 'lifted'>, boolean>(mKeys.blocked(day), (cur) => {
      if (cur?.[root] === 'blocked') return { value: cur, result: false, ttlMs: M_TTL.raised };
      return { value: { ...(cur ?? {}), [root]: 'blocked' }, result: true, ttlMs: M_TTL.raised };
    });
    this.blockedAt.set(`${day}|${root}`, true);
    onDiscard(() => this.blockedAt.delete(`${day}|${root}`));
    if (!fresh) return;
    const report = `${reason}\nThe tree's tool calls are refused until the next day or a Resume.`;
    await this.d.directives(root, [{ type: 'block', session_id: root, scope: 'tree', reason, report }]);
  }

  /**
   * The blocks of a day gone by are lifted, tree by tree, once nothing else holds the
   * tree (a lift ends every block of it: a hard stop or a recovery's block waits for
   * its own release, and the budget's lift is tried again on the next tick).
   */
  private async liftDay(day: string): Promise<boolean> {
    const blocked = (await this.store.get<Record<string, 'blocked' | 'lifted'>>(mKeys.blocked(day))) ?? {};
    let waiting = false;
    for (const [root, state] of Object.entries(blocked)) {
      if (state !== 'blocked') continue;
      const t = await this.store.get<TreeState>(keys.tree(root));
      if (t && (t.refuse_all || Object.keys(t.refused).length || t.awaiting_compaction)) {
        waiting = true;
        continue;
      }
      // One instance lifts it.
      const mine = await this.store.update<Record<string, 'blocked' | 'lifted'>, boolean>(mKeys.blocked(day), (cur) => {
        if (cur?.[root] !== 'blocked') return { value: cur, result: false, ttlMs: M_TTL.raised };
        return { value: { ...cur, [root]: 'lifted' }, result: true, ttlMs: M_TTL.raised };
      });
      if (mine)
        await this.d.directives(root, [
          { type: 'lift', session_id: root, scope: 'tree', reason: `budget: ${day} is over` },
        ]);
    }
    return waiting;
  }

  /** Without a tree ceiling only a Resume's exemption from the shared ceilings is read (when any is set). */
  private async treeExemption(day: string, root: string, k: MoneyOptions): Promise<Record<string, number>> {
    if (!anyBudget(k.budgets)) return {};
    return this.store.counts(mKeys.tree(day, root), [F.exempt]);
  }

  /** A landed call: unless it repeats the last landing, the session made progress. */
  private async landedCall(ev: ToolEvent): Promise<readonly Transition[]> {
    const r = await this.mutate<Stretch | null>(ev.session_id, (cur) => {
      const st = cur ?? newSessionSpend(ev.ts);
      if (!landed(st, ev.fingerprint, ev.ts)) return { st, result: null };
      const closed = stretchOf(ev.session_id, st, 'recovered', st.ts) ?? null;
      restart(st, ev.ts);
      return { st, result: closed };
    });
    if (r) await this.finish([r], []);
    return NONE;
  }

  // -------------------------------------------------------------------------
  // the mode's decisions: flags open a stretch, actions close it

  async onTree(ev: ModeEvent, tree: TreeState): Promise<readonly Transition[]> {
    const now = this.d.clock.now();
    const out = ev.type === 'resume' ? await this.resumeTree(tree.root, now) : [];
    // Only this tree's key: units of different trees never read each other's open stretches.
    const open = (await this.store.get<OpenMap>(mKeys.open(tree.root))) ?? {};
    const ids = new Set(Object.keys(open));
    if (ev.type === 'verdict') ids.add(ev.session_id);
    if (!ids.size) return out;
    const opened: [string, OpenEntry][] = [];
    const closed: Stretch[] = [];
    const mode = this.d.mode.type();
    const acts = this.d.mode.acts();
    const k = this.d.knobs();
    for (const id of ids) {
      const mine = ev.type === 'verdict' && ev.session_id === id;
      // A stretch opens when a counted detector's verdict leaves ok (not on a change
      // between two flagged levels: that is the same stretch, or one already closed).
      const flagging =
        mine && ev.from === 'ok' && ev.to !== 'ok' && ev.severity !== 'info' && k.detectors.includes(ev.detector);
      if (!open[id] && !flagging) continue;
      // Who it belongs to, as the tree knows it (no request record may have named the agent).
      const meta = flagging ? await this.d.tree.meta(id) : undefined;
      const who = { root: tree.root, agent: (mine && ev.agent) || meta?.agent, model: meta?.models.at(-1) };
      const r = await this.mutate<{ opened?: Flag; closed?: Stretch }>(id, (cur) => {
        if (!cur && !flagging) return { result: {} };
        const st = cur ?? newSessionSpend(now);
        const res: { opened?: Flag; closed?: Stretch } = {};
        if (flagging && flag(st, ev.detector, ev.rule, ev.to, mode, who)) res.opened = { ...(st.f as Flag) };
        // Raised to looping while open.
        else if (mine && st.f && st.f.det === ev.detector && ev.to === 'looping') st.f.lvl = 'looping';
        if (mine && ev.to === 'ok' && st.f?.det === ev.detector) {
          res.closed = stretchOf(id, st, 'recovered', st.ts);
          restart(st, st.ts);
        } else if (st.f && actedOn(id, ev, tree, acts)) {
          const at = Math.max(st.ts, st.f.at);
          res.closed = stretchOf(id, st, 'acted', at);
          restart(st, at);
        }
        return { st, result: res };
      });
      if (r.opened) {
        opened.push([id, { root: r.opened.root, ...(r.opened.agent ? { agent: r.opened.agent } : {}), at: now }]);
        await this.loopSpend(r.opened, now);
      }
      if (r.closed) closed.push(r.closed);
    }
    await this.finish(closed, opened);
    return out;
  }

  /** The spend of a stretch up to its flag joins the day's spend in loops. */
  private async loopSpend(f: Flag, now: number): Promise<void> {
    if (!f.c && !f.k && !f.u) return;
    const k = this.d.knobs();
    const deltas: Record<string, number> = {};
    addLoop(deltas, f.model ?? 'unknown', f);
    await this.store.add(mKeys.day(dayOf(now, k.timezone)), deltas, k.retention + DAY);
  }

  /**
   * Records closed stretches (the day's list, metrics) and keeps the open stretches, tree
   * by tree: drops the closed (and `drop`: ids whose stretch is gone, with their root),
   * adds the opened; past max_open in a tree its oldest are closed as ended. The count
   * of all of them is a counter (no read, so trees never conflict on it).
   */
  private async finish(
    closed: Stretch[],
    opened: [string, OpenEntry][],
    drop: [id: string, root: string][] = [],
  ): Promise<void> {
    if (!closed.length && !opened.length && !drop.length) return;
    const k = this.d.knobs();
    const byRoot = new Map<string, { del: string[]; add: [string, OpenEntry][] }>();
    const of = (root: string) => {
      const c = byRoot.get(root) ?? { del: [], add: [] };
      byRoot.set(root, c);
      return c;
    };
    for (const x of closed) of(x.root).del.push(x.session);
    for (const [id, root] of drop) of(root).del.push(id);
    for (const [id, e] of opened) of(e.root).add.push([id, e]);
    let delta = 0;
    const evicted: string[] = [];
    for (const [root, c] of byRoot) {
      const r = await this.store.update<OpenMap, { d: number; gone: string[] }>(mKeys.open(root), (cur) => {
        const m: OpenMap = { ...(cur ?? {}) };
        const before = Object.keys(m).length;
        for (const id of c.del) delete m[id];
        for (const [id, e] of c.add) m[id] = e;
        const ids = Object.keys(m);
        const gone =
          ids.length > k.max_open
            ? ids.sort((a, b) => m[a].at - m[b].at).slice(0, ids.length - k.max_open)
            : ([] as string[]);
        for (const id of gone) delete m[id];
        const n = ids.length - gone.length;
        return { value: n ? m : undefined, result: { d: n - before, gone } };
      });
      delta += r.d;
      evicted.push(...r.gone);
    }
    if (delta) await this.store.add(mKeys.openCount, { [F.open]: delta });
    for (const x of closed) await this.record(x, k);
    for (const id of evicted) {
      const x = await this.closeSession(id, 'ended', (st) => st.ts);
      if (x) await this.record(x, k);
    }
  }

  /** Every tree's open stretches (the o:<root> keys). */
  private allOpen(): Promise<[id: string, e: OpenEntry][]> {
    return openStretches(this.store);
  }

  private async record(x: Stretch, k: MoneyOptions): Promise<void> {
    const day = dayOf(x.closed_at ?? x.flagged_at, k.timezone);
    await this.store.pushCapped(mKeys.stretches(day), pack(x), k.max_stretches_per_day, k.retention);
    afterCommit(() => {
      this.d.logger.info(
        { session: x.session, outcome: x.outcome, calls: x.calls, usd: x.usd, calls_to_flag: x.to_flag.calls },
        `flagged stretch closed: ${x.outcome}`,
      );
      const labels = { model: x.model ?? 'unknown', outcome: x.outcome };
      this.c.stretches.inc(labels);
      this.c.loopUsd.inc(labels, x.usd);
      this.c.loopUsdToFlag.inc(labels, x.to_flag.usd);
      this.c.loopCalls.inc(labels, x.calls);
      this.c.loopTokens.inc(labels, x.tokens);
    });
  }

  /** Closes a session's open stretch (if it still has one) at the time `at` picks. */
  private closeSession(id: string, outcome: Outcome, at: (st: SessionSpend) => number): Promise<Stretch | null> {
    return this.mutate<Stretch | null>(id, (cur) => {
      if (!cur?.f) return { result: null };
      const when = at(cur);
      const x = stretchOf(id, cur, outcome, when) ?? null;
      restart(cur, when);
      return { st: cur, result: x };
    });
  }

  // -------------------------------------------------------------------------
  // time: the session's end, the day's end

  async onTick(now: number): Promise<readonly Transition[]> {
    const k = this.d.knobs();
    const day = dayOf(now, k.timezone);
    let out: readonly Transition[] = NONE;
    if (this.lastDay !== day) {
      this.lastDay = day;
      const before = dayOf(dayStart(day, k.timezone) - 1, k.timezone);
      out = await this.resolveDay(before);
      this.liftPending = before;
    }
    if (this.liftPending && !(await this.liftDay(this.liftPending))) this.liftPending = undefined;
    if (now - this.lastIdleCheck >= 60_000) {
      this.lastIdleCheck = now;
      await this.closeIdle(now, k);
    }
    return out;
  }

  /**
   * Stretches whose session had no input for idle_close end at its last input. This pass
   * reads every tree's open stretches: past max_open in all trees the oldest close as
   * ended here (a tree past it closes its own at once), and the count is set right.
   */
  async closeIdle(now: number, k = this.d.knobs()): Promise<number> {
    const open = await this.allOpen();
    // (read after the trees' keys: a unit that changed one since changed the count too, and
    // the commit refuses this one; a tree's first stretch opened during the scan is set
    // right on the next pass)
    const counted = (await this.store.counts(mKeys.openCount, [F.open]))[F.open];
    if (counted !== open.length) await this.store.add(mKeys.openCount, { [F.open]: open.length - counted });
    const over = new Set(
      open.length > k.max_open
        ? [...open]
            .sort((a, b) => a[1].at - b[1].at)
            .slice(0, open.length - k.max_open)
            .map(([id]) => id)
        : [],
    );
    const closed: Stretch[] = [];
    const stale: [string, string][] = [];
    for (const [id, e] of open) {
      if (!over.has(id) && now - e.at < k.idle_close) continue;
      const seen = over.has(id) ? 0 : ((await this.d.tree.meta(id))?.last_seen ?? 0);
      const x = await this.mutate<Stretch | null | 'gone'>(id, (cur) => {
        if (!cur?.f) return { result: 'gone' };
        const last = Math.max(cur.ts, seen);
        if (!over.has(id) && now - last < k.idle_close) return { result: null };
        const s = stretchOf(id, cur, 'ended', last) ?? null;
        restart(cur, last);
        return { st: cur, result: s };
      });
      // Closed already (by another instance, or a forgotten session): only the index entry is left.
      if (x === 'gone') stale.push([id, e.root]);
      else if (x) closed.push(x);
    }
    await this.finish(closed, [], stale);
    return closed.length;
  }

  // -------------------------------------------------------------------------
  // budgets

  /** Raises a scope's incident to `st.level`, once per day whatever the instances; the transition if this call did. */
  private async raise(day: string, scope: Scope, st: Standing): Promise<Transition | undefined> {
    const key = scopeKey(scope);
    const cached = this.raisedAt.get(`${day}|${key}`);
    if (cached && RANK[cached] >= RANK[st.level]) return undefined;
    const was = await this.store.update<Record<string, BudgetLevel>, BudgetLevel | null>(mKeys.raised(day), (cur) => {
      const m = { ...(cur ?? {}) };
      const before = m[key] ?? 'ok';
      if (RANK[before] >= RANK[st.level]) return { value: m, result: null, ttlMs: M_TTL.raised };
      m[key] = st.level;
      return { value: m, result: before, ttlMs: M_TTL.raised };
    });
    this.raisedAt.set(`${day}|${key}`, st.level);
    onDiscard(() => this.raisedAt.delete(`${day}|${key}`));
    if (was === null) return undefined;
    afterCommit(() => this.c.budgetAlerts.inc({ scope: scope.kind, level: st.level }));
    // The refusal stops what it covers: their stretches end at it.
    if (st.level === 'over' && this.d.mode.acts()) await this.closeCovered(scope);
    return budgetTransition(scope, was, st.level, budgetLine(scope, st, day), day);
  }

  private async closeCovered(scope: Scope): Promise<void> {
    // A tree's ceiling reads that tree's key only; an agent's or the total reads every tree's.
    let open: [string, OpenEntry][];
    if (scope.kind === 'tree') {
      open = Object.entries((await this.store.get<OpenMap>(mKeys.open(scope.id))) ?? {});
    } else open = await this.allOpen();
    const closed: Stretch[] = [];
    for (const [id, e] of open) {
      const covered =
        scope.kind === 'total' ||
        (scope.kind === 'tree' && e.root === scope.id) ||
        (scope.kind === 'agent' && e.agent === scope.id);
      if (!covered) continue;
      const x = await this.closeSession(id, 'budget', (st) => Math.max(st.ts, st.f?.at ?? 0));
      if (x) closed.push(x);
    }
    await this.finish(closed, []);
  }

  /** A Resume of a tree: it counts afresh today, past the agent and total ceilings; its incident resolves. */
  private async resumeTree(root: string, now: number): Promise<Transition[]> {
    const k = this.d.knobs();
    const day = dayOf(now, k.timezone);
    const key = mKeys.tree(day, root);
    const t = await this.store.counts(key, [F.usd, F.tokens, F.resumedUsd, F.resumedTokens, F.exempt]);
    await this.store.incr(
      key,
      {
        [F.resumedUsd]: t[F.usd] - t[F.resumedUsd],
        [F.resumedTokens]: t[F.tokens] - t[F.resumedTokens],
        [F.exempt]: 1 - t[F.exempt],
      },
      M_TTL.tree,
    );
    // The mode's Resume lifts every block of the tree: the next crossing blocks it again.
    this.blockedAt.delete(`${day}|${root}`);
    await this.store.update<Record<string, 'blocked' | 'lifted'>, void>(mKeys.blocked(day), (cur) => {
      if (!cur?.[root]) return { value: cur, result: undefined };
      const { [root]: _, ...rest } = cur;
      return { value: rest, result: undefined, ttlMs: M_TTL.raised };
    });
    const scope: Scope = { kind: 'tree', id: root };
    const sk = scopeKey(scope);
    this.raisedAt.delete(`${day}|${sk}`);
    const was = await this.store.update<Record<string, BudgetLevel>, BudgetLevel>(mKeys.raised(day), (cur) => {
      const m = { ...(cur ?? {}) };
      const before = m[sk] ?? 'ok';
      delete m[sk];
      return { value: m, result: before, ttlMs: M_TTL.raised };
    });
    if (was === 'ok') return [];
    return [budgetTransition(scope, was, 'ok', `budget: ${scopeLabel(scope)} resumed: counts afresh from here`, day)];
  }

  /** The day before ended: its raised incidents resolve (one instance does it). */
  private async resolveDay(day: string): Promise<readonly Transition[]> {
    const raised = await this.store.get<Record<string, BudgetLevel>>(mKeys.raised(day));
    if (!raised || !Object.values(raised).some((l) => l !== 'ok')) return NONE;
    if (!(await this.store.setIfAbsent(mKeys.resolved(day), '1', M_TTL.raised))) return NONE;
    const out: Transition[] = [];
    for (const [key, level] of Object.entries(raised)) {
      if (level === 'ok') continue;
      const scope = scopeOf(key);
      out.push(budgetTransition(scope, level, 'ok', `budget: ${scopeLabel(scope)}: ${day} is over`, day));
    }
    return out;
  }

  gate(g: GateContext): GateVote | undefined | Promise<GateVote | undefined> {
    const k = this.d.knobs();
    if (!g.acting || !anyBudget(k.budgets)) return undefined;
    return this.budgetGate(g, k);
  }

  private async budgetGate(g: GateContext, k: MoneyOptions): Promise<GateVote | undefined> {
    const day = dayOf(g.now, k.timezone);
    const agent = g.query.agent ?? (await this.d.tree.meta(g.session.id))?.agent;
    const { dt, tt } = await this.counters(day, g.session.root, agent);
    for (const [scope, st, refusable] of standings(g.session.root, agent, dt, tt, k)) {
      if (st.level !== 'over' || !refusable) continue;
      this.c.budgetRefusals.inc({ scope: scope.kind });
      const wait = Math.ceil((nextDayAt(g.now, k.timezone) - g.now) / 1000);
      return { refuse: { reason: budgetLine(scope, st, day), retry_after_s: Math.max(1, wait) } };
    }
    return undefined;
  }

  private async counters(day: string, root: string, agent: string | undefined) {
    const fields: string[] = [F.usd, F.tokens];
    if (agent) fields.push(F.agent(agent, F.usd), F.agent(agent, F.tokens));
    const [dt, tt] = await Promise.all([
      this.store.counts(mKeys.day(day), fields),
      this.store.counts(mKeys.tree(day, root), [F.usd, F.tokens, F.resumedUsd, F.resumedTokens, F.exempt]),
    ]);
    return { dt, tt };
  }

  // -------------------------------------------------------------------------
  // readouts

  /** Beside each session: what its open stretch has cost, and where its budgets stand today. */
  async session(id: string): Promise<SessionReadout | undefined> {
    const st = await this.spendOf(id);
    if (!st) return undefined;
    const k = this.d.knobs();
    const fields: Record<string, string | number | null> = {
      loop_usd: st.f ? round6(st.u) : null,
      loop_calls: st.f ? st.c : null,
    };
    if (anyBudget(k.budgets)) {
      const day = dayOf(this.d.clock.now(), k.timezone);
      const agent = st.f?.agent ?? (await this.d.tree.meta(id))?.agent;
      const root = this.d.tree.infoNow(id)?.root ?? (await this.d.tree.rootOf(id));
      const { dt, tt } = await this.counters(day, root, agent);
      const list = standings(root, agent, dt, tt, k);
      const worst = list.sort((a, b) => b[1].share - a[1].share)[0];
      if (worst) {
        const [scope, s, refusable] = worst;
        fields.budget = `${scope.kind === 'total' ? 'all' : scope.kind} ${amountShort(s)}`;
        fields.budget_level = s.level === 'over' && !refusable ? 'resumed' : s.level;
      }
    }
    return { level: 'ok', reason: '', source: TYPE, fields };
  }

  async forget(ids: readonly string[]): Promise<void> {
    // A session's open stretch is in its flag's tree (an entry whose spend is gone already
    // is dropped by the idle check).
    const byRoot = new Map<string, Set<string>>();
    for (const id of ids) {
      this.reportsCalls.delete(id);
      this.reportsRequests.delete(id);
      const root = (await this.spendOf(id))?.f?.root;
      if (root) byRoot.set(root, (byRoot.get(root) ?? new Set()).add(id));
      await this.store.del(mKeys.session(id));
    }
    let delta = 0;
    for (const [root, gone] of byRoot) {
      delta += await this.store.update<OpenMap, number>(mKeys.open(root), (cur) => {
        const m: OpenMap = {};
        for (const [id, e] of Object.entries(cur ?? {})) if (!gone.has(id)) m[id] = e;
        const n = Object.keys(m).length;
        return { value: n ? m : undefined, result: n - Object.keys(cur ?? {}).length };
      });
    }
    if (delta) await this.store.add(mKeys.openCount, { [F.open]: delta });
  }

  /** Open stretches in all trees: the counter. */
  private async openCount(): Promise<number> {
    return (await this.store.counts(mKeys.openCount, [F.open]))[F.open];
  }

  async health(): Promise<Record<string, unknown>> {
    const k = this.d.knobs();
    const day = dayOf(this.d.clock.now(), k.timezone);
    const c = await this.store.counts(mKeys.day(day), [F.usd, F.loopUsd]);
    const raised = (await this.store.get<Record<string, BudgetLevel>>(mKeys.raised(day))) ?? {};
    return {
      open_stretches: await this.openCount(),
      today_usd: round6(c[F.usd]),
      today_loop_usd: round6(c[F.loopUsd]),
      budgets_over: Object.entries(raised)
        .filter(([, l]) => l === 'over')
        .map(([s]) => s),
    };
  }

  ledger(since: number, limit?: number): Promise<LedgerView> {
    return this.views.ledger(since, limit);
  }

  days(n: number): Promise<DayView[]> {
    return this.views.days(n);
  }

  budgets(): Promise<Record<string, unknown>> {
    return this.views.budgets();
  }

  panels(): Promise<Panel[]> {
    return this.views.panels();
  }

  routes(): PluginRoute[] {
    return [
      {
        method: 'GET',
        url: '/ledger',
        summary:
          'The ledger: stretches flagged in the window (spend to the flag, to the action or the end), their summary and the days spend',
        querystring: z.strictObject({
          since: duration().default(24 * 3_600_000),
          limit: z.coerce.number().int().min(1).max(100_000).default(1_000),
        }),
        handler: (req) => this.ledger(this.d.clock.now() - req.query.since, req.query.limit),
      },
      {
        method: 'GET',
        url: '/ledger/days',
        summary: 'Spend per day and model, in total and in flagged stretches (the admin chart)',
        querystring: z.strictObject({ days: z.coerce.number().int().min(1).max(400).default(14) }),
        handler: (req) => this.days(req.query.days),
      },
      {
        method: 'GET',
        url: '/budgets',
        summary: "Today's budgets: the ceilings, all spend and each agent's, the incidents raised",
        handler: () => this.budgets(),
      },
    ];
  }
}

function addLoop(deltas: Record<string, number>, model: string, s: { c: number; k: number; u: number }): void {
  deltas[F.loopUsd] = (deltas[F.loopUsd] ?? 0) + s.u;
  deltas[F.loopTokens] = (deltas[F.loopTokens] ?? 0) + s.k;
  deltas[F.loopCalls] = (deltas[F.loopCalls] ?? 0) + s.c;
  deltas[F.model(model, F.loopUsd)] = s.u;
  deltas[F.model(model, F.loopTokens)] = s.k;
}

/** Whether a mode's decision acted on a session: refused, stopped, or (the acting event itself) compacted or capped. */
function actedOn(id: string, ev: ModeEvent, tree: TreeState, acts: boolean): boolean {
  if (tree.refuse_all || tree.refused[id]) return true;
  return (
    acts &&
    ev.type === 'verdict' &&
    ev.session_id === id &&
    ev.act &&
    ev.to !== 'ok' &&
    VERDICT_RANK[ev.to] > VERDICT_RANK[ev.from]
  );
}
