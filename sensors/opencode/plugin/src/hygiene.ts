import { Lru } from '../../../../core/lru.ts';
import type { ProgressEvent } from '../../../../core/wire.ts';
import { textFingerprint } from '../../../shared/normalize.ts';
import {
  assistantEvent,
  cleanAgent,
  imageBytes,
  isOutputPart,
  isVisiblePart,
  retryEvent,
  type SessionBulk,
} from '../../convert.ts';
import type { SessionBook } from './identity.ts';

// The session-hygiene facts of a live opencode (detectors/session-hygiene): one
// `assistant` event per finished model step, `retry` from session.status, `image` for
// image file parts (size only), `prompt` per user message (resume: the session was idle
// with history), and `session_stats` while a resume waits for its first token. Sizes,
// counts, times and codes only: text is looked at for being non-empty, never kept or
// sent. Everything is bounded; nothing here throws into a hook.
//
// The restore-stall signal: `updated_at` is the newest model-side OUTPUT seen for the
// session (a text, reasoning or tool part of an assistant message, or a finished
// step), not the creation of the step's assistant message: opencode creates that
// before it calls the provider, so it says nothing about a first token.

export interface HygieneSensorOptions {
  book: SessionBook;
  now?: () => number;
  /** Whether a session opened before this process has history (its messages other than `messageID`). */
  hasHistory?: (sessionID: string, messageID: string | undefined) => Promise<boolean | undefined>;
  /** The session's bulk from its stored messages; undefined when it could not be read. */
  measure?: (sessionID: string) => Promise<SessionBulk | undefined>;
  /** A pending resume's session_stats at most this often per session (ms). */
  statsMs?: number;
  maxSessions?: number;
}

interface Watch {
  /** Messages exist (known from this process, or looked up once). undefined: unknown. */
  history: boolean | undefined;
  /** The assistant step in progress (created, not finished): the session is busy. */
  running: string | null;
  /** The newest model-side output seen here (epoch ms). */
  output: number | null;
  /** A resume waiting for its first token. */
  resumeAt: number | null;
  bulk: (SessionBulk & { at: number }) | undefined;
  measuring: boolean;
  statsAt: number;
  /** The latest retry attempt reported. */
  attempt: number;
}

export class HygieneSensor {
  private readonly book: SessionBook;
  private readonly now: () => number;
  private readonly o: HygieneSensorOptions;
  private readonly statsMs: number;
  private readonly watches: Lru<string, Watch>;
  /** assistant message id -> its session (the roles of message ids seen). */
  private readonly assistants = new Lru<string, string>(5_000);
  /** assistant message ids with visible output. */
  private readonly visible = new Lru<string, true>(5_000);
  /**
   * The text of each running step's text parts (part id -> latest text) and whether it
   * called a tool: hashed into the step's text fingerprint when it finishes, then dropped.
   */
  private readonly texts = new Lru<string, { parts: Map<string, string>; tool: boolean }>(200);
  /** assistant message ids reported, image part ids reported. */
  private readonly reported = new Lru<string, true>(10_000);
  /** Events produced outside a hook call (a lookup or a measurement finished). */
  private readonly outbox: ProgressEvent[] = [];
  /** Shapes the converter rejected: counted, never thrown into a hook. */
  shapeErrors = 0;

  constructor(o: HygieneSensorOptions) {
    this.o = o;
    this.book = o.book;
    this.now = o.now ?? Date.now;
    this.statsMs = o.statsMs ?? 10_000;
    this.watches = new Lru(o.maxSessions ?? 1_000);
  }

  private watch(id: string): Watch {
    let w = this.watches.get(id);
    if (!w) {
      w = {
        history: undefined,
        running: null,
        output: null,
        resumeAt: null,
        bulk: undefined,
        measuring: false,
        statsAt: 0,
        attempt: 0,
      };
      this.watches.set(id, w);
    }
    return w;
  }

  private ctx(id: string) {
    const f = this.book.get(id);
    return {
      session_id: id,
      ...(f.parent ? { parent_session_id: f.parent } : {}),
      ...(f.agent ? { agent: cleanAgent(f.agent) } : {}),
    };
  }

  /** Model-side output at `at`: a pending resume got its first token. */
  private output(id: string, at: number): void {
    const w = this.watch(id);
    if (w.output === null || at > w.output) w.output = at;
    if (w.resumeAt !== null && at >= w.resumeAt) w.resumeAt = null;
  }

  /** Events produced since the last call outside a hook (lookups, measurements). */
  drain(): ProgressEvent[] {
    return this.outbox.splice(0);
  }

  /** Whether a resume is waiting for its first token (the plugin then polls and reports stats). */
  pending(): boolean {
    for (const [, w] of this.watches.entries()) if (w.resumeAt !== null) return true;
    return false;
  }

