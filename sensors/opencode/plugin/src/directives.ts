import { Lru } from '../../../../core/lru.ts';
import type { Directive } from '../../../../core/wire.ts';
import { type Log, silent } from './client.ts';
import type { ModelRef } from './identity.ts';

// The hands: carry out what the judge decided (toast, abort, compact, lift, fresh, block),
// once per directive id however often it is delivered, in the order given, and
// acknowledge each one after it is done. A compaction is done when opencode publishes
// `session.compacted` for the session: with `auto` the summarize call itself only
// returns when the resumed loop ends.
//
// A block (a refused or stopped tree) is held here: the plugin refuses the scope's tool
// calls (tool.execute.before throws with the block's message; opencode hands the model
// the error) and aborts the session, so a stop holds with no router in front of the
// model. It is acknowledged only when lifted: while held it stays pending in the
// service, so a restarted plugin blocks again. A tree's lift (a Resume) also nudges the
// tree's root to go on when this plugin stopped a session of it or saw it retry a
// refused request, and the root sits idle.

/** What the runner needs from opencode (src/opencode.ts implements it over ctx.client). */
export interface OpencodeActions {
  toast(t: { title?: string; message: string; variant: 'info' | 'success' | 'warning' | 'error' }): Promise<void>;
  abort(sessionID: string): Promise<void>;
  /** Resolves once the session is no longer busy, or after maxMs. */
  waitIdle(sessionID: string, maxMs: number): Promise<void>;
  /** POST /session/{id}/summarize; resolves when opencode answers (with auto: when the resumed loop ends). */
  summarize(sessionID: string, model: ModelRef, auto: boolean): Promise<void>;
  /** The model of the session's last assistant message. */
  lastModel(sessionID: string): Promise<ModelRef | undefined>;
  /** A new session, prompted with `brief` (its first message); resolves to its id. */
  fresh(title: string, brief: string): Promise<string>;
  /** What the session is doing: `idle` (absent from /session/status), `busy` or `retry`. */
  status(sessionID: string): Promise<'idle' | 'busy' | 'retry' | undefined>;
  /** POST /session/{id}/prompt_async: a user turn with `text`; the same session goes on. */
  prompt(sessionID: string, text: string): Promise<void>;
}

export interface RunnerOptions {
  actions: OpencodeActions;
  ack: (acks: { id: string; root_id: string; session_id: string }[]) => Promise<boolean>;
  /** The model the plugin saw the session use (chat.params), before asking opencode. */
  modelOf?: (sessionID: string) => ModelRef | undefined;
  /**
   * Whether this opencode instance has started a model request yet. Pitfall 16: an abort
   * during a fresh instance's first model resolution poisons the instance, so aborts wait.
   */
  modelSeen?: () => boolean;
  /** How long an abort waits for the first model request before it goes ahead anyway (ms). */
  abortDeferMs?: number;
  /** Attempts per directive before it is acknowledged as given up. */
  maxAttempts?: number;
  /** A session's tree root as far as the plugin knows (blocks of a tree cover its sessions). */
  rootOf?: (sessionID: string) => string;
  now?: () => number;
  log?: Log;
}

/** A block the plugin holds: the directive (acknowledged once lifted) and the error text the model sees. */
interface Block {
  directive: Directive;
  message: string;
}

/** How long one abort after a refused tool call covers the session (parallel calls, a retry). */
const STOP_MS = 5_000;
/** The error a blocked tool call returns: one paragraph, then the incident report (bounded). */
const REPORT_CHARS = 1_500;

function blockMessage(d: Directive): string {
  const tree = d.scope === 'tree';
  const why = (d.reason ?? 'refused by Vigil').replace(/[^\x20-\x7e]/g, '?');
  const head = tree
    ? `Vigil refused this tool call: ${why}. This session tree is stopped until a person resumes it; do not retry, stop here.`
    : `Vigil refused this tool call: ${why}. This session is being recovered; stop here.`;
  return d.report ? `${head}\n\n${d.report.slice(0, REPORT_CHARS)}` : head;
}

/** The turn a Resume sends a stopped root: marked as a continuation, so the judge counts it as one. */
export function nudgeText(reason: string | undefined): string {
  const why = (reason ?? 'resumed').replace(/[^\x20-\x7e]/g, '?').slice(0, 200);
  return `[Vigil CONTINUATION] The session tree was resumed (${why}). Continue the task where you left off.`;
}

