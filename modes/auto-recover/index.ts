import { z } from 'zod';
import type { Decision, Mode, ModePlugin, TreeState } from '../../core/contracts.ts';
import { duration, formatDuration } from '../../core/duration.ts';
import { definePlugin } from '../../core/registry.ts';
import { TOKENS } from '../../core/tokens.ts';
import { type AutoLimitContextOptions, AutoLimitContextOptionsSchema, applyCap } from '../cap.ts';
import { resolveAlert, settle, sourceOf, startsActing, toast, treeGate, warnDecision } from '../common.ts';

export const AutoRecoverOptionsSchema = z.strictObject({
  /** A detection within this long of the tree's last recovery is the next stage. */
  recover_window: duration().prefault('60m'),
  /** Recoveries per tree per window before the hard stop (owner decision: 2). */
  max_recoveries: z.number().int().min(1).max(10).default(2),
  /** Retry-After on a recovering conversation's 429. */
  retry_after: duration().prefault('30s'),
  /**
   * Retry-After on a stopped tree's 429: short, so a client waiting in retry (opencode
   * honours it) goes on soon after a Resume; meanwhile each retry is one refused check.
   */
  hard_stop_retry_after: duration().prefault('10s'),
  /** Lift a recovery's refusal anyway when the plugin has not reported the compaction by then. */
  compaction_timeout: duration().prefault('15m'),
});
export type AutoRecoverOptions = z.output<typeof AutoRecoverOptionsSchema>;

/** The tree's recovery incident: one per episode, escalating with the stage. */
export const recoveryKey = (root: string) => `${root}:recovery`;
const SOURCE = 'auto_recover';

/**
 * auto_recover. Stage 1, the first detection in a tree: refuse the
 * stuck conversation (scoped 429; the plugin blocks its tool calls too, unless it is the
 * root, which goes on after its compaction), have the plugin abort it and the tree's
 * root (opencode cancels the root's running children with it; other trees go on),
 * compact the root with the incident report in the compaction prompt (it continues from
 * there), lift the refusal when the compaction is done. Stage 2, again within
 * recover_window: the same recovery plus the context cap on the whole tree. After
 * max_recoveries in the window, stage 3: refuse the whole tree and block its tool calls
 * in the plugin (so the stop holds without a router), critical alert, wait for an admin
 * Resume.
 *
 * The detector judges the tree afresh once the compaction is done, so a loop that
 * resumes is a new detection here. Each episode has a recovery incident
 * (`<root>:recovery`): a warning at stage 1 (trigger), stage 2 (an escalation by stage
 * at the same severity), critical at the hard stop. The detector's own incident stays
 * open through the episode (a session judged afresh has not shown progress yet); both
 * resolve on Resume, or once recover_window passes without a new detection (the tree is
 * then back at stage 0).
 */
