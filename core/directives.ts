import { randomUUID } from 'node:crypto';
import { inject, injectable } from 'tsyringe';
import { keys, TTL } from './store/keys.ts';
import type { Store } from './store/store.ts';
import { TOKENS } from './tokens.ts';
import type { Directive, DirectiveSpec } from './wire.ts';

/** Pending directives kept per tree; beyond this the oldest toasts go first, then the oldest. */
const CAP = 100;
/** The same directive (type, session, reason) asked again within this is the same one (two instances, one verdict). */
const SAME_MS = 60_000;

const sameAs = (a: DirectiveSpec, b: Directive, now: number) =>
  a.type === b.type &&
  a.session_id === b.session_id &&
  a.reason === b.reason &&
  a.toast?.title === b.toast?.title &&
  a.toast?.message === b.toast?.message &&
  now - b.created_at < SAME_MS;

/** Whether lift `l` ends block `b` (the tree's lift ends every block of the tree). */
const lifts = (l: DirectiveSpec, b: Directive) =>
  l.type === 'lift' &&
  b.type === 'block' &&
  (l.scope === 'tree' || (b.scope !== 'tree' && b.session_id === l.session_id));

/**
 * Directives for the sensors, queued per tree and kept until a sensor
 * acknowledges them, so a lost /progress response does not lose an action. Every
 * response repeats what is still pending; the plugin acts once per id.
 */
@injectable()
export class DirectiveQueue {
  constructor(@inject(TOKENS.Store) private readonly store: Store) {}

  /**
   * Queues directives for a tree. One still pending that is the same (type, session,
   * reason, toast text, within a minute) is not queued again: two instances handling
   * the same verdict at once give one toast. Atomic across instances (compare-and-set).
   */
  async push(root: string, specs: DirectiveSpec[], now: number): Promise<Directive[]> {
    if (!specs.length) return [];
    const made = specs.map((s) => ({
      ...s,
      id: `d${randomUUID().replace(/-/g, '').slice(0, 20)}`,
      root_id: root,
      created_at: now,
    }));
    return this.store.update<Directive[], Directive[]>(keys.directives(root), (cur) => {
      const added = made.filter((d) => !(cur ?? []).some((c) => sameAs(d, c, now)));
      // A lift ends the blocks of its scope: they leave the queue with it, so a sensor
      // that never acknowledged them (it restarted, or was gone) does not block again.
      let next = [...(cur ?? []).filter((c) => !added.some((d) => lifts(d, c))), ...added];
      while (next.length > CAP) {
        const i = next.findIndex((d) => d.type === 'toast');
        next = i >= 0 ? next.filter((_, j) => j !== i) : next.slice(1);
      }
      return { value: next, result: added, ttlMs: TTL.directives };
    });
  }

  async pending(root: string): Promise<Directive[]> {
    return (await this.store.get<Directive[]>(keys.directives(root))) ?? [];
  }

  /**
   * Removes acknowledged directives and returns them. An ack is bound to the session
   * the directive was issued for: one naming another session is refused (its id is
   * returned in `refused`) and nothing of that call is removed.
   */
  async ack(
    root: string,
    acks: readonly { id: string; session_id: string }[],
  ): Promise<{ done: Directive[]; refused: string[] }> {
    return this.store.update<Directive[], { done: Directive[]; refused: string[] }>(keys.directives(root), (cur) => {
      const list = cur ?? [];
      const refused = acks
        .filter((a) => list.some((d) => d.id === a.id && d.session_id !== a.session_id))
        .map((a) => a.id);
      if (refused.length) return { value: cur, result: { done: [], refused }, ttlMs: TTL.directives };
      const ids = new Set(acks.map((a) => a.id));
      const left = list.filter((d) => !ids.has(d.id));
      return {
        value: left.length ? left : undefined,
        result: { done: list.filter((d) => ids.has(d.id)), refused },
        ttlMs: TTL.directives,
      };
    });
  }
}