  /**
   * A bus event. Cheap checks first: the `event` hook sees every event, text deltas
   * included. Returns the hygiene events it caused (usually none).
   */
  busEvent(ev: unknown): ProgressEvent[] {
    const e = ev as { type?: unknown; properties?: Record<string, any> } | null;
    if (!e || typeof e.type !== 'string') return [];
    try {
      switch (e.type) {
        case 'message.part.delta':
          return this.delta(e.properties);
        case 'message.part.updated':
          return this.part(e.properties);
        case 'message.updated':
          return this.message(e.properties?.info);
        case 'session.status':
          return this.status(e.properties);
        case 'session.idle': {
          const id = e.properties?.sessionID;
          if (typeof id === 'string') {
            // the loop ended: nothing is pending any more (a stall verdict stays until the next prompt)
            const w = this.watch(id);
            w.running = null;
            w.resumeAt = null;
          }
          return [];
        }
        case 'session.created': {
          // a new session: no history yet (its first prompt is no resume)
          const id = e.properties?.info?.id ?? e.properties?.sessionID;
          if (typeof id === 'string' && this.watches.peek(id) === undefined) this.watch(id).history = false;
          return [];
        }
        default:
          return [];
      }
    } catch {
      this.shapeErrors++;
      return [];
    }
  }

  private delta(p: Record<string, any> | undefined): ProgressEvent[] {
    const mid = p?.messageID;
    if (typeof mid !== 'string' || typeof p?.delta !== 'string' || p.delta.length === 0) return [];
    const sid = this.assistants.peek(mid);
    if (sid === undefined) return [];
    if (p.field === 'text') {
      this.visible.set(mid, true);
      if (typeof p.partID === 'string') {
        const t = this.stepText(mid);
        t.parts.set(p.partID, (t.parts.get(p.partID) ?? '') + p.delta);
      }
    }
    this.output(sid, this.now());
    return [];
  }

  private stepText(mid: string): { parts: Map<string, string>; tool: boolean } {
    let t = this.texts.get(mid);
    if (t === undefined) {
      t = { parts: new Map(), tool: false };
      this.texts.set(mid, t);
    }
    return t;
  }

  private part(p: Record<string, any> | undefined): ProgressEvent[] {
    const part = p?.part;
    if (!part || typeof part !== 'object') return [];
    const sid = part.sessionID ?? p?.sessionID;
    if (typeof sid !== 'string') return [];
    const out: ProgressEvent[] = [];
    if (part.type === 'file') this.image(sid, part, part.id, out);
    if (part.type === 'tool' && Array.isArray(part.state?.attachments)) {
      part.state.attachments.forEach((a: unknown, i: number) => {
        this.image(sid, a, (a as { id?: unknown })?.id ?? `${part.id}:${i}`, out);
      });
    }
    const mid = part.messageID;
    if (typeof mid === 'string' && this.assistants.peek(mid) !== undefined) {
      // the text as opencode stores it (the converter hashes the same parts from history)
      if (part.type === 'tool') this.stepText(mid).tool = true;
      else if (
        part.type === 'text' &&
        part.synthetic !== true &&
        typeof part.text === 'string' &&
        typeof part.id === 'string'
      )
        this.stepText(mid).parts.set(part.id, part.text);
      if (isOutputPart(part)) {
        if (isVisiblePart(part)) this.visible.set(mid, true);
        this.output(sid, typeof p?.time === 'number' ? p.time : this.now());
      }
    }
    return out;
  }

  private image(sid: string, part: unknown, id: unknown, out: ProgressEvent[]): void {
    const bytes = imageBytes(part);
    if (bytes === undefined) return;
    const key = typeof id === 'string' && /^[\x21-\x7e]{1,128}$/.test(id) ? id : undefined;
    if (key !== undefined) {
      if (this.reported.has(`i:${key}`)) return;
      this.reported.set(`i:${key}`, true);
    }
    out.push({
      kind: 'image',
      ...this.ctx(sid),
      ...(key !== undefined ? { call_id: key } : {}),
      bytes: Math.min(bytes, 1_000_000_000_000),
      ts: this.now(),
    });
  }

  private message(info: any): ProgressEvent[] {
    if (info?.role !== 'assistant' || typeof info.id !== 'string' || typeof info.sessionID !== 'string') return [];
    const sid: string = info.sessionID;
    this.assistants.set(info.id, sid);
    const w = this.watch(sid);
    w.history = true;
    if (this.reported.has(`a:${info.id}`)) return [];
    const done = info.time?.completed !== undefined || info.error !== undefined;
    const ev = assistantEvent(info, this.ctx(sid), this.visible.has(info.id), done ? this.textOf(info) : undefined);
    if (ev === null) {
      w.running = info.id;
      return [];
    }
    if (w.running === info.id) w.running = null;
    this.reported.set(`a:${info.id}`, true);
    this.texts.delete(info.id);
    if (ev.visible_output || ev.output_tokens > 0) this.output(sid, ev.ts);
    // the step ended (an error, an abort): no first token is coming for this resume
    else if (w.resumeAt !== null && ev.ts >= w.resumeAt) w.resumeAt = null;
    return [ev];
  }