const TYPES = new Set(['toast', 'abort', 'compact', 'lift', 'fresh', 'block']);
const VARIANTS = new Set(['info', 'success', 'warning', 'error']);

function valid(d: unknown): d is Directive {
  const x = d as Partial<Directive> | null;
  return (
    !!x &&
    typeof x.id === 'string' &&
    x.id.length > 0 &&
    x.id.length <= 64 &&
    typeof x.root_id === 'string' &&
    typeof x.session_id === 'string' &&
    typeof x.type === 'string'
  );
}

/** `held`: carried out, acknowledged later (a block, when lifted). */
type Outcome = 'done' | 'retry' | 'later' | 'held';

export class DirectiveRunner {
  /** Directive ids carried out (or given up): never acted on again. */
  private readonly done = new Lru<string, true>(2000);
  private readonly attempts = new Lru<string, number>(500);
  private readonly firstSeen = new Lru<string, number>(500);
  /** fresh directives whose toast was shown (a retried open does not toast again). */
  private readonly toasted = new Lru<string, true>(500);
  private readonly queued = new Set<string>();
  /** Incident reports waiting for their session's compaction prompt. */
  private readonly reports = new Map<string, string>();
  /** compact directives waiting for `session.compacted`, by session. */
  private readonly compacting = new Map<string, Directive>();
  /** Acks the service has not taken yet. */
  private unacked: { id: string; root_id: string; session_id: string }[] = [];
  /** Blocks held: a whole tree's, by root; one session's, by session. */
  private readonly treeBlocks = new Map<string, Block>();
  private readonly sessionBlocks = new Map<string, Block>();
  /** Per blocked root: sessions this plugin stopped, or saw retry a refused request, while blocked. */
  private readonly stopped = new Map<string, Set<string>>();
  /** When this plugin last aborted a session after a refused tool call. */
  private readonly stoppedAt = new Lru<string, number>(500);
  private chain: Promise<void> = Promise.resolve();
  private readonly o: RunnerOptions;
  private readonly now: () => number;
  private readonly log: Log;

  constructor(o: RunnerOptions) {
    this.o = o;
    this.now = o.now ?? Date.now;
    this.log = o.log ?? silent;
  }

  /** Directives from a /progress answer or a poll. Resolves when the ones queued by this call ran. */
  offer(list: readonly unknown[]): Promise<void> {
    for (const d of list) {
      if (!valid(d) || this.done.has(d.id) || this.queued.has(d.id)) continue;
      if (!TYPES.has(d.type)) {
        // A newer service: leave it pending for a plugin that knows it.
        this.done.set(d.id, true);
        this.log('warn', 'unknown directive type', { type: String(d.type).slice(0, 32) });
        continue;
      }
      if (!this.firstSeen.has(d.id)) this.firstSeen.set(d.id, this.now());
      this.queued.add(d.id);
      this.chain = this.chain.then(() => this.run(d)).finally(() => this.queued.delete(d.id));
    }
    return this.chain.then(() => this.retryAcks());
  }

  private async run(d: Directive): Promise<void> {
    let outcome: Outcome;
    try {
      outcome = await this.execute(d);
    } catch (err) {
      this.log('warn', 'directive failed', { type: d.type, id: d.id, err: String(err).slice(0, 200) });
      outcome = 'retry';
    }
    this.log('debug', 'directive', { type: d.type, id: d.id, session: d.session_id, outcome });
    if (outcome === 'later') return;
    if (outcome === 'held') {
      this.done.set(d.id, true);
      return;
    }
    if (outcome === 'retry') {
      const n = (this.attempts.get(d.id) ?? 0) + 1;
      this.attempts.set(d.id, n);
      if (n < (this.o.maxAttempts ?? 3)) return; // the next delivery tries again
      this.log('warn', 'directive given up', { type: d.type, id: d.id, attempts: n });
    }
    this.done.set(d.id, true);
    await this.acknowledge(d);
  }

