import { z } from 'zod';
import type { Clock } from '../../core/clock.ts';
import type {
  Detector,
  GateContext,
  GateVote,
  ModeInfo,
  Panel,
  PluginRoute,
  SessionInfo,
  SessionReadout,
  Transition,
} from '../../core/contracts.ts';
import type { Logger } from '../../core/logger.ts';
import type { Store } from '../../core/store/store.ts';
import type { SessionTree } from '../../core/tree.ts';
import type { AssistantEvent, ProgressEvent, RequestRecord, VerdictLevel } from '../../core/wire.ts';
import { directivesFor } from './actions.ts';
import { R_EMPTY } from './judge/state.ts';
import {
  type EnvelopeBook,
  type EnvelopeReadout,
  envelopeReadout,
  type HygieneChange,
  type HygieneLevel,
  type HygieneState,
  learnAssistant,
  learnRequest,
  onEvent,
  onRequest,
  onTick,
  promptTokensOf,
  report,
  topFinding,
} from './judge.ts';
import type { HygieneOptions } from './options.ts';
import { bookOf, type HygieneRepo, LiveRepo, StoreRepo } from './repo.ts';

// The service's shell around the pure session-hygiene judge (judge.ts): load the
// session's state and the call's model envelope, judge, save, learn the call into the
// envelope, and turn each verdict change into a kernel transition on the session.
//
// Levels onto the kernel's: ok -> ok; info -> ok (stalling with severity info when
// `info_alerts` is on); warning -> stalling (severity warning); critical -> looping
// (severity critical). Every transition has `act: false`: acting modes must not compact
// a session that is dying of bulk (compaction does not save it; a fresh session does).
// One incident per conversation: dedup_key `session-hygiene:<session>`.
//
// The plugin's part (abort the dispatch, show the brief, open a fresh session) rides on
// the transition (`directives`): the kernel queues it for the tree like a mode's.

export const TYPE = 'session-hygiene';
const NONE: readonly Transition[] = Object.freeze([]);

const LEVEL: Record<HygieneLevel, VerdictLevel> = {
  ok: 'ok',
  info: 'stalling',
  warning: 'stalling',
  critical: 'looping',
};

/** The kernel level a hygiene level maps onto (info: ok unless info_alerts). */
export function kernelLevel(l: HygieneLevel, k: Pick<HygieneOptions, 'info_alerts'>): VerdictLevel {
  return l === 'info' && !k.info_alerts ? 'ok' : LEVEL[l];
}

export interface HygieneDeps {
  store: Store;
  clock: Clock;
  tree: Pick<SessionTree, 'rootOf'>;
  logger: Logger;
  /** The configured response mode, live: hygiene aborts and refuses only when it acts. */
  mode: ModeInfo;
  knobs: () => HygieneOptions;
}

export class SessionHygieneDetector implements Detector {
  readonly type = TYPE;
  private readonly repo: HygieneRepo;
  /** Set on the memory backend: its synchronous path skips an await per input. */
  private readonly live: LiveRepo | undefined;
  private readonly knobs: () => HygieneOptions;

  constructor(private readonly d: HygieneDeps) {
    this.knobs = d.knobs;
    this.live = d.store.backend === 'memory' ? new LiveRepo(d.knobs) : undefined;
    this.repo = this.live ?? new StoreRepo(d.store, d.knobs);
  }

  // -------------------------------------------------------------------------
  // inputs

  onProgress(ev: ProgressEvent, s: SessionInfo): readonly Transition[] | Promise<readonly Transition[]> {
    const k = this.knobs();
    // Tool calls and compactions only count as signs of life after a resume: a session
    // without a pending resume has nothing for them to change (and gets no state from them).
    const lifeOnly = ev.kind === 'tool' || ev.kind === 'compaction_done';
    const live = this.live;
    if (live) {
      if (lifeOnly && live.peek(ev.session_id)?.resume_at == null) return NONE;
      const env = ev.kind === 'assistant' && ev.model !== undefined ? live.envelopeNow(ev.model) : undefined;
      const changes = live.mutateNow(ev.session_id, (st) => onEvent(st, ev, k, env), true) ?? [];
      if (ev.kind === 'assistant') live.learnNow((b) => learnAssistant(b, ev, k));
      return changes.length ? this.emit(changes, s.root, k) : NONE;
    }
    return this.progressStored(ev, s, k, lifeOnly);
  }

