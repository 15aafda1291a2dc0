import type { Clock } from '../../core/clock.ts';
import type { Detector, ModeEvent, SessionInfo, SessionReadout, Transition, TreeState } from '../../core/contracts.ts';
import { StoredStates } from '../../core/decoded.ts';
import { Lru } from '../../core/lru.ts';
import type { Store } from '../../core/store/store.ts';
import type { SessionTree } from '../../core/tree.ts';
import { afterCommit, onDiscard } from '../../core/unit.ts';
import type { ExternalVerdict, ProgressEvent, RequestRecord, Verdict, VerdictLevel } from '../../core/wire.ts';
import {
  decodeState,
  encodeState,
  type JudgeInput,
  LEVELS,
  type LevelCode,
  newSessionState,
  onProgress,
  onRequest,
  onRollup,
  rebase,
  rollUpOf,
  type SessionState,
  verdictOf,
} from './judge.ts';
import { NP_TTL, npKeys } from './keys.ts';
import type { NoProgressKnobs } from './knobs.ts';
import { buildReport } from './report.ts';

// The service's shell around the pure judge: load a session's state from the store,
// judge, save it, roll the input up to the ancestors the session tree names. In-process
// (memory backend) the states are live objects and a known session costs no await;
// with Redis they are compact bytes written compare-and-set, so several instances
// judge the same session consistently.
//
// A recovery: auto_recover refuses the stuck session, aborts it and the tree's root,
// compacts the root with the incident report and records when (TreeState.recoveries).
// The plugin's compaction_done on the root, the first after that time, is the point the
// tree is judged afresh from (the kernel tells this detector of the mode's decision,
// onTree): the root and every session this detector flagged in the tree are rebased
// (judge/recover.ts) there, at once, so a stuck child that never
// sends another event still leaves its incident, and a loop that resumes afterwards is
// a new transition that the mode escalates (stage 2, then the hard stop). An external
// verdict (the watchdog) from before the recovery no longer holds the level. Another
// compaction (opencode's own, on a full context) is not a recovery: a loop that
// survives it is still the same loop.

export const TYPE = 'no-progress';

/** A verdict from outside the judge (the watchdog), kept beside the session. */
export interface StoredVerdict {
  level: VerdictLevel;
  reason: string;
  source: string;
  at: number;
  second_opinion?: { model: string; looping: boolean; reason: string };
}

const RANK: Record<VerdictLevel, number> = { ok: 0, stalling: 1, looping: 2 };
/** Shared empty result: most events change nothing, so nothing is allocated for them. */
const NONE: readonly Transition[] = Object.freeze([]);
/** Sessions whose decoded state is kept beside its bytes (shared store; about 3.4 KB each). */
const DECODED_MAX = 5_000;
/** Sparkline points kept per session (in-process). */
const SERIES = 30;

interface SessionRepo {
  get(id: string): Promise<SessionState | undefined>;
  mutate(id: string, fn: (s: SessionState) => void): Promise<{ s: SessionState; from: LevelCode }>;
  ids(): Promise<string[]>;
}

/**
 * Compact bytes per session in the store (memory or Redis), written compare-and-set
 * (retried on a conflict). In a unit of work (every input) a session's state is decoded
 * once, or handed over from the unit that wrote it last, and encoded once before the
 * unit commits (StoredStates).
 */
class StoreRepo implements SessionRepo {
  private readonly states: StoredStates<SessionState>;
  constructor(
    private readonly store: Store,
    private readonly knobs: () => NoProgressKnobs,
  ) {
    this.states = new StoredStates(store, { decode: decodeState, encode: encodeState }, DECODED_MAX);
  }
  get(id: string) {
    return this.states.read(npKeys.state(id));
  }
  mutate(id: string, fn: (s: SessionState) => void) {
    // Compare-and-set against the bytes this process last wrote: one round trip while
    // the session's events come here; another instance's write costs a retry.
    return this.states.change(npKeys.state(id), (cur) => {
      const s = cur ?? newSessionState(this.knobs());
      const from = s.level;
      fn(s);
      return { value: s, result: { s, from }, ttlMs: NP_TTL.state };
    });
  }
  async ids() {
    return (await this.store.keys(npKeys.statePrefix)).map((k) => k.slice(npKeys.statePrefix.length));
  }
}

export class NoProgressDetector implements Detector {
  readonly type = TYPE;
  private readonly repo: SessionRepo;
  private readonly externals = new Lru<string, StoredVerdict | null>(50_000);
  private readonly series = new Lru<string, { turns: number[]; tokens: number[] }>(10_000);
  /**
   * The agent's own loop detection, as its sensor reported it (`agent_loop` markers):
   * shown in the readout beside this judge's verdict, never judged (the calls the agent
   * refused never ran, so nothing is counted twice). In-process, bounded, as the series.
   */
  private readonly agentLoops = new Lru<string, { nudges: number; stopped: boolean; ids: string[] }>(10_000);

