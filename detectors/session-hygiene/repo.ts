import { StoredStates } from '../../core/decoded.ts';
import type { Store } from '../../core/store/store.ts';
import { decodeHygiene, encodeHygiene, resumePendingIn } from './codec.ts';
import { R_RESUMES } from './judge/state.ts';
import {
  type EnvelopeBook,
  envelopeOf,
  type HygieneChange,
  type HygieneState,
  type ModelEnvelope,
  newEnvelopeBook,
  newHygieneState,
} from './judge.ts';
import { HY_TTL, hyKeys, INDEX_MAX } from './keys.ts';
import type { HygieneOptions } from './options.ts';

// Where the session-hygiene states and envelopes live. In-process (memory backend) they
// are live objects and a known session costs no await; with Redis every state (deflated
// JSON, codec.ts) and every model's envelope (JSON) is written compare-and-set (the judge's
// step may run again on a fresh copy when another instance wrote in between), so
// several instances judge one session consistently.

/** A judge step on one session's state: mutates it in place, returns its changes. */
export type Step = (s: HygieneState) => readonly HygieneChange[];
/** A learning step on an envelope book (it holds at least the call's model): true when it changed. */
export type Learn = (book: EnvelopeBook) => boolean;

const NO_CHANGES: readonly HygieneChange[] = Object.freeze([]);

/** Whether time alone may change this session: a resume waiting for its first token, or a resume-count finding to expire. */
export const isTimed = (s: HygieneState | undefined): boolean =>
  s !== undefined && (s.resume_at !== null || s.findings[R_RESUMES] !== null);

const isFlagged = (s: HygieneState | undefined): boolean => s !== undefined && s.level !== 'ok';

export interface HygieneRepo {
  get(id: string): Promise<HygieneState | undefined>;
  /** Whether a resume waits for its first sign of life (what a tool call needs to know). */
  resumePending(id: string): Promise<boolean>;
  /** Runs `step` on the state (a new one when absent and `create`); undefined when absent and not created. */
  mutate(id: string, step: Step, create: boolean): Promise<readonly HygieneChange[] | undefined>;
  ids(): Promise<string[]>;
  envelope(model: string): Promise<ModelEnvelope | null>;
  learn(model: string, fn: Learn): Promise<void>;
  envelopes(): Promise<EnvelopeBook>;
  /** Sessions a tick visits. */
  timed(): Promise<string[]>;
  /** Drops ids from the timed index (their state is gone). */
  untime(ids: readonly string[]): Promise<void>;
  /** Sessions whose level is not ok (bounded). */
  flagged(): Promise<string[]>;
}

/** In-process: live objects, least recently updated dropped past max_sessions. */
export class LiveRepo implements HygieneRepo {
  /** Insertion order is recency: a touched session is re-inserted. */
  private readonly states = new Map<string, HygieneState>();
  readonly book: EnvelopeBook = newEnvelopeBook();
  private readonly timedSet = new Set<string>();

  constructor(private readonly knobs: () => HygieneOptions) {}

  peek(id: string): HygieneState | undefined {
    return this.states.get(id);
  }

  async resumePending(id: string) {
    return (this.states.get(id)?.resume_at ?? null) !== null;
  }

  async get(id: string) {
    return this.states.get(id);
  }

  /** Synchronous: the in-process hot path needs no await. */
  mutateNow(id: string, step: Step, create: boolean): readonly HygieneChange[] | undefined {
    let s = this.states.get(id);
    if (s === undefined) {
      if (!create) return undefined;
      s = newHygieneState(id);
      const max = this.knobs().max_sessions;
      while (this.states.size >= max) {
        const oldest = this.states.keys().next().value as string;
        this.states.delete(oldest);
        this.timedSet.delete(oldest);
      }
    } else this.states.delete(id);
    this.states.set(id, s);
    const changes = step(s);
    if (isTimed(s)) this.timedSet.add(id);
    else this.timedSet.delete(id);
    return changes;
  }

  async mutate(id: string, step: Step, create: boolean) {
    return this.mutateNow(id, step, create);
  }

  async ids() {
    return [...this.states.keys()];
  }

  envelopeNow(model: string): ModelEnvelope | null {
    return envelopeOf(this.book, model);
  }

  async envelope(model: string) {
    return envelopeOf(this.book, model);
  }

  learnNow(fn: Learn): void {
    fn(this.book);
  }

  async learn(_model: string, fn: Learn) {
    fn(this.book);
  }

  async envelopes() {
    return this.book;
  }

  async timed() {
    return [...this.timedSet];
  }

  async untime(ids: readonly string[]) {
    for (const id of ids) this.timedSet.delete(id);
  }

  async flagged() {
    const out: string[] = [];
    for (const [id, s] of this.states) if (s.level !== 'ok') out.push(id);
    return out;
  }
}

/** A book holding one model's envelope (own property, whatever the model string). */
export function bookOf(model: string, e: ModelEnvelope | null | undefined): EnvelopeBook {
  const book = newEnvelopeBook();
  if (e) Object.defineProperty(book.models, model, { value: e, enumerable: true, writable: true, configurable: true });
  return book;
}

