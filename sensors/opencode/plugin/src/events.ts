import { Lru } from '../../../../core/lru.ts';
import type { ProgressEvent } from '../../../../core/wire.ts';
import {
  afterHookToEvent,
  fromBusEvent,
  isContinuationMessage,
  type LandedTracker,
  marker,
  newLandedTracker,
  type OcMessage,
  type SessionContext,
} from '../../convert.ts';
import type { SessionBook } from './identity.ts';

// Hook inputs -> progress events, through the ONE shared converter
// (sensors/opencode/convert.ts): nothing of a call's content leaves this file, only what
// the converter emits (tool, fingerprint, coarse target, exit, landed, and the result
// fingerprint of `tool.execute.after`'s `output.output`, the text the part stores, so a
// history reader computes the same one; sensors/shared/normalize.ts). This file
// adds what only a live plugin needs: per-session landed trackers, the session's
// agent and parent, and a dedupe by call id, because one call can reach the plugin
// twice (tool.execute.after, then its part ending in `error` after a rejected
// doom_loop permission).

export interface SensorOptions {
  book: SessionBook;
  /** The project directory (ctx.directory): paths under it become relative, as the watchdog computes them. */
  cwd?: string;
  now?: () => number;
  /** Call ids remembered for the dedupe. */
  maxCalls?: number;
  /** Sessions whose landed tracker is kept. */
  maxSessions?: number;
}

export class ProgressSensor {
  private readonly book: SessionBook;
  private readonly cwd?: string;
  private readonly now: () => number;
  private readonly seen: Lru<string, true>;
  private readonly trackers: Lru<string, LandedTracker>;
  private readonly usersSeen: Lru<string, true>;
  /** Shapes the converter rejected (a newer opencode?): counted, never thrown into a hook. */
  shapeErrors = 0;

  constructor(o: SensorOptions) {
    this.book = o.book;
    this.cwd = o.cwd;
    this.now = o.now ?? Date.now;
    this.seen = new Lru(o.maxCalls ?? 5000);
    this.trackers = new Lru(o.maxSessions ?? 1000);
    this.usersSeen = new Lru(o.maxSessions ?? 1000);
  }

  private ctx(sessionID: string): Omit<SessionContext, 'session_id'> {
    const f = this.book.get(sessionID);
    return {
      ...(f.parent ? { parent_session_id: f.parent } : {}),
      ...(f.agent ? { agent: f.agent } : {}),
      ...(this.cwd ? { cwd: this.cwd } : {}),
    };
  }

  private tracker(sessionID: string): LandedTracker {
    return this.trackers.get(sessionID) ?? newLandedTracker();
  }

  /** `tool.execute.after`: a tool that returned (bash exit from output.metadata.exit, in the converter). */
  afterTool(input: unknown, output: unknown): ProgressEvent | undefined {
    const i = input as { sessionID?: unknown; callID?: unknown } | null;
    if (!i || typeof i.sessionID !== 'string' || typeof i.callID !== 'string') return undefined;
    const key = `${i.sessionID}/${i.callID}`;
    if (this.seen.has(key)) return undefined;
    try {
      const r = afterHookToEvent(
        input,
        output,
        { ...this.ctx(i.sessionID), ts: this.now() },
        this.tracker(i.sessionID),
      );
      this.trackers.set(i.sessionID, r.tracker);
      this.seen.set(key, true);
      return r.event;
    } catch {
      this.shapeErrors++;
      return undefined;
    }
  }

  /**
   * A bus event (the `event` hook sees every one, about 1000 for a 30-call session), so
   * the cheap checks come first: only a tool part in `error` (tools that threw never
   * reach tool.execute.after), a synthetic text part (opencode's own "Continue..." after
   * a compaction) and `session.compacted` go on to the converter.
   */
  busEvent(ev: unknown): ProgressEvent | undefined {
    const e = ev as { type?: unknown; properties?: Record<string, any> } | null;
    if (!e) return undefined;
    let sessionID: unknown;
    let key: string | undefined;
    if (e.type === 'message.part.updated') {
      const part = e.properties?.part;
      if (!part) return undefined;
      sessionID = part.sessionID ?? e.properties?.sessionID;
      if (typeof sessionID !== 'string') return undefined;
      if (part.type === 'tool') {
        if (part.state?.status !== 'error' || typeof part.callID !== 'string') return undefined;
        key = `${sessionID}/${part.callID}`;
      } else if (part.type === 'text') {
        if (part.synthetic !== true || typeof part.messageID !== 'string') return undefined;
        key = `m:${part.messageID}`;
      } else {
        return undefined;
      }
      if (this.seen.has(key)) return undefined;
    } else if (e.type === 'session.compacted') {
      sessionID = e.properties?.sessionID;
      if (typeof sessionID !== 'string') return undefined;
    } else {
      return undefined;
    }
    try {
      const r = fromBusEvent(ev, { ...this.ctx(sessionID), ts: this.now() }, this.tracker(sessionID));
      if (!r) return undefined;
      if (r.event.kind === 'tool') this.trackers.set(sessionID, r.tracker);
      if (key) this.seen.set(key, true);
      return r.event;
    } catch {
      this.shapeErrors++;
      return undefined;
    }
  }

  /**
   * `chat.message`: a user message was created. A continuation turn (injected or a bare
   * "continue", as the converter defines it) becomes a marker; the session's first
   * message seen is its task and never one.
   */
  chatMessage(input: unknown, output: unknown): ProgressEvent | undefined {
    const i = input as { sessionID?: unknown } | null;
    const o = output as { message?: { id?: unknown; role?: unknown }; parts?: unknown } | null;
    if (!i || typeof i.sessionID !== 'string' || !o?.message || !Array.isArray(o.parts)) return undefined;
    const first = !this.usersSeen.has(i.sessionID);
    this.usersSeen.set(i.sessionID, true);
    const id = typeof o.message.id === 'string' ? o.message.id : undefined;
    if (id && this.seen.has(`m:${id}`)) return undefined;
    try {
      const msg = { info: o.message, parts: o.parts } as unknown as OcMessage;
      if (!isContinuationMessage(msg, first)) return undefined;
      if (id) this.seen.set(`m:${id}`, true);
      return marker('continuation', { session_id: i.sessionID, ...this.ctx(i.sessionID) }, this.now(), id);
    } catch {
      this.shapeErrors++;
      return undefined;
    }
  }
}
