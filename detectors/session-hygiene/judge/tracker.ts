import type { ProgressEvent, RequestRecord } from '../../../core/wire.ts';
import type { HygieneOptions } from '../options.ts';
import { type EnvelopeBook, envelopeOf, learnAssistant, learnRequest, newEnvelopeBook } from './envelope.ts';
import { type HygieneState, newHygieneState } from './state.ts';
import { type HygieneChange, onEvent, onRequest, onTick } from './update.ts';

// An in-memory driver over many sessions and one envelope book (tests, bench, replay).
// The service keeps the same states in its store; this only shows the calling order:
// a call is judged against the model's envelope as it was, then learned into it.

export type HygieneInput = { type: 'progress'; event: ProgressEvent } | { type: 'request'; record: RequestRecord };

export class HygieneTracker {
  readonly sessions = new Map<string, HygieneState>();
  readonly book: EnvelopeBook = newEnvelopeBook();

  constructor(readonly knobs: HygieneOptions) {}

  state(id: string): HygieneState | undefined {
    return this.sessions.get(id);
  }

  apply(input: HygieneInput): readonly HygieneChange[] {
    return input.type === 'progress' ? this.applyEvent(input.event) : this.applyRequest(input.record);
  }

  applyEvent(ev: ProgressEvent): readonly HygieneChange[] {
    const s = this.get(ev.session_id);
    if (ev.kind !== 'assistant' || ev.model === undefined) return onEvent(s, ev, this.knobs);
    const changes = onEvent(s, ev, this.knobs, envelopeOf(this.book, ev.model));
    learnAssistant(this.book, ev, this.knobs);
    return changes;
  }

  applyRequest(r: RequestRecord): readonly HygieneChange[] {
    const s = this.get(r.session_id);
    const changes = onRequest(s, r, this.knobs, envelopeOf(this.book, r.model));
    learnRequest(this.book, r, this.knobs);
    return changes;
  }

  tick(now: number): HygieneChange[] {
    const out: HygieneChange[] = [];
    for (const s of this.sessions.values()) out.push(...onTick(s, now, this.knobs));
    return out;
  }

  private get(id: string): HygieneState {
    let s = this.sessions.get(id);
    if (s !== undefined) {
      // re-insert: Map order is then least recently updated first
      this.sessions.delete(id);
      this.sessions.set(id, s);
      return s;
    }
    s = newHygieneState(id);
    this.sessions.set(id, s);
    if (this.sessions.size > this.knobs.max_sessions) {
      const oldest = this.sessions.keys().next().value;
      if (oldest !== undefined) this.sessions.delete(oldest);
    }
    return s;
  }
}