  constructor(
    private readonly store: Store,
    private readonly clock: Clock,
    private readonly tree: SessionTree,
    readonly knobs: () => NoProgressKnobs,
  ) {
    this.repo = new StoreRepo(store, knobs);
  }

  onProgress(ev: ProgressEvent, s: SessionInfo): readonly Transition[] | Promise<readonly Transition[]> {
    if (ev.kind === 'agent_loop') {
      this.noteAgentLoop(ev.session_id, ev.call_id, ev.stopped === true);
      return NONE;
    }
    // Kinds this judge does not know (another detector's signals) are not tool calls; of
    // the model steps only those that only talked (a text fingerprint) count, for the
    // monologue rule, so the others cost no store round trip.
    if (
      ev.kind !== 'tool' &&
      ev.kind !== 'continuation' &&
      ev.kind !== 'compaction_done' &&
      !(ev.kind === 'assistant' && ev.text_fingerprint !== undefined)
    )
      return NONE;
    const k = this.knobs();
    // (An inline function: run from source, a named one costs a defineProperty per event.)
    return this.step(
      ev.session_id,
      s,
      (st: SessionState) => {
        onProgress(st, ev, k);
        // A session without a router counts turns in tool calls: sample those.
        if (!st.sawRequest && ev.kind === 'tool') this.sample(ev.session_id, st, undefined);
      },
      { type: 'progress', event: ev },
      k,
    );
  }

  /**
   * A mode decided on the tree. The root's first compaction after the tree's latest
   * recovery started completes that recovery (also when reported after
   * compaction_timeout lifted the refusal); a Resume ends an episode by hand. Either way
   * the root and the sessions this detector flagged are judged afresh from here. Any
   * other compaction is not a recovery.
   */
  async onTree(ev: ModeEvent, tree: TreeState): Promise<readonly Transition[]> {
    const root = tree.root;
    if (ev.type === 'resume') return this.rebaseTree(tree, `ok: judged afresh after ${root} was resumed`);
    if (ev.type !== 'compaction_done' || ev.session_id !== root) return NONE;
    const started = Math.max(0, ...tree.recoveries);
    if (tree.stage === 3 || started === 0 || started <= ((await this.repo.get(root))?.recoveredAt ?? 0)) return NONE;
    return this.rebaseTree(tree, `ok: judged afresh from the recovery of ${root} (its compaction is done)`);
  }

  /** Rebases the root and every session this detector flagged in the tree (its incident is the root). */
  private async rebaseTree(tree: TreeState, why: string): Promise<readonly Transition[]> {
    const k = this.knobs();
    const root = tree.root;
    const at = this.clock.now();
    const ids = new Set([root, ...Object.keys(tree.flagged[root] ?? {})]);
    const out: Transition[] = [];
    for (const sid of ids) {
      if ((await this.repo.get(sid)) === undefined) continue;
      const before = await this.effective(sid);
      const { s: st } = await this.repo.mutate(sid, (x) => {
        rebase(x, k, at);
      });
      // An outside verdict judged what came before (another instance's cached copy is ignored by its time).
      if (await this.externalOf(sid)) {
        await this.store.del(npKeys.external(sid));
        this.externals.set(sid, null);
        onDiscard(() => this.externals.delete(sid));
      }
      const after = await this.effective(sid);
      if (before.level === after.level) continue;
      out.push({
        ...(await this.transition(sid, root, before.level, after.level, verdictOf(st, k), undefined)),
        reason: why.slice(0, 300),
      });
    }
    return out;
  }

  onRequest(rec: RequestRecord, s: SessionInfo): readonly Transition[] | Promise<readonly Transition[]> {
    const k = this.knobs();
    const apply = (st: SessionState) => {
      onRequest(st, rec, k);
      this.sample(rec.session_id, st, rec.prompt_tokens);
    };
    return this.step(rec.session_id, s, apply, { type: 'request', record: rec }, k);
  }

  /** Applies an input to its session and its roll-up to every ancestor; the transitions (with their report) are built only when a level changed. */
  private async step(
    id: string,
    s: SessionInfo,
    apply: (st: SessionState) => void,
    input: JudgeInput,
    k: NoProgressKnobs,
  ): Promise<readonly Transition[]> {
    const { s: st, from } = await this.repo.mutate(id, apply);
    let changed: [string, SessionState, LevelCode][] | undefined;
    if (st.level !== from) changed = [[id, st, from]];
    const r = s.ancestors.length ? rollUpOf(input, st) : null;
    if (r !== null) {
      for (const anc of s.ancestors) {
        const x = await this.repo.mutate(anc, (a) => onRollup(a, r, k));
        if (x.s.level === x.from) continue;
        if (changed) changed.push([anc, x.s, x.from]);
        else changed = [[anc, x.s, x.from]];
      }
    }
    return changed ? this.transitions(changed, s.root, k) : NONE;
  }