  private async execute(d: Directive): Promise<Outcome> {
    switch (d.type) {
      case 'toast': {
        const t = d.toast;
        await this.o.actions.toast({
          title: t?.title ?? 'Vigil',
          message: t?.message ?? d.reason ?? 'Vigil',
          variant: t && VARIANTS.has(t.variant) ? t.variant : 'warning',
        });
        return 'done';
      }
      case 'abort': {
        const waited = this.now() - (this.firstSeen.get(d.id) ?? this.now());
        if (this.o.modelSeen && !this.o.modelSeen() && waited < (this.o.abortDeferMs ?? 60_000)) return 'later';
        await this.o.actions.abort(d.session_id);
        this.noteStopped(d.session_id);
        return 'done';
      }
      case 'compact': {
        const model = this.o.modelOf?.(d.session_id) ?? (await this.o.actions.lastModel(d.session_id));
        if (!model) throw new Error('no model known for the session');
        // After an abort opencode marks the session idle a moment later: summarize then.
        await this.o.actions.waitIdle(d.session_id, 10_000);
        if (d.report) this.reports.set(d.session_id, d.report);
        this.compacting.set(d.session_id, d);
        this.done.set(d.id, true);
        // Not awaited: with auto the call returns only when the resumed loop ends. Done is
        // `session.compacted` (compacted()); a failure before that frees it for a retry.
        this.o.actions.summarize(d.session_id, model, d.auto_continue === true).then(
          // With auto the call returns when the resumed loop ends: at the next stage's
          // abort, when that stage's compaction may already be waiting. Only its own.
          () => {
            if (this.compacting.get(d.session_id)?.id === d.id) this.compacted(d.session_id);
          },
          (err) => {
            if (this.compacting.get(d.session_id)?.id !== d.id) return;
            this.compacting.delete(d.session_id);
            this.reports.delete(d.session_id);
            const n = (this.attempts.get(d.id) ?? 0) + 1;
            this.attempts.set(d.id, n);
            this.log('warn', 'compaction failed', { id: d.id, attempts: n, err: String(err).slice(0, 200) });
            if (n < (this.o.maxAttempts ?? 3)) this.done.delete(d.id);
            else void this.acknowledge(d);
          },
        );
        return 'later';
      }
      case 'lift':
        await this.lift(d);
        return 'done';
      case 'block': {
        const b = { directive: d, message: blockMessage(d) };
        if (d.scope === 'tree') this.treeBlocks.set(d.session_id, b);
        else this.sessionBlocks.set(d.session_id, b);
        return 'held';
      }
      case 'fresh': {
        // Session hygiene: the session is retired or stalled on restore. Show the brief;
        // with `open_session` (hygiene.auto_fresh) open the fresh session with it.
        const brief = d.report ?? '';
        if (!this.toasted.has(d.id)) {
          await this.o.actions.toast({
            title: d.toast?.title ?? 'Vigil: start a fresh session',
            message: [d.toast?.message ?? d.reason ?? '', brief].filter(Boolean).join('\n\n').slice(0, 4_000),
            variant: d.toast && VARIANTS.has(d.toast.variant) ? d.toast.variant : 'warning',
          });
          this.toasted.set(d.id, true);
        }
        if (d.open_session === true && brief) {
          const id = await this.o.actions.fresh('Fresh session (Vigil)', brief);
          this.log('debug', 'fresh session opened', { from: d.session_id, session: id });
        }
        return 'done';
      }
    }
    return 'done';
  }

  private rootOf(sessionID: string): string {
    return this.o.rootOf?.(sessionID) ?? sessionID;
  }

  /**
   * The error a tool call of this session gets, when its tree or the session is blocked
   * (tool.execute.before throws it). Synchronous: it runs before every tool call.
   */
  blockedCall(sessionID: string): string | undefined {
    return (this.treeBlocks.get(this.rootOf(sessionID)) ?? this.sessionBlocks.get(sessionID))?.message;
  }

  /** Roots whose blocks are held: polled for their lift even while nothing else happens. */
  blockedRoots(): string[] {
    return [...new Set([...this.treeBlocks.keys(), ...[...this.sessionBlocks.keys()].map((s) => this.rootOf(s))])];
  }