export function autoRecoverMode(o: AutoRecoverOptions, cap: AutoLimitContextOptions): Mode {
  return {
    type: 'auto_recover',
    acts: true,
    asks: ['block_tool', 'abort', 'compact', 'cap_context', 'stop_run', 'toast'],
    decide(tree, ev, now): Decision {
      const recoveries = tree.recoveries.filter((x) => now - x < o.recover_window);
      const ended = (tree.stage === 1 || tree.stage === 2) && recoveries.length === 0 && !tree.awaiting_compaction;
      // While an episode runs, the tree's incidents stay open (warnDecision's hold).
      let d = warnDecision(tree, ev, now, 'warning', tree.stage !== 0 && !ended);
      const t: TreeState = { ...d.tree, refused: { ...d.tree.refused }, recoveries };
      d.tree = t;
      if (ended) {
        // the window passed without a new detection: the episode is over
        const why = `no loop within ${formatDuration(o.recover_window)} of the last recovery`;
        t.stage = 0;
        d.alerts.push(resolveAlert(recoveryKey(t.root), `recovered: ${t.root}`, why, SOURCE));
        d = settle(d, why);
      }
      switch (ev.type) {
        case 'resume': {
          // warnDecision released the tree (resumeDecision); the episode's incident ends too.
          d.alerts.push(resolveAlert(recoveryKey(t.root), `resumed: ${t.root}`, `resumed by ${ev.by}`, SOURCE));
          return d;
        }
        case 'compaction_done': {
          if (!t.awaiting_compaction || t.stage === 3) return d;
          return lift(d, t, `compaction of ${ev.session_id} done`);
        }
        case 'acked': {
          // The root itself was stuck: its refusal must end once it is aborted, or the
          // compaction's own model request (same conversation) would be refused too.
          if (ev.directive === 'abort' && t.awaiting_compaction?.session === ev.session_id && t.stage !== 3) {
            delete t.refused[ev.session_id];
          }
          return d;
        }
        case 'tick': {
          if (t.awaiting_compaction && t.stage !== 3 && now - t.awaiting_compaction.since >= o.compaction_timeout) {
            const r = lift(d, t, 'no compaction reported in time');
            r.alerts.push({
              dedup_key: `${t.root}:plugin`,
              severity: 'warning',
              state: 'trigger',
              title: `recovery of ${t.root} unconfirmed`,
              summary: 'the opencode plugin did not report the compaction; the refusal was lifted anyway',
              source: 'auto_recover',
            });
            return r;
          }
          return d;
        }
        case 'verdict': {
          if (!startsActing(ev) || t.stage === 3) return d;
          // Still recovering from this very detection: not a new one.
          if (t.awaiting_compaction && (t.refused[ev.session_id] || ev.session_id === t.awaiting_compaction.session))
            return d;
          if (t.recoveries.length >= o.max_recoveries) {
            const reason = `hard stop: looping again after ${t.recoveries.length} recoveries; waiting for Resume`;
            d.tree = {
              ...t,
              stage: 3,
              refuse_all: { reason, since: now, dedup_key: recoveryKey(t.root) },
              awaiting_compaction: undefined,
            };
            // The block first: a tool call between it and the abort is refused already.
            d.directives.push({ type: 'block', session_id: t.root, scope: 'tree', reason, report: ev.report });
            d.directives.push({ type: 'abort', session_id: ev.session_id, reason });
            if (t.root !== ev.session_id) d.directives.push({ type: 'abort', session_id: t.root, reason });
            d.directives.push(
              toast(ev.session_id, 'Vigil: STOPPED', `${ev.agent ?? ev.session_id}: ${reason}`, 'error'),
            );
            d.alerts.push({
              dedup_key: recoveryKey(t.root),
              severity: 'critical',
              stage: 3,
              state: 'trigger',
              title: `hard stop: ${ev.agent ?? 'agent'} (${ev.session_id})`,
              summary: `${reason}. ${ev.reason}`.slice(0, 1024),
              details: ev.report,
              source: sourceOf(ev),
            });
            return d;
          }
          const stage = t.recoveries.length === 0 ? 1 : 2;
          let next: TreeState = {
            ...t,
            stage,
            refused: {
              ...t.refused,
              [ev.session_id]: { reason: `recovering: ${ev.reason}`.slice(0, 300), since: now },
            },
            recoveries: [...t.recoveries, now],
            awaiting_compaction: { session: t.root, since: now },
          };
          if (stage === 2) next = applyCap(next, '*', cap, now);
          d.tree = next;
          // The stuck session's tools are refused until the lift; not the root's: it goes on
          // after its compaction (auto_continue), before the lift reaches the plugin.
          if (ev.session_id !== t.root) {
            d.directives.push({
              type: 'block',
              session_id: ev.session_id,
              reason: `recovering: ${ev.reason}`.slice(0, 300),
              report: ev.report,
            });
          }
          d.directives.push({ type: 'abort', session_id: ev.session_id, reason: ev.reason });
          if (t.root !== ev.session_id) d.directives.push({ type: 'abort', session_id: t.root, reason: ev.reason });
          d.directives.push({
            type: 'compact',
            session_id: t.root,
            report: ev.report,
            auto_continue: true,
            reason: ev.reason,
          });
          d.directives.push(
            toast(
              ev.session_id,
              `Vigil: recovered (stage ${stage})`,
              `recovered ${ev.agent ?? ev.session_id}: ${ev.reason}`,
              'warning',
            ),
          );
          const n = t.recoveries.length;
          const what = stage === 1 ? 'recovering' : 'recovering with a context cap';
          d.alerts.push({
            dedup_key: recoveryKey(t.root),
            // A warning from stage 1, so a channel at its defaults hears of each stage;
            // stage 2 escalates by stage at the same severity, the hard stop to critical.
            severity: 'warning',
            stage,
            state: 'trigger',
            title: `${what} (stage ${stage}): ${ev.agent ?? 'agent'} (${ev.session_id})`.slice(0, 200),
            summary: (stage === 1
              ? `aborted, compacted with the incident report: ${ev.reason}`
              : `looping again after ${n} recover${n === 1 ? 'y' : 'ies'} within ${formatDuration(o.recover_window)}; aborted, compacted, context capped: ${ev.reason}`
            ).slice(0, 1024),
            details: ev.report,
            source: sourceOf(ev),
          });
          return d;
        }
      }
      return d;
    },
    gate: (tree, session, now) => treeGate(tree, session, now, o),
    // When time alone changes the tree: the compaction timeout, or the end of the episode.
    nextDue: (tree) =>
      tree.awaiting_compaction !== undefined
        ? tree.awaiting_compaction.since + o.compaction_timeout
        : (tree.stage === 1 || tree.stage === 2) && tree.recoveries.length
          ? Math.max(...tree.recoveries) + o.recover_window
          : undefined,
  };
}

/** The recovery's refusals end (the compaction is done, or its timeout); the episode goes on. */
function lift(d: Decision, t: TreeState, why: string): Decision {
  const lifted = Object.keys(t.refused);
  d.tree = { ...t, refused: {}, awaiting_compaction: undefined };
  for (const s of lifted) d.directives.push({ type: 'lift', session_id: s, reason: why });
  if (!lifted.length) d.directives.push({ type: 'lift', session_id: t.root, reason: why });
  return d;
}

export const autoRecoverPlugin = definePlugin<ModePlugin<AutoRecoverOptions>>({
  kind: 'mode',
  type: 'auto_recover',
  options: AutoRecoverOptionsSchema,
  create(c, o) {
    const knobs = c.resolve<{ get<T>(s: string): T }>(TOKENS.Knobs);
    const cap = AutoLimitContextOptionsSchema.parse(
      knobs.get<Record<string, unknown>>('modes')?.auto_limit_context ?? {},
    );
    return autoRecoverMode(o, cap);
  },
});
