import { inject, injectable } from 'tsyringe';
import type { Clock } from './clock.ts';
import type { GateVote, SessionInfo } from './contracts.ts';
import type { Dispatch } from './dispatch.ts';
import type { Metrics } from './metrics.ts';
import type { Readouts } from './readouts.ts';
import { TOKENS } from './tokens.ts';
import type { SessionTree } from './tree.ts';
import type { GateAnswer, GateQuery } from './wire.ts';

const isPromise = <T>(v: T | Promise<T>): v is Promise<T> => typeof (v as { then?: unknown })?.then === 'function';

/** The router gate: the mode's state and every detector's vote on one model request. */
@injectable()
export class Gate {
  constructor(
    @inject(TOKENS.Dispatch) private readonly dispatch: Dispatch,
    @inject(TOKENS.Readouts) private readonly readouts: Readouts,
    @inject(TOKENS.Tree) private readonly tree: SessionTree,
    @inject(TOKENS.Clock) private readonly clock: Clock,
    @inject(TOKENS.Metrics) private readonly metrics: Metrics,
  ) {}

  /** The router gate: the mode and every detector vote; the strictest vote wins. */
  async check(q: GateQuery): Promise<GateAnswer> {
    let s: SessionInfo | Promise<SessionInfo> = this.tree.enter({
      id: q.conversation,
      parent: q.parent,
      agent: q.agent,
    });
    if (isPromise(s)) s = await s;
    const now = this.clock.now();
    const mode = this.dispatch.mode();
    let tree = await this.readouts.treeState(s.root);
    const due = tree && mode.nextDue?.(tree);
    if (tree && due !== undefined && due <= now) {
      tree = (await this.dispatch.decide(s.root, { type: 'tick', root_id: s.root })).tree;
    }
    const votes: GateVote[] = [];
    const mv = tree ? mode.gate(tree, q.conversation, now) : undefined;
    if (mv) votes.push(mv);
    for (const x of this.dispatch.on.gate) {
      if (!x.enabled()) continue;
      const v = await x.detector.gate!({ query: q, session: s, mode: mode.type, acting: mode.acts, now });
      if (v) votes.push(v);
    }
    const answer = combine(votes);
    this.metrics.gate.inc({ action: answer.action });
    return answer;
  }
}

/** The strictest vote wins: a refusal over a limit over allow; the smallest cap; any tripped model. */
export function combine(votes: readonly GateVote[]): GateAnswer {
  const tripped = votes.some((v) => v.model_tripped);
  const refuse = votes.find((v) => v.refuse)?.refuse;
  if (refuse) {
    return {
      action: 'refuse',
      status: 429,
      retry_after_s: refuse.retry_after_s,
      reason: refuse.reason,
      model_tripped: tripped,
    };
  }
  let limit: GateVote['limit'];
  for (const v of votes)
    if (v.limit && (!limit || v.limit.max_context_tokens < limit.max_context_tokens)) limit = v.limit;
  if (limit) {
    return {
      action: 'limit',
      max_context_tokens: limit.max_context_tokens,
      limit_mechanism: limit.mechanism,
      reason: limit.reason,
      model_tripped: tripped,
    };
  }
  return { action: 'allow', model_tripped: tripped };
}