  /**
   * A tool call was refused: the session is aborted (once per STOP_MS), so it does not
   * ask the model again and again only to be refused. Not awaited by the hook.
   */
  stopAfterRefusal(sessionID: string): void {
    const at = this.stoppedAt.get(sessionID);
    if (at !== undefined && this.now() - at < STOP_MS) return;
    this.stoppedAt.set(sessionID, this.now());
    this.noteStopped(sessionID);
    setTimeout(() => {
      this.o.actions
        .abort(sessionID)
        .then(() => this.log('debug', 'stopped after a refused tool call', { session: sessionID }))
        .catch((err) => this.log('warn', 'abort after a refused tool call failed', { err: String(err).slice(0, 200) }));
    }, 0);
  }

  /** opencode retries a model request of this session (a router refused it, or the provider failed). */
  retrying(sessionID: string): void {
    if (this.blockedCall(sessionID) !== undefined) this.noteStopped(sessionID);
  }

  /** Remembers a session stopped (or refused) while its tree is blocked: a Resume nudges its root. */
  private noteStopped(sessionID: string): void {
    const root = this.rootOf(sessionID);
    if (!this.treeBlocks.has(root) && !this.sessionBlocks.has(sessionID)) return;
    const set = this.stopped.get(root) ?? new Set<string>();
    set.add(sessionID);
    this.stopped.set(root, set);
  }

  /**
   * A lift: the scope's blocks end (and are acknowledged). A tree's lift is a Resume: when
   * this plugin stopped a session of the tree (or saw it retry a refused request) and
   * the root is idle, the root gets a continuation turn; one still in retry comes back
   * by itself (the stop's Retry-After is short), a busy one is going already.
   */
  private async lift(d: Directive): Promise<void> {
    const held: Block[] = [];
    if (d.scope === 'tree') {
      const root = d.session_id;
      const tree = this.treeBlocks.get(root);
      if (tree) held.push(tree);
      this.treeBlocks.delete(root);
      for (const [s, b] of [...this.sessionBlocks]) {
        if (this.rootOf(s) !== root) continue;
        held.push(b);
        this.sessionBlocks.delete(s);
      }
      const stopped = this.stopped.get(root);
      this.stopped.delete(root);
      if (stopped?.size) {
        const st = await this.o.actions.status(root);
        if (st === 'idle') {
          await this.o.actions.prompt(root, nudgeText(d.reason));
          this.log('debug', 'nudged after a resume', { session: root, stopped: stopped.size });
        } else {
          this.log('debug', 'not nudged after a resume', { session: root, status: st ?? 'unknown' });
        }
      }
    } else {
      const b = this.sessionBlocks.get(d.session_id);
      if (b) held.push(b);
      this.sessionBlocks.delete(d.session_id);
      const root = this.rootOf(d.session_id);
      if (!this.treeBlocks.has(root)) this.stopped.get(root)?.delete(d.session_id);
    }
    for (const b of held) await this.acknowledge(b.directive);
  }

  /** `experimental.session.compacting`: append the incident report to this session's compaction prompt. */
  compactionContext(sessionID: string, output: { context?: unknown }): void {
    const r = this.reports.get(sessionID);
    if (r && Array.isArray(output.context) && !output.context.includes(r)) {
      output.context.push(r);
      this.log('debug', 'report appended to the compaction prompt', { session: sessionID, chars: r.length });
    }
  }

  /** `session.compacted` (or the summarize call returned): the compact directive is done. */
  compacted(sessionID: string): void {
    this.reports.delete(sessionID);
    const d = this.compacting.get(sessionID);
    if (!d) return;
    this.log('debug', 'compacted', { id: d.id, session: sessionID });
    this.compacting.delete(sessionID);
    void this.acknowledge(d);
  }

  private async acknowledge(d: Directive): Promise<void> {
    // An acknowledgement names the session the directive was for: the service checks it.
    const a = { id: d.id, root_id: d.root_id, session_id: d.session_id };
    const ok = await this.o.ack([a]).catch(() => false);
    this.log('debug', 'ack', { type: d.type, id: d.id, ok });
    if (!ok) this.unacked.push(a);
  }

  private async retryAcks(): Promise<void> {
    if (!this.unacked.length) return;
    const batch = this.unacked.splice(0, 100);
    if (!(await this.o.ack(batch).catch(() => false))) this.unacked.unshift(...batch);
    if (this.unacked.length > 1000) this.unacked.splice(0, this.unacked.length - 1000);
  }

  /** Wait for everything queued so far (tests, dispose). */
  idle(): Promise<void> {
    return this.chain;
  }
}
