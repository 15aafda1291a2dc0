import { Lru } from '../../../../core/lru.ts';
import type { Directive, ProgressEvent } from '../../../../core/wire.ts';
import { type Log, silent, VigilClient, type VigilClientOptions } from './client.ts';
import { DirectiveRunner, type OpencodeActions } from './directives.ts';
import { ProgressSensor } from './events.ts';
import { HygieneSensor, type HygieneSensorOptions } from './hygiene.ts';
import { identityHeaders, type SessionBook, sessionInfoOf } from './identity.ts';

// What each hook does, as plain methods: src/plugin.ts only maps opencode's hook names
// onto these (a v2 port of opencode changes hook registration, not this). Nothing here
// throws into opencode or waits on the service: events go to the client's buffer,
// directives run on their own chain.

export interface CoreOptions {
  book: SessionBook;
  actions: OpencodeActions;
  /** The client's options (url, pluginId, token, onTrouble, ...); the core adds its log and directive handler. */
  vigil: Omit<VigilClientOptions, 'log' | 'onDirectives'>;
  cwd?: string;
  /** Poll GET /directives this often while sessions are active (ms). */
  pollMs?: number;
  /** A session counts as active this long after its last hook call (ms). */
  activeMs?: number;
  /** Session hygiene: history lookups and bulk reads through opencode, the stats cadence. */
  hygiene?: Pick<HygieneSensorOptions, 'hasHistory' | 'measure' | 'statsMs'>;
  now?: () => number;
  log?: Log;
}

export class PluginCore {
  readonly book: SessionBook;
  readonly sensor: ProgressSensor;
  readonly hygiene: HygieneSensor;
  readonly client: VigilClient;
  readonly runner: DirectiveRunner;
  readonly pluginId: string;
  /** Pitfall 16: no abort before this instance's first model request. */
  modelSeen = false;
  private readonly active = new Lru<string, number>(500);
  private pollTimer: ReturnType<typeof setInterval> | undefined;
  private polling = false;
  private readonly pollMs: number;
  private readonly activeMs: number;
  private readonly now: () => number;
  private readonly log: Log;

  constructor(o: CoreOptions) {
    this.now = o.now ?? Date.now;
    this.log = o.log ?? silent;
    this.pollMs = o.pollMs ?? 3_000;
    this.activeMs = o.activeMs ?? 10 * 60_000;
    this.pluginId = o.vigil.pluginId;
    this.book = o.book;
    this.sensor = new ProgressSensor({ book: o.book, cwd: o.cwd, now: this.now });
    this.hygiene = new HygieneSensor({ book: o.book, now: this.now, ...o.hygiene });
    this.runner = new DirectiveRunner({
      actions: o.actions,
      ack: (acks) => this.client.ack(acks),
      modelOf: (id) => this.book.get(id).model,
      modelSeen: () => this.modelSeen,
      rootOf: (id) => this.book.rootOf(id),
      now: this.now,
      log: this.log,
    });
    this.client = new VigilClient({
      ...o.vigil,
      rootOf: (id) => this.book.rootOf(id),
      log: this.log,
      onDirectives: (ds) => void this.runner.offer(ds),
    });
  }

  private emit(ev: ProgressEvent | undefined): void {
    if (ev) this.client.send(ev);
  }

  private emitAll(evs: readonly ProgressEvent[]): void {
    for (const ev of evs) this.client.send(ev);
  }

  /** Mark a session active: its tree's directives get polled. */
  private touch(sessionID: unknown): void {
    if (typeof sessionID !== 'string') return;
    this.active.set(sessionID, this.now());
    if (!this.pollTimer && this.pollMs > 0) {
      this.pollTimer = setInterval(() => void this.poll(), this.pollMs);
      (this.pollTimer as { unref?: () => void }).unref?.();
    }
  }

  /** `event`: every bus event. Cheap checks first (see ProgressSensor.busEvent). */
  onEvent(ev: unknown): void {
    const e = ev as { type?: unknown; properties?: { sessionID?: unknown } } | null;
    if (!e || typeof e.type !== 'string') return;
    if (e.type === 'session.created' || e.type === 'session.updated') {
      this.book.learnSession(sessionInfoOf(e));
      if (e.type === 'session.created') this.hygiene.busEvent(e);
      return;
    }
    const facts = this.hygiene.busEvent(e);
    if (facts.length) {
      this.touch(facts[0].session_id);
      this.emitAll(facts);
    }
    const out = this.sensor.busEvent(e);
    if (out) {
      this.touch(out.session_id);
      this.emit(out);
    }
    if (e.type === 'session.compacted' && typeof e.properties?.sessionID === 'string') {
      this.runner.compacted(e.properties.sessionID);
    }
    if (e.type === 'session.status' && typeof e.properties?.sessionID === 'string') {
      const st = (e.properties as { status?: { type?: unknown } }).status;
      if (st?.type === 'retry') this.runner.retrying(e.properties.sessionID);
    }
  }