  /**
   * The effective verdict changes among sessions whose own level moved: a fresh
   * external verdict (the watchdog) that is worse holds the effective level.
   */
  private async transitions(
    changed: readonly [string, SessionState, LevelCode][],
    root: string,
    k: NoProgressKnobs,
  ): Promise<readonly Transition[]> {
    const out: Transition[] = [];
    for (const [id, st, from] of changed) {
      const ext = await this.externalOf(id, st.recoveredAt);
      const extRank = ext ? RANK[ext.level] : 0;
      const before = Math.max(from, extRank);
      const after = Math.max(st.level, extRank);
      if (before === after) continue;
      const own = verdictOf(st, k);
      out.push(
        await this.transition(id, root, LEVELS[before], LEVELS[after], own, extRank > st.level ? ext : undefined),
      );
    }
    return out;
  }

  private async transition(
    id: string,
    root: string,
    from: VerdictLevel,
    to: VerdictLevel,
    own: Verdict,
    ext: StoredVerdict | undefined,
  ): Promise<Transition> {
    return {
      detector: TYPE,
      subject: { kind: 'session', id },
      from,
      to,
      rule: ext ? 'external' : own.rule,
      reason: ext ? ext.reason.slice(0, 300) : own.reason,
      source: ext ? ext.source : TYPE,
      // The no-progress incident of a tree is named by its root.
      dedup_key: root,
      // The verdict is decided and written: a report that cannot be read now must not lose it.
      report: (await this.report(id).catch(() => undefined)) ?? own.reason,
    };
  }

  /** Records a verdict from outside (the watchdog); returns the effective change, if any. */
  async onVerdict(v: ExternalVerdict, s: SessionInfo): Promise<readonly Transition[]> {
    if (v.agent) await this.tree.nameAgent(v.session_id, v.agent);
    const id = v.session_id;
    const before = await this.effective(id);
    const ext: StoredVerdict = {
      level: v.level,
      reason: v.reason,
      source: v.source,
      at: this.clock.now(),
      ...(v.second_opinion ? { second_opinion: v.second_opinion } : {}),
    };
    // Judge with the new verdict before it is written: written last, so a failure in
    // between leaves nothing behind and the client's retry finds the change to make.
    const prev = this.externals.peek(id);
    this.externals.set(id, ext);
    // Put back if the input is not committed (its unit of work discarded).
    const restore = () => {
      if (prev === undefined) this.externals.delete(id);
      else this.externals.set(id, prev);
    };
    onDiscard(restore);
    let after: Awaited<ReturnType<NoProgressDetector['effective']>>;
    try {
      after = await this.effective(id);
      // A session known only from the watchdog still shows in the Sessions readout.
      if (!(await this.repo.get(id))) await this.repo.mutate(id, () => {});
      await this.store.set(npKeys.external(id), ext, NP_TTL.external);
    } catch (err) {
      restore();
      throw err;
    }
    if (before.level === after.level) return NONE;
    const st = (await this.repo.get(id))!;
    const own = verdictOf(st, this.knobs());
    const useExt = RANK[ext.level] > RANK[own.level];
    return [await this.transition(id, s.root, before.level, after.level, own, useExt ? ext : undefined)];
  }

  /** The latest external verdict on a session, while it counts. */
  externalVerdict(id: string): Promise<StoredVerdict | undefined> {
    return this.externalOf(id);
  }

  /**
   * A fresh external verdict (they count for NP_TTL.external unless renewed) given after
   * `since`, the session's latest recovery: one given before it judged what came before.
   * After a recovery, while the plugin reports the session, none counts: the watchdog
   * judges the whole history, the loop before the recovery included, and would turn a
   * recovered session back to looping (a stage) at its next tick.
   */
  private async externalOf(id: string, since = 0): Promise<StoredVerdict | undefined> {
    let e = this.externals.peek(id);
    if (e === undefined) {
      e = (await this.store.get<StoredVerdict>(npKeys.external(id))) ?? null;
      this.externals.set(id, e);
      // (inside a unit the read may be the unit's own write: forgotten if it is discarded)
      onDiscard(() => this.externals.delete(id));
    }
    if (!e || e.at < since || this.clock.now() - e.at >= NP_TTL.external) return undefined;
    return since > 0 && this.tree.pluginLive(await this.tree.meta(id)) ? undefined : e;
  }