/**
 * Shared: a compact state per session (codec.ts) and JSON per model, written
 * compare-and-set. In a unit of work a session's state is decoded once, or handed over
 * from the unit that wrote it last, and encoded once before the unit commits.
 */
export class StoreRepo implements HygieneRepo {
  private readonly states: StoredStates<HygieneState>;
  constructor(
    private readonly store: Store,
    private readonly knobs: () => HygieneOptions,
  ) {
    this.states = new StoredStates(store, { decode: decodeHygiene, encode: encodeHygiene }, 5_000);
  }

  get(id: string) {
    return this.states.read(hyKeys.state(id));
  }

  async resumePending(id: string) {
    // (a state this unit is changing is its working copy; any other is read from its flags)
    const w = this.states.changing(hyKeys.state(id));
    if (w) return (w.value?.resume_at ?? null) !== null;
    const b = await this.store.getBytes(hyKeys.state(id));
    return b !== undefined && resumePendingIn(b);
  }

  async mutate(id: string, step: Step, create: boolean): Promise<readonly HygieneChange[] | undefined> {
    const r = await this.states.change<
      { changes: readonly HygieneChange[]; timed: [boolean, boolean]; flagged: [boolean, boolean] } | undefined
    >(hyKeys.state(id), (cur) => {
      if (cur === undefined && !create) return { value: undefined, result: undefined };
      const before: [boolean, boolean] = [isTimed(cur), isFlagged(cur)];
      const s = cur ?? newHygieneState(id);
      const changes = step(s);
      return {
        value: s,
        result: { changes, timed: [before[0], isTimed(s)], flagged: [before[1], isFlagged(s)] },
        ttlMs: HY_TTL.state,
      };
    });
    if (r === undefined) return undefined;
    if (r.timed[0] !== r.timed[1]) await this.index(hyKeys.timed, [id], r.timed[1]);
    if (r.flagged[0] !== r.flagged[1]) await this.index(hyKeys.flagged, [id], r.flagged[1]);
    return r.changes.length ? r.changes : NO_CHANGES;
  }

  async ids() {
    return (await this.store.keys(hyKeys.statePrefix)).map((k) => k.slice(hyKeys.statePrefix.length));
  }

  async envelope(model: string) {
    return (await this.store.get<ModelEnvelope>(hyKeys.model(model))) ?? null;
  }

  async learn(model: string, fn: Learn): Promise<void> {
    const added = await this.store.update<ModelEnvelope, boolean>(hyKeys.model(model), (cur) => {
      const book = bookOf(model, cur);
      const changed = fn(book);
      const next = envelopeOf(book, model);
      if (!changed || next === null) return { value: cur, result: false, ...(cur ? { ttlMs: HY_TTL.model } : {}) };
      return { value: next, result: cur === undefined, ttlMs: HY_TTL.model };
    });
    if (added) await this.evictModels();
  }

  /** A new model joined: past max_models the least recently touched go (rare: new models are). */
  private async evictModels(): Promise<void> {
    const max = this.knobs().max_models;
    const ks = await this.store.keys(hyKeys.modelPrefix);
    if (ks.length <= max) return;
    const all = await Promise.all(ks.map(async (k) => ({ k, e: await this.store.get<ModelEnvelope>(k) })));
    all.sort((a, b) => (a.e?.touched ?? 0) - (b.e?.touched ?? 0));
    for (const x of all.slice(0, all.length - max)) await this.store.del(x.k);
  }

  async envelopes(): Promise<EnvelopeBook> {
    const book = newEnvelopeBook();
    for (const k of await this.store.keys(hyKeys.modelPrefix)) {
      const e = await this.store.get<ModelEnvelope>(k);
      if (e) Object.defineProperty(book.models, e.model, { value: e, enumerable: true, writable: true });
    }
    return book;
  }

  async timed(): Promise<string[]> {
    return Object.keys((await this.store.get<Record<string, number>>(hyKeys.timed)) ?? {});
  }

  async untime(ids: readonly string[]): Promise<void> {
    await this.index(hyKeys.timed, ids, false);
    await this.index(hyKeys.flagged, ids, false);
  }

  async flagged(): Promise<string[]> {
    return Object.keys((await this.store.get<Record<string, number>>(hyKeys.flagged)) ?? {});
  }

  /** Adds ids to an index (as its newest entries) or removes them; bounded by INDEX_MAX. */
  private async index(key: string, ids: readonly string[], on: boolean): Promise<void> {
    if (!ids.length) return;
    await this.store.update<Record<string, number>, void>(key, (cur) => {
      const next: Record<string, number> = { ...(cur ?? {}) };
      for (const id of ids) {
        delete next[id];
        if (on) next[id] = 1;
      }
      const all = Object.keys(next);
      // oldest entries first (insertion order): past the cap they go; their next change re-adds them
      for (const old of all.slice(0, Math.max(0, all.length - INDEX_MAX))) delete next[old];
      return { value: all.length ? next : undefined, result: undefined, ttlMs: HY_TTL.index };
    });
  }
}