  private async progressStored(
    ev: ProgressEvent,
    s: SessionInfo,
    k: HygieneOptions,
    lifeOnly: boolean,
  ): Promise<readonly Transition[]> {
    if (lifeOnly && !(await this.repo.resumePending(ev.session_id))) return NONE;
    const env = ev.kind === 'assistant' && ev.model !== undefined ? await this.repo.envelope(ev.model) : undefined;
    const changes = (await this.repo.mutate(ev.session_id, (st) => onEvent(st, ev, k, env), !lifeOnly)) ?? [];
    if (ev.kind === 'assistant' && learnsFrom(ev)) await this.repo.learn(ev.model!, (b) => learnAssistant(b, ev, k));
    return changes.length ? this.emit(changes, s.root, k) : NONE;
  }

  onRequest(r: RequestRecord, s: SessionInfo): readonly Transition[] | Promise<readonly Transition[]> {
    const k = this.knobs();
    const live = this.live;
    if (live) {
      const env = live.envelopeNow(r.model);
      const changes = live.mutateNow(r.session_id, (st) => onRequest(st, r, k, env), true) ?? [];
      live.learnNow((b) => learnRequest(b, r, k));
      return changes.length ? this.emit(changes, s.root, k) : NONE;
    }
    return this.requestStored(r, s, k);
  }

  private async requestStored(r: RequestRecord, s: SessionInfo, k: HygieneOptions): Promise<readonly Transition[]> {
    const env = await this.repo.envelope(r.model);
    const changes = (await this.repo.mutate(r.session_id, (st) => onRequest(st, r, k, env), true)) ?? [];
    if (r.prompt_tokens > 0) await this.repo.learn(r.model, (b) => learnRequest(b, r, k));
    return changes.length ? this.emit(changes, s.root, k) : NONE;
  }

  /** Time passed: restore stalls and the resume window. Visits only the sessions time can change. */
  async onTick(now: number): Promise<readonly Transition[]> {
    const k = this.knobs();
    const out: Transition[] = [];
    const gone: string[] = [];
    for (const id of await this.repo.timed()) {
      let changes: readonly HygieneChange[] | undefined;
      if (this.live) changes = this.live.mutateNow(id, (st) => onTick(st, now, k), false);
      else {
        // Read first: most ticks change nothing, and a write per timed session per tick is waste.
        const cur = await this.repo.get(id);
        if (cur !== undefined && onTick(cur, now, k).length === 0) continue;
        changes = cur === undefined ? undefined : await this.repo.mutate(id, (st) => onTick(st, now, k), false);
      }
      if (changes === undefined) gone.push(id);
      else if (changes.length) out.push(...(await this.emit(changes, await this.d.tree.rootOf(id), k)));
    }
    await this.repo.untime(gone);
    return out;
  }

  // -------------------------------------------------------------------------
  // changes -> transitions and directives

  private async emit(changes: readonly HygieneChange[], _root: string, k: HygieneOptions): Promise<Transition[]> {
    const out: Transition[] = [];
    const acting = this.d.mode.acts();
    for (const c of changes) {
      const specs = directivesFor(c, acting, k);
      const from = kernelLevel(c.from, k);
      const to = kernelLevel(c.to, k);
      if (from === 'ok' && to === 'ok') continue; // info tells without info_alerts (they ask for no action)
      out.push({ ...(await this.transition(c, from, to, k)), ...(specs.length ? { directives: specs } : {}) });
    }
    return out;
  }