  /**
   * `tool.execute.before`: the error a refused or stopped tree's tool call must fail with
   * (plugin.ts throws it, so opencode refuses the call and the model sees why), or
   * undefined to let it run. The session is aborted after it (it would only ask the model
   * again). A Map lookup: every tool call passes here.
   */
  onToolBefore(input: unknown): string | undefined {
    const id = (input as { sessionID?: unknown } | null)?.sessionID;
    if (typeof id !== 'string') return undefined;
    const refused = this.runner.blockedCall(id);
    if (refused === undefined) return undefined;
    this.touch(id);
    this.runner.stopAfterRefusal(id);
    this.log('debug', 'tool call refused', {
      session: id,
      tool: String((input as { tool?: unknown }).tool).slice(0, 64),
    });
    return refused;
  }

  /** `tool.execute.after`: a tool that returned. */
  onToolAfter(input: unknown, output: unknown): void {
    this.touch((input as { sessionID?: unknown } | null)?.sessionID);
    this.emit(this.sensor.afterTool(input, output));
  }

  /** `chat.message`: a user message (task, command, subagent prompt, or a continuation turn). */
  onChatMessage(input: unknown, output: unknown): void {
    const i = input as { sessionID?: unknown; agent?: unknown } | null;
    if (!i || typeof i.sessionID !== 'string') return;
    this.touch(i.sessionID);
    const agent = i.agent ?? (output as { message?: { agent?: unknown } } | null)?.message?.agent;
    this.book.noteAgent(i.sessionID, agent);
    const marker = this.sensor.chatMessage(input, output);
    this.emit(marker);
    // a continuation turn is reported as the marker; anything else is a prompt
    const facts = this.hygiene.chatMessage(input, output, marker?.kind === 'continuation');
    if (Array.isArray(facts)) this.emitAll(facts);
    else void facts.then((f) => this.emitAll(f));
  }

  /** `chat.params`: a model request is about to start (also for a compaction). */
  onChatParams(input: unknown): void {
    const i = input as { sessionID?: unknown; agent?: unknown; model?: { id?: unknown; providerID?: unknown } } | null;
    if (!i || typeof i.sessionID !== 'string') return;
    this.modelSeen = true;
    this.touch(i.sessionID);
    // The compaction request runs as agent "compaction": not the session's own agent.
    if (i.agent !== 'compaction') this.book.noteAgent(i.sessionID, i.agent);
    const m = i.model;
    if (m && typeof m.id === 'string' && typeof m.providerID === 'string') {
      this.book.noteModel(i.sessionID, { providerID: m.providerID, modelID: m.id });
    }
  }

  /** `chat.headers`: the identity headers for the router. Waits at most the book's lookup timeout. */
  async onChatHeaders(input: unknown, output: unknown): Promise<void> {
    const i = input as { sessionID?: unknown; agent?: unknown } | null;
    const o = output as { headers?: Record<string, string> } | null;
    if (!i || typeof i.sessionID !== 'string' || !o?.headers) return;
    const parent = await this.book.resolveParent(i.sessionID);
    const agent = i.agent === 'compaction' ? (this.book.get(i.sessionID).agent ?? i.agent) : i.agent;
    Object.assign(o.headers, identityHeaders(i.sessionID, agent, parent, this.pluginId));
  }

  /** `experimental.session.compacting`: the incident report joins the compaction prompt. */
  onCompacting(input: unknown, output: unknown): void {
    const id = (input as { sessionID?: unknown } | null)?.sessionID;
    if (typeof id === 'string' && output && typeof output === 'object') {
      this.runner.compactionContext(id, output as { context?: unknown });
    }
  }

  /** Session hygiene: facts produced outside a hook, and the stats of resumes waiting for a first token. */
  hygieneTick(now = this.now()): void {
    this.emitAll(this.hygiene.drain());
    this.emitAll(this.hygiene.due(now));
  }

  /** One poll: GET /directives for each active tree (a refused session sends no more events). */
  async poll(): Promise<void> {
    if (this.polling) return;
    this.polling = true;
    try {
      const now = this.now();
      this.hygieneTick(now);
      const active = new Set<string>();
      for (const [id, at] of [...this.active.entries()]) {
        if (now - at > this.activeMs) this.active.delete(id);
        else active.add(this.book.rootOf(id));
      }
      // Blocked trees are polled however quiet they are: their lift (a Resume) must arrive.
      const roots = new Set([...this.runner.blockedRoots(), ...[...active].slice(-20)]);
      if (!roots.size) {
        clearInterval(this.pollTimer);
        this.pollTimer = undefined;
        return;
      }
      const found: Directive[] = [];
      for (const root of roots) {
        const ds = await this.client.directives(root);
        if (ds === undefined) break; // the service is down: try again next tick
        found.push(...ds);
      }
      await this.runner.offer(found);
    } catch (err) {
      this.log('warn', 'directive poll failed', { err: String(err).slice(0, 200) });
    } finally {
      this.polling = false;
    }
  }

  async dispose(): Promise<void> {
    clearInterval(this.pollTimer);
    this.pollTimer = undefined;
    await this.client.close();
  }
}
