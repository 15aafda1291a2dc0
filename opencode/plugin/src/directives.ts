import { Lru } from '../../../core/lru.ts';
import type { Directive } from '../../../core/wire.ts';
import { type Log, silent } from './client.ts';
import type { ModelRef } from './identity.ts';

// The hands: carry out what the judge decided (toast, abort, compact, lift, fresh), once per
// directive id however often it is delivered, in the order given, and acknowledge each
// one after it is done. A compaction is done when opencode publishes
// `session.compacted` for the session: with `auto` the summarize call itself only
// returns when the resumed loop ends.

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
  now?: () => number;
  log?: Log;
}

const TYPES = new Set(['toast', 'abort', 'compact', 'lift', 'fresh']);
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

type Outcome = 'done' | 'retry' | 'later';

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
          () => this.compacted(d.session_id),
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
        // The refusal lives in the service; nothing to do here but confirm.
        return 'done';
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