  private async transition(
    c: HygieneChange,
    from: VerdictLevel,
    to: VerdictLevel,
    k: HygieneOptions,
  ): Promise<Transition> {
    const st = await this.repo.get(c.session_id);
    const text = st ? report(st, k, await this.bookFor(st), c.at) : c.reason;
    const full = c.brief ? `${text}\n\nBrief for the fresh session:\n${c.brief}` : text;
    return {
      detector: TYPE,
      subject: { kind: 'session', id: c.session_id },
      from,
      to,
      rule: c.rule,
      reason: c.reason.slice(0, 300),
      source: TYPE,
      ...(to === 'ok' ? {} : { severity: c.to === 'ok' ? 'info' : c.to }),
      dedup_key: `${TYPE}:${c.session_id}`,
      report: full.slice(0, 16_384),
      act: false,
      title: (c.rule === null ? `hygiene ok: ${c.session_id}` : `hygiene ${c.to}: ${c.rule} (${c.session_id})`).slice(
        0,
        200,
      ),
    };
  }

  /** The envelope book the readout needs: the session's model only. */
  private async bookFor(st: HygieneState): Promise<EnvelopeBook | undefined> {
    if (st.model === null) return undefined;
    if (this.live) return this.live.book;
    return bookOf(st.model, await this.repo.envelope(st.model));
  }

  // -------------------------------------------------------------------------
  // the gate

  /**
   * After its empty-generation alarm, a conversation's further requests (opencode's
   * retries of the same prefix) are refused in an acting mode, for `empty_refusal` or
   * until a new prompt starts a turn. In warn mode the alarm only alerts.
   */
  async gate(g: GateContext): Promise<GateVote | undefined> {
    if (!g.acting) return undefined;
    const st = this.live ? this.live.peek(g.query.conversation) : await this.repo.get(g.query.conversation);
    const f = st?.findings[R_EMPTY];
    if (!st || !f || st.turn === null || st.turn.empty === 0) return undefined;
    const left = f.since + this.knobs().empty_refusal - g.now;
    if (left <= 0) return undefined;
    return {
      refuse: {
        reason:
          'session-hygiene: empty generation in this conversation; retries re-send the same prefix and buy nothing: re-ask in a fresh session',
        retry_after_s: Math.max(1, Math.ceil(left / 1000)),
      },
    };
  }

  // -------------------------------------------------------------------------
  // readouts

  async state(id: string): Promise<HygieneState | undefined> {
    return this.repo.get(id);
  }

  sessions(): Promise<string[]> {
    return this.repo.ids();
  }

  async session(id: string): Promise<SessionReadout | undefined> {
    const st = await this.repo.get(id);
    if (!st) return undefined;
    const k = this.knobs();
    const top = topFinding(st);
    const trend = st.trend.map((e) => e.per_call);
    return {
      level: kernelLevel(st.level, k),
      reason: top < 0 ? 'ok' : (st.findings[top]?.reason ?? 'ok'),
      source: TYPE,
      dedup_key: `${TYPE}:${id}`,
      fields: {
        hygiene_level: st.level,
        hygiene_rule: st.rule,
        watch_number: trend.length ? trend[trend.length - 1] : null,
        messages: st.stats?.messages ?? null,
        stored_bytes: st.stats?.stored_bytes ?? null,
      },
      series: { watch_number: trend },
      ...(st.last_ts ? { last_event_at: st.last_ts } : {}),
    };
  }

  async report(id: string): Promise<string | undefined> {
    const st = await this.repo.get(id);
    if (!st) return undefined;
    return report(st, this.knobs(), await this.bookFor(st), Math.max(st.last_ts, this.d.clock.now()));
  }

  /** Every model's effective envelope beside its nominal window (configured models with no evidence yet included). */
  async envelopeRows(): Promise<EnvelopeReadout[]> {
    const k = this.knobs();
    const rows = envelopeReadout(await this.repo.envelopes(), k);
    const seen = new Set(rows.map((r) => r.model));
    for (const [model, nominal] of Object.entries(k.nominal_context)) {
      if (seen.has(model)) continue;
      rows.push({
        model,
        effective: 0,
        nominal,
        share_of_nominal: 0,
        clean_calls: 0,
        failures: 0,
        recent_failures: [],
      });
    }
    return rows.sort((a, b) => (a.model < b.model ? -1 : a.model > b.model ? 1 : 0));
  }