  /** The session's effective verdict: its own, or a fresh external one when that is worse. */
  async effective(id: string): Promise<{ level: VerdictLevel; verdict: Verdict; source: string }> {
    const k = this.knobs();
    const s = (await this.repo.get(id)) ?? newSessionState(k);
    const own = verdictOf(s, k);
    const ext = await this.externalOf(id, s.recoveredAt);
    if (ext && RANK[ext.level] > RANK[own.level]) {
      return {
        level: ext.level,
        verdict: { ...own, level: ext.level, reason: ext.reason.slice(0, 300) },
        source: ext.source,
      };
    }
    return { level: own.level, verdict: own, source: TYPE };
  }

  async state(id: string): Promise<SessionState | undefined> {
    return this.repo.get(id);
  }

  async forget(ids: readonly string[]): Promise<void> {
    for (const id of ids) {
      this.externals.delete(id);
      this.series.delete(id);
      this.agentLoops.delete(id);
      await this.store.del(npKeys.state(id));
      await this.store.del(npKeys.external(id));
    }
  }

  sessions(): Promise<string[]> {
    return this.repo.ids();
  }

  async session(id: string): Promise<SessionReadout | undefined> {
    const s = await this.repo.get(id);
    if (!s) return undefined;
    const eff = await this.effective(id);
    const g = eff.verdict.signals;
    const ser = this.series.peek(id);
    const own = this.agentLoops.peek(id);
    return {
      level: eff.level,
      reason: eff.verdict.reason,
      dedup_key: (this.tree.infoNow(id) ?? (await this.tree.info(id))).root,
      source: eff.source,
      fields: {
        turns_since_landed: g.turns_since_landed,
        usd_since_landed: g.usd_since_landed,
        top_target: g.top_target,
        top_count: g.top_count,
        context_tokens: g.context_tokens,
        calls: g.calls,
        landed: g.landed,
        ...(own ? { agent_loop_nudges: own.nudges, agent_loop_stopped: own.stopped } : {}),
      },
      ...(ser ? { series: { turns_since_landed: [...ser.turns], prompt_tokens: [...ser.tokens] } } : {}),
      ...(s.lastTs ? { last_event_at: s.lastTs } : {}),
    };
  }

  /** An agent_loop marker: a nudge (counted once per id), or the run it stopped. */
  private noteAgentLoop(id: string, callId: string | undefined, stopped: boolean): void {
    // (in-process: counted once its input's unit commits, never for a discarded attempt)
    afterCommit(() => {
      let a = this.agentLoops.get(id);
      if (!a) {
        a = { nudges: 0, stopped: false, ids: [] };
        this.agentLoops.set(id, a);
      }
      if (callId !== undefined) {
        if (a.ids.includes(callId)) return;
        a.ids = [...a.ids, callId].slice(-32);
      }
      if (stopped) a.stopped = true;
      else a.nudges++;
    });
  }

  /**
   * One sparkline point per request record (turns since landed after it, its prompt
   * tokens), or per tool call for a session no router reports. In-process, bounded.
   */
  private sample(id: string, st: SessionState, tokens: number | undefined): void {
    const turns = st.sawRequest ? st.reqSince : st.toolsSince;
    // (in-process: kept once its input's unit commits, never for a discarded attempt)
    afterCommit(() => {
      let ser = this.series.get(id);
      if (!ser) {
        ser = { turns: [], tokens: [] };
        this.series.set(id, ser);
      }
      ser.turns.push(turns);
      if (ser.turns.length > SERIES) ser.turns.shift();
      if (tokens !== undefined) {
        ser.tokens.push(tokens);
        if (ser.tokens.length > SERIES) ser.tokens.shift();
      }
    });
  }

  /** The incident report for a session (deterministic, no content); led by a worse external verdict. */
  async report(id: string): Promise<string | undefined> {
    const s = await this.repo.get(id);
    if (!s) return undefined;
    const k = this.knobs();
    const info = this.tree.infoNow(id) ?? (await this.tree.info(id));
    const ext = await this.externalOf(id, s.recoveredAt);
    const worse = ext && RANK[ext.level] > s.level ? ext : undefined;
    return buildReport(
      {
        session_id: id,
        ...(info.root !== id ? { child_of: s.parent ?? info.parent ?? info.root } : {}),
        ...(worse
          ? {
              external: {
                level: worse.level as 'stalling' | 'looping',
                source: worse.source,
                agent: (await this.tree.meta(id))?.agent,
              },
            }
          : {}),
      },
      s,
      k,
    );
  }
}
