import { timingSafeEqual } from 'node:crypto';
import { closeSync, mkdirSync, openSync, readFileSync, readSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { z } from 'zod/mini';
import { Lru } from '../../core/lru.ts';
import type { Checks, HookAnswer, HookBridge, HookIo } from '../../core/sensor.ts';
import {
  hookKey,
  MAX_KEYED_SESSIONS,
  SESSION_KEY_HEADER,
  sessionKey,
  sessionKeyHeader,
} from '../../core/session-key.ts';
import type { Directive, ProgressEvent } from '../../core/wire.ts';
import type { VigilTransport } from './client.ts';

// The resident half of every hook sensor: the process that hosts the local hook
// endpoint (the service itself, or `vigil relay` in front of a service elsewhere)
// takes one raw hook payload per call, hands it to the sensor's bridge, which reduces
// it in memory to progress events (fingerprints, coarse targets, exit codes, landed)
// and answers in its agent's format from the pending directives. The payload is never
// stored, logged, queued or forwarded: only the reduced events leave this file, through
// the same sensor routes and session keys a sensor on its own would use.
//
// Calls of one session run one at a time (an agent's parallel calls, and a bridge's
// state between calls, stay in order); a call that takes longer than `deadlineMs` is
// answered with no opinion and finishes in the background (fail open). A call Vigil
// never acts from (HookBridge.observes: a tool's result, a subagent's end) is answered
// no opinion at once and reduced behind the answer; its events go with the session's
// next answered call, in one request, or after `flushMs` when none comes: the agent
// waits only where Vigil may act (a tool about to run, a turn's end, a new prompt).

export interface HookHostOptions {
  /** The bridges by sensor name (the endpoint's paths). */
  bridges: ReadonlyMap<string, HookBridge>;
  /** How the reduced events reach Vigil. */
  transport: VigilTransport;
  /** The sensor secret: signs the session keys, and the hook key derives from it. */
  secret: Buffer;
  /** Where the bridges' small per-session states are kept across restarts. */
  stateDir: string;
  /** Sent as `vigil-<sensor>/<version>` in x-vigil-plugin. */
  version: string;
  clock?: () => number;
  /** Past this a call answers no opinion (ms). */
  deadlineMs?: number;
  /** Events of observe-only calls wait at most this long for the session's next answered call (ms). */
  flushMs?: number;
  /** Told which sensor's bridge failed, never with what (an error could quote the payload). */
  onError?: (sensor: string, kind: string) => void;
}

/** What the endpoint sends back: a status and a body ('' = no opinion). */
export interface HookReply {
  status: number;
  body: string;
  /** Why a call was refused (401, 404): for the endpoint's error body. */
  refused?: { code: string; message: string };
}

const NO_OPINION: HookReply = { status: 200, body: '' };
/** Sessions whose state stays in memory; the rest are read back from their file. */
const STATES = 5_000;
/** States are written to their files at most this often (ms). */
const SAVE_MS = 1_000;
/** Bytes of an agent's log read from its end (transcripts grow; only recent lines matter). */
const TAIL_BYTES = 256 * 1024;

/** The fields of a directive the answers read (core/wire.ts DirectiveSchema has the whole shape; the service sent it). */
const DirectiveIn = z.looseObject({
  id: z.string().check(z.minLength(1), z.maxLength(64)),
  type: z.enum(['toast', 'abort', 'compact', 'lift', 'fresh', 'block']),
  session_id: z.string().check(z.minLength(1), z.maxLength(128)),
  root_id: z.string().check(z.minLength(1), z.maxLength(128)),
  scope: z.optional(z.enum(['session', 'tree'])),
  reason: z.optional(z.string().check(z.maxLength(300))),
  report: z.optional(z.string().check(z.maxLength(16_384))),
});
const DirectivesOut = z.object({ directives: z.array(DirectiveIn).check(z.maxLength(1000)) });

/** The sessions events name: each one's, and a child's parent (both need their keys). */
const named = (evs: readonly ProgressEvent[]) =>
  evs.flatMap((e) => (e.parent_session_id ? [e.session_id, e.parent_session_id] : [e.session_id]));

/** The last `bytes` of a file (its first line may be cut: parsers skip it); '' when unreadable. */
export function tail(path: string | undefined, bytes = TAIL_BYTES): string {
  if (!path) return '';
  try {
    const size = statSync(path).size;
    const n = Math.min(size, bytes);
    const buf = Buffer.alloc(n);
    const fd = openSync(path, 'r');
    try {
      readSync(fd, buf, 0, n, size - n);
    } finally {
      closeSync(fd);
    }
    return buf.toString('utf8');
  } catch {
    return '';
  }
}

/** Where the last whole line read of a file ended, and the file's identity then. */
interface Cursor {
  offset: number;
  ino: number;
}

/**
 * The whole lines of `path` after `c` (its tail when there is no cursor, or the file was
 * replaced or shrank), and the cursor after them; undefined when unreadable.
 */
export function appendedLines(path: string, c: Cursor | undefined): { text: string; cursor: Cursor } | undefined {
  try {
    const st = statSync(path);
    const from = c && c.ino === st.ino && c.offset <= st.size ? c.offset : Math.max(0, st.size - TAIL_BYTES);
    const n = st.size - from;
    if (n <= 0) return { text: '', cursor: { offset: from, ino: st.ino } };
    const buf = Buffer.alloc(n);
    const fd = openSync(path, 'r');
    try {
      readSync(fd, buf, 0, n, from);
    } finally {
      closeSync(fd);
    }
    // up to the last newline: a line being written stays for the next read
    const end = buf.lastIndexOf(0x0a) + 1;
    return { text: buf.subarray(0, end).toString('utf8'), cursor: { offset: from + end, ino: st.ino } };
  } catch {
    return undefined;
  }
}

export class HookHost {
  /** The key a hook must send (HOOK_KEY_HEADER). */
  readonly key: string;
  private readonly states = new Lru<string, unknown>(STATES);
  /** Read positions in the agents' logs, per session and file (appended()). */
  private readonly cursors = new Lru<string, Cursor>(STATES);
  /** States saved since they were last written to their files, by file; and the timer that writes them. */
  private readonly unsaved = new Map<string, { dir: string; state: unknown }>();
  private saver: NodeJS.Timeout | undefined;
  /** Events of observe-only calls not sent yet, per session, and the timer that sends them. */
  private readonly queued = new Map<string, { sensor: string; events: ProgressEvent[]; timer: NodeJS.Timeout }>();
  private readonly chains = new Map<string, Promise<void>>();
  private readonly clock: () => number;

  constructor(private readonly o: HookHostOptions) {
    this.key = hookKey(o.secret);
    this.clock = o.clock ?? Date.now;
  }

  /** The sensors this host answers for. */
  sensors(): string[] {
    return [...this.o.bridges.keys()];
  }

  /**
   * One hook call: `body` is the agent's raw payload, `key` the hook key it sent.
   * Never throws; anything it does not understand, or Vigil not answering, is no opinion.
   */
  async handle(sensor: string, body: Buffer | string, key: string | undefined): Promise<HookReply> {
    const refused = this.refusal(sensor, key);
    return refused ?? this.reduce(sensor, body);
  }

  /** Why a call to `sensor` with hook key `key` is refused (404, 401), or undefined: it is taken. */
  refusal(sensor: string, key: string | undefined): HookReply | undefined {
    if (!this.o.bridges.has(sensor))
      return {
        status: 404,
        body: '',
        refused: { code: 'NOT_FOUND', message: `no hook sensor "${sensor}" (known: ${this.sensors().join(', ')})` },
      };
    if (key === undefined || !sameKey(key, this.key))
      return {
        status: 401,
        body: '',
        refused: {
          code: 'HOOK_KEY_MISMATCH',
          message: 'headers.x-vigil-hook-key: missing or not this user\'s hook key (run "vigil install <agent>" again)',
        },
      };
    return undefined;
  }

  /** A call `refusal` took: reduces the payload in memory and answers. */
  async reduce(sensor: string, body: Buffer | string): Promise<HookReply> {
    const bridge = this.o.bridges.get(sensor);
    if (!bridge) return NO_OPINION;
    let raw: unknown;
    try {
      raw = JSON.parse(typeof body === 'string' ? body : body.toString('utf8'));
    } catch {
      return NO_OPINION;
    }
    const session = bridge.sessionOf(raw);
    if (session === undefined) return NO_OPINION;
    const observing = bridge.observes?.(raw) === true;
    // set when the deadline answered for it: what Vigil sends back then is not carried out
    const call = { late: false };
    const work = this.serial(`${sensor}\u0000${session}`, async () => {
      try {
        const out = await bridge.handle(raw, this.io(sensor, session, observing, call));
        return out && !observing ? { status: 200, body: JSON.stringify(out) } : NO_OPINION;
      } catch (e) {
        this.o.onError?.(sensor, (e as Error)?.name ?? 'Error');
        return NO_OPINION;
      }
    });
    if (observing) return NO_OPINION;
    const deadline = this.o.deadlineMs ?? 3_000;
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<HookReply>((resolve) => {
      timer = setTimeout(() => {
        call.late = true;
        resolve(NO_OPINION);
      }, deadline);
    });
    try {
      return await Promise.race([work, late]);
    } finally {
      clearTimeout(timer);
    }
  }

  /** Runs `fn` after every earlier call of the same session. */
  private serial<T>(key: string, fn: () => Promise<T>): Promise<T> {
    const prev = this.chains.get(key) ?? Promise.resolve();
    const run = prev.then(fn);
    const done = run.then(
      () => {},
      () => {},
    );
    this.chains.set(key, done);
    void done.then(() => {
      if (this.chains.get(key) === done) this.chains.delete(key);
    });
    return run;
  }

  private stateFile(sensor: string, session: string): string {
    return join(this.o.stateDir, sensor, `${session.replace(/[^A-Za-z0-9_-]/g, '_')}.json`);
  }

  /** Waits for every call under way, then sends every session's queued events and writes the states (a clean stop, a test). */
  async close(): Promise<void> {
    await Promise.all([...this.chains.values()]);
    await Promise.all([...this.queued.keys()].map((memo) => this.serial(memo, () => this.flush(memo))));
    this.writeStates();
  }

  /** Writes the states changed since the last write, each to its file (a restart reads them back). */
  private writeStates(): void {
    clearTimeout(this.saver);
    this.saver = undefined;
    for (const [file, { dir, state }] of this.unsaved) {
      try {
        mkdirSync(dir, { recursive: true, mode: 0o700 });
        const tmp = `${file}.${process.pid}.tmp`;
        writeFileSync(tmp, JSON.stringify(state), { mode: 0o600 });
        renameSync(tmp, file);
      } catch {
        // kept in memory; lost at a restart, which costs a missed landed fact at worst
      }
    }
    this.unsaved.clear();
  }

  private async flush(memo: string): Promise<void> {
    const q = this.queued.get(memo);
    if (!q) return;
    this.queued.delete(memo);
    clearTimeout(q.timer);
    await this.o.transport.request('POST', '/progress', this.headers(q.sensor, named(q.events)), q.events);
  }

  /** The events queued for `memo` (taken out: the caller sends them). */
  private take(memo: string): ProgressEvent[] {
    const q = this.queued.get(memo);
    if (!q) return [];
    this.queued.delete(memo);
    clearTimeout(q.timer);
    return q.events;
  }

  private io(sensor: string, session: string, observing: boolean, call: { late: boolean }): HookIo {
    const file = this.stateFile(sensor, session);
    const memo = `${sensor}\u0000${session}`;
    return {
      now: this.clock(),
      load: <T>(schema: Checks<T>, fresh: () => T): T => {
        const kept = this.states.get(memo);
        if (kept !== undefined) return kept as T;
        let s: T | undefined;
        try {
          const r = schema.safeParse(JSON.parse(readFileSync(file, 'utf8')));
          if (r.success) s = r.data;
        } catch {
          // none yet, or unreadable: start afresh
        }
        const v = s ?? fresh();
        this.states.set(memo, v);
        return v;
      },
      save: (state: unknown) => {
        this.states.set(memo, state);
        // written to its file within a second (a write per call cost more than the call)
        this.unsaved.set(file, { dir: join(this.o.stateDir, sensor), state });
        if (!this.saver) {
          this.saver = setTimeout(() => this.writeStates(), SAVE_MS);
          this.saver.unref();
        }
      },
      tail: (path) => tail(path),
      appended: (path) => {
        if (!path) return '';
        const at = `${memo}\u0000${path}`;
        const r = appendedLines(path, this.cursors.get(at));
        if (!r) return '';
        this.cursors.set(at, r.cursor);
        return r.text;
      },
      exchange: async (events, ask, decide) => {
        if (!observing) return this.exchange(sensor, [...this.take(memo), ...events], ask, decide, call);
        if (!events.length) return undefined;
        const q = this.queued.get(memo);
        if (q) q.events.push(...events);
        else {
          const timer = setTimeout(() => void this.serial(memo, () => this.flush(memo)), this.o.flushMs ?? 250);
          timer.unref();
          this.queued.set(memo, { sensor, events: [...events], timer });
        }
        return undefined;
      },
    };
  }

  private headers(sensor: string, sessions: readonly string[]): Record<string, string> {
    const ids = [...new Set(sessions)].slice(0, MAX_KEYED_SESSIONS);
    const keys = sessionKeyHeader(ids.map((id) => [id, sessionKey(this.o.secret, id)] as const));
    return { 'x-vigil-plugin': `vigil-${sensor}/${this.o.version}`, ...(keys ? { [SESSION_KEY_HEADER]: keys } : {}) };
  }

  /**
   * Posts `events` (the /progress answer has the tree's pending directives) or, with
   * none, asks for the directives of `ask`'s tree; lets `decide` answer; acknowledges
   * what it carried out before posting its markers (a recovery ends an aborted root's
   * refusal on the ack, then lifts the rest on the marker). Undefined: no opinion.
   */
  private async exchange(
    sensor: string,
    events: readonly ProgressEvent[],
    ask: string,
    decide: (directives: Directive[]) => HookAnswer,
    call: { late: boolean },
  ): Promise<Record<string, unknown> | undefined> {
    const t = this.o.transport;
    const out = events.length
      ? await t.request('POST', '/progress', this.headers(sensor, named(events)), events)
      : await t.request('GET', `/directives?session=${encodeURIComponent(ask)}`, this.headers(sensor, [ask]));
    const d = DirectivesOut.safeParse(out);
    // Past the deadline the agent has gone on without an answer: the directives stay
    // pending (not acknowledged) for the session's next call.
    if (!d.success || call.late) return undefined;
    const a = decide(d.data.directives as Directive[]);
    if (a.acks.length)
      await t.request(
        'POST',
        '/directives/ack',
        this.headers(
          sensor,
          a.acks.map((x) => x.session_id),
        ),
        { acks: a.acks },
      );
    if (a.markers.length) await t.request('POST', '/progress', this.headers(sensor, named(a.markers)), a.markers);
    return a.output;
  }
}

/** Constant time for equal lengths (keys are fixed-length base64url). */
const sameKey = (a: string, b: string): boolean =>
  a.length === b.length && timingSafeEqual(Buffer.from(a), Buffer.from(b));