  /**
   * Sessions with their watch numbers, flagged first then most recent. Bounded: the
   * flagged sessions and enough others to fill `limit` are read, not every session.
   */
  async sessionRows(limit = 100): Promise<Record<string, unknown>[]> {
    const flagged = await this.repo.flagged();
    const seen = new Set(flagged);
    const others = (await this.repo.ids()).filter((id) => !seen.has(id));
    const states: HygieneState[] = [];
    for (const id of [...flagged.slice(-limit), ...others.slice(-limit)]) {
      const st = await this.repo.get(id);
      if (st) states.push(st);
    }
    const rank: Record<HygieneLevel, number> = { ok: 0, info: 1, warning: 2, critical: 3 };
    states.sort((a, b) => rank[b.level] - rank[a.level] || b.last_ts - a.last_ts);
    return states.slice(0, limit).map((st) => ({
      session: st.session_id,
      level: st.level,
      rule: st.rule,
      watch_number: st.trend.length ? st.trend[st.trend.length - 1].per_call : null,
      trend: st.trend
        .slice(-6)
        .map((e) => `${Math.round(e.per_call / 1000)}k`)
        .join(' '),
      turns: st.turns,
      messages: st.stats?.messages ?? null,
      stored_bytes: st.stats?.stored_bytes ?? null,
      resume_pending: st.resume_at !== null,
      model: st.model,
    }));
  }

  async panels(): Promise<Panel[]> {
    const k = this.knobs();
    const off = k.enabled ? '' : ', disabled';
    return [
      {
        title: `Session hygiene: watch number per session (warn ${Math.round(k.per_call_warn / 1000)}k, retire ${Math.round(k.per_call_retire / 1000)}k${off})`,
        columns: [
          { key: 'session', label: 'session' },
          { key: 'level', label: 'level' },
          { key: 'rule', label: 'rule' },
          { key: 'watch_number', label: 'watch number' },
          { key: 'trend', label: 'trend' },
          { key: 'turns', label: 'turns' },
          { key: 'messages', label: 'messages' },
          { key: 'stored_bytes', label: 'bytes' },
          { key: 'resume_pending', label: 'resume pending' },
          { key: 'model', label: 'model' },
        ],
        rows: await this.sessionRows(),
      },
      {
        title: 'Session hygiene: effective envelope per model',
        columns: [
          { key: 'model', label: 'model' },
          { key: 'effective', label: 'largest clean prompt' },
          { key: 'nominal', label: 'nominal window' },
          { key: 'share_of_nominal', label: 'share of nominal' },
          { key: 'clean_calls', label: 'clean calls' },
          { key: 'failures', label: 'terminal errors' },
        ],
        rows: (await this.envelopeRows()).map(({ recent_failures: _, ...r }) => ({
          ...r,
          share_of_nominal: r.share_of_nominal === null ? null : Math.round(r.share_of_nominal * 1000) / 1000,
        })),
      },
    ];
  }

  async health(): Promise<Record<string, unknown>> {
    const k = this.knobs();
    const critical: string[] = [];
    let warning = 0;
    let info = 0;
    const flagged = await this.repo.flagged();
    for (const id of flagged.slice(-1_000)) {
      const st = await this.repo.get(id);
      if (st?.level === 'critical') {
        if (critical.length < 10) critical.push(id);
      } else if (st?.level === 'warning') warning++;
      else if (st?.level === 'info') info++;
    }
    return {
      enabled: k.enabled,
      sessions: (await this.repo.ids()).length,
      critical_sessions: critical,
      warning_sessions: warning,
      info_sessions: info,
      resumes_watched: (await this.repo.timed()).length,
      models: Object.keys((await this.repo.envelopes()).models).length,
    };
  }

  routes(): PluginRoute[] {
    return [
      {
        method: 'GET',
        url: '/envelopes',
        summary: 'Session hygiene: the effective envelope per model (largest clean prompt) beside its nominal window',
        querystring: z.strictObject({}),
        handler: async () => ({ envelopes: await this.envelopeRows() }),
      },
    ];
  }
}

/** Whether an assistant event can teach the envelope anything (the store write is skipped otherwise). */
function learnsFrom(ev: AssistantEvent): boolean {
  return ev.model !== undefined && ev.summary !== true && promptTokensOf(ev) > 0;
}
