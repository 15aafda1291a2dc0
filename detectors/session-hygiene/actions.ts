import type { DirectiveSpec } from '../../core/wire.ts';
import type { HygieneChange } from './judge.ts';
import type { HygieneOptions } from './options.ts';

// What a hygiene verdict change asks the opencode plugin to do. Pure: the detector
// queues the result (see hygiene.detector.ts for where and why).
//
// - abort_dispatch (the empty-generation alarm): in an acting mode, abort the session's
//   dispatch, so opencode's retry ladder stops re-sending the dead prefix;
// - abort_and_fresh (restore stall): in an acting mode abort the stalled resume; in every
//   mode a `fresh` directive: the plugin shows the brief in a toast and, with
//   `auto_fresh`, opens a fresh session and sends it the brief;
// - retire (watch number critical): a `fresh` directive (no abort: the question in
//   flight may finish; the next one goes to a fresh session).
// Warnings (finish_question) get the mode's own toast like every verdict.
//
// `fresh` carries the brief in `report`, and `open_session: true` when the plugin should
// open the fresh session itself (hygiene.auto_fresh).

export function directivesFor(c: HygieneChange, acting: boolean, k: HygieneOptions): DirectiveSpec[] {
  const reason = c.reason.slice(0, 300);
  const abort: DirectiveSpec = { type: 'abort', session_id: c.session_id, reason };
  const fresh = (): DirectiveSpec => ({
    type: 'fresh',
    session_id: c.session_id,
    toast: {
      title: c.rule === 'restore_stall' ? 'Vigil: stalled on restore' : 'Vigil: retire this session',
      message: reason,
      variant: c.to === 'critical' ? 'error' : 'warning',
    },
    ...(c.brief ? { report: c.brief.slice(0, 16_384) } : {}),
    open_session: k.auto_fresh,
    reason,
  });
  switch (c.action) {
    case 'abort_dispatch':
      return acting ? [abort] : [];
    case 'abort_and_fresh':
      return acting ? [abort, fresh()] : [fresh()];
    case 'retire':
      return [fresh()];
    default:
      return [];
  }
}
