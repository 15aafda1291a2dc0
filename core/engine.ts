import { inject, injectable } from 'tsyringe';
import type { Decision, Detector, Mode, Origin, Transition, TreeState } from './contracts.ts';
import type { DirectiveQueue } from './directives.ts';
import type { Dispatch } from './dispatch.ts';
import type { Gate } from './gate.ts';
import type { Readouts, SessionRow } from './readouts.ts';
import { TOKENS } from './tokens.ts';
import type { SessionTree } from './tree.ts';
import type { Units } from './unit.ts';
import type { Directive, ExternalVerdict, GateAnswer, GateQuery, ProgressEvent, RequestRecord } from './wire.ts';

export type { Driven } from './dispatch.ts';
export { inputKey, RANK } from './dispatch.ts';
export { combine } from './gate.ts';
export type { SessionRow } from './readouts.ts';

/** What one input caused, as a sensor route answers it. */
export interface InputResult {
  transitions: readonly Transition[];
  /** The pending directives of the input's trees (every answer repeats what is still pending). */
  directives: Directive[];
}

/**
 * The kernel's facade: one method per use case, so an HTTP route or an embedder is a
 * thin adapter and no rule lives there. The rooms behind it: dispatch (inputs to
 * detectors, transitions to the mode and the notifier, each input one unit of work),
 * the gate, the readouts.
 */
@injectable()
export class Engine {
  constructor(
    @inject(TOKENS.Dispatch) private readonly dispatch: Dispatch,
    @inject(TOKENS.Gate) private readonly gate: Gate,
    @inject(TOKENS.Readouts) private readonly readouts: Readouts,
    @inject(TOKENS.Tree) readonly tree: SessionTree,
    @inject(TOKENS.DirectiveQueue) readonly directives: DirectiveQueue,
    @inject(TOKENS.Units) readonly units: Units,
  ) {}

  get mode(): () => Mode {
    return this.dispatch.mode;
  }

  detectors(): Detector[] {
    return this.dispatch.driven.map((x) => x.detector);
  }

  /**
   * Progress events judged; their transitions and their trees' pending directives.
   * `check` (the service's session keys) runs first in the events' unit: a throw refuses
   * the whole input with nothing written, and its reads cost no round trip of their own.
   */
  async ingest(
    events: readonly ProgressEvent[],
    origin: Origin = {},
    check?: () => Promise<void>,
  ): Promise<InputResult> {
    const sessions = events.map((e) => e.session_id);
    // The directives are read in the last event's unit: its commit checks them.
    const r = await this.dispatch.progress(events, origin, () => this.pendingOf(sessions), check);
    return { transitions: r.transitions, directives: r.tail ?? (await this.pendingOf(sessions)) };
  }

  async progress(events: readonly ProgressEvent[], origin: Origin = {}): Promise<readonly Transition[]> {
    return (await this.dispatch.progress(events, origin)).transitions;
  }

  requests(records: readonly RequestRecord[]): Promise<readonly Transition[]> {
    return this.dispatch.requests(records);
  }

  verdicts(list: readonly ExternalVerdict[]): Promise<readonly Transition[]> {
    return this.dispatch.verdicts(list);
  }

  tick(now?: number): Promise<readonly Transition[]> {
    return this.dispatch.tick(now);
  }

  handle(ts: readonly Transition[]): Promise<Transition[]> {
    return this.dispatch.handle(ts);
  }

  /** The router gate, as one unit (a due tree decided on the way commits with it). */
  async check(q: GateQuery): Promise<GateAnswer> {
    const r = await this.units.run(() => this.gate.check(q));
    return r.value as GateAnswer;
  }

  async resume(root: string, by: string): Promise<TreeState> {
    return (await this.dispatch.decide(root, { type: 'resume', root_id: root, by })).tree;
  }

  decide(root: string, ev: Parameters<Dispatch['decide']>[1]): Promise<Decision> {
    return this.dispatch.decide(root, ev);
  }

  ack(acks: readonly { id: string; root_id: string; session_id: string }[]): Promise<number> {
    return this.dispatch.ack(acks);
  }

  /** Pending directives of the trees of these sessions. */
  async pendingOf(sessions: readonly string[]): Promise<Directive[]> {
    const roots = new Set<string>();
    for (const s of sessions) roots.add(await this.tree.rootOf(s));
    const out: Directive[] = [];
    for (const r of roots) out.push(...(await this.directives.pending(r)));
    return out;
  }

  /** Pending directives for a session's tree. */
  pendingFor(session: string): Promise<Directive[]> {
    return this.pendingOf([session]);
  }

  treeState(root: string): Promise<TreeState | undefined> {
    return this.readouts.treeState(root);
  }

  sessionRow(id: string): Promise<SessionRow | undefined> {
    return this.readouts.sessionRow(id);
  }

  sessionRows(limit?: number): Promise<SessionRow[]> {
    return this.readouts.sessionRows(limit);
  }

  report(id: string): Promise<string | undefined> {
    return this.readouts.report(id);
  }

  /** On start: outbox entries left by a crash are delivered, due trees scheduled. */
  async recover(): Promise<void> {
    await this.units.reconcile(true);
    await this.dispatch.schedule();
  }
}