  /** A finished step's text fingerprint, as the converter's `textOnlyStep` takes it: no tool call, no error, not a summary. */
  private textOf(info: any): string | undefined {
    const t = this.texts.peek(info.id);
    if (t === undefined || t.tool || info.error || info.summary === true) return undefined;
    return textFingerprint([...t.parts.values()].join('\n'));
  }

  private status(p: Record<string, any> | undefined): ProgressEvent[] {
    const sid = p?.sessionID;
    const st = p?.status;
    if (typeof sid !== 'string' || !st) return [];
    const w = this.watch(sid);
    if (st.type === 'idle') w.running = null;
    if (st.type !== 'retry') return [];
    const ev = retryEvent(st, this.ctx(sid), this.now());
    if (ev === null) return [];
    // the same status is published more than once: one event per attempt
    if (ev.attempt === w.attempt) return [];
    w.attempt = ev.attempt;
    // a retry means the provider is being called: the restore is over
    w.resumeAt = null;
    return [ev];
  }

  /**
   * `chat.message`: a user message. Images among its parts, and (unless it is a
   * continuation turn, which the progress sensor reports as one) a `prompt`. A session
   * this process never saw is looked up once to learn whether it has history.
   */
  chatMessage(input: unknown, output: unknown, continuation: boolean): ProgressEvent[] | Promise<ProgressEvent[]> {
    const i = input as { sessionID?: unknown } | null;
    const o = output as { message?: { id?: unknown; time?: { created?: unknown } }; parts?: unknown } | null;
    if (!i || typeof i.sessionID !== 'string' || !o?.message) return [];
    const sid = i.sessionID;
    const out: ProgressEvent[] = [];
    try {
      if (Array.isArray(o.parts)) for (const p of o.parts) this.image(sid, p, (p as { id?: unknown })?.id, out);
      const w = this.watch(sid);
      const mid =
        typeof o.message.id === 'string' && /^[\x21-\x7e]{1,128}$/.test(o.message.id) ? o.message.id : undefined;
      if (continuation || (mid !== undefined && this.reported.has(`p:${mid}`))) return out;
      if (mid !== undefined) this.reported.set(`p:${mid}`, true);
      const created = o.message.time?.created;
      const ts = typeof created === 'number' && Number.isFinite(created) ? created : this.now();
      // idle: no assistant step of the session in progress
      const idle = w.running === null;
      const prompt = (history: boolean): ProgressEvent => {
        w.history = true;
        const resume = idle && history;
        if (resume) this.armResume(sid, w, ts);
        return { kind: 'prompt', ...this.ctx(sid), ...(mid ? { call_id: mid } : {}), resume, ts };
      };
      if (w.history !== undefined || !this.o.hasHistory) {
        out.push(prompt(w.history === true));
        return out;
      }
      // never seen here (opencode restarted since): ask once, bounded by the lookup's timeout
      return this.o
        .hasHistory(sid, mid)
        .catch(() => undefined)
        .then((h) => [...out, prompt(h === true)]);
    } catch {
      this.shapeErrors++;
      return out;
    }
  }

  private armResume(sid: string, w: Watch, ts: number): void {
    w.resumeAt = ts;
    w.statsAt = 0;
    if (w.measuring || !this.o.measure) return;
    w.measuring = true;
    void this.o
      .measure(sid)
      .catch(() => undefined)
      .then((b) => {
        w.measuring = false;
        if (b) {
          w.bulk = { ...b, at: this.now() };
          // output stored since the resume (read back from opencode) is a first token too
          if (b.updated_at !== null) this.output(sid, b.updated_at);
        }
        this.outbox.push(...this.due(this.now(), sid));
      });
  }

  /**
   * `session_stats` for each resume still waiting for its first token, at most every
   * statsMs per session: the reading the restore-stall rule needs (taken after the
   * resume, recent, the process alive, the newest model-side write). Only sessions whose
   * bulk was measured: no reading on a guess.
   */
  due(now = this.now(), only?: string): ProgressEvent[] {
    const out: ProgressEvent[] = [];
    for (const [sid, w] of [...this.watches.entries()]) {
      if (only !== undefined && sid !== only) continue;
      if (w.resumeAt === null || w.bulk === undefined || now - w.statsAt < this.statsMs) continue;
      w.statsAt = now;
      const updated = Math.max(w.output ?? Number.NEGATIVE_INFINITY, w.bulk.updated_at ?? Number.NEGATIVE_INFINITY);
      out.push({
        kind: 'session_stats',
        ...this.ctx(sid),
        messages: Math.min(w.bulk.messages, 100_000_000),
        stored_bytes: w.bulk.stored_bytes,
        ...(w.bulk.history_bytes !== null ? { history_bytes: w.bulk.history_bytes } : {}),
        ...(Number.isFinite(updated) ? { updated_at: updated } : {}),
        live: true,
        ts: now,
      });
    }
    return out;
  }
}
