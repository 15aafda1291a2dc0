import { randomUUID } from 'node:crypto';
import { keys, TTL } from './store/keys.ts';
import type { Store } from './store/store.ts';
import type { Directive, DirectiveSpec } from './wire.ts';

/** Pending directives kept per tree; beyond this the oldest toasts go first, then the oldest. */
const CAP = 100;

/**
 * Directives for the opencode plugin, queued per tree and kept until the plugin
 * acknowledges them, so a lost /progress response does not lose an action. Every
 * response repeats what is still pending; the plugin acts once per id.
 */
export class DirectiveQueue {
  constructor(private readonly store: Store) {}

  async push(root: string, specs: DirectiveSpec[], now: number): Promise<Directive[]> {
    if (!specs.length) return [];
    const added = specs.map((s) => ({
      ...s,
      id: `d${randomUUID().replace(/-/g, '').slice(0, 20)}`,
      root_id: root,
      created_at: now,
    }));
    await this.store.update<Directive[], void>(keys.directives(root), (cur) => {
      let next = [...(cur ?? []), ...added];
      while (next.length > CAP) {
        const i = next.findIndex((d) => d.type === 'toast');
        next = i >= 0 ? next.filter((_, j) => j !== i) : next.slice(1);
      }
      return { value: next, result: undefined, ttlMs: TTL.directives };
    });
    return added;
  }

  async pending(root: string): Promise<Directive[]> {
    return (await this.store.get<Directive[]>(keys.directives(root))) ?? [];
  }

  /** Removes acknowledged directives; returns the ones that were pending. */
  async ack(root: string, ids: readonly string[]): Promise<Directive[]> {
    const set = new Set(ids);
    return this.store.update<Directive[], Directive[]>(keys.directives(root), (cur) => {
      const list = cur ?? [];
      const done = list.filter((d) => set.has(d.id));
      const left = list.filter((d) => !set.has(d.id));
      return { value: left.length ? left : undefined, result: done };
    });
  }
}
