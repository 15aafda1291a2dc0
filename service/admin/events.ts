import type { VigilEventMap, VigilEventName } from '../../core/bus.ts';
import type { Vigil } from '../../core/vigil.ts';

export type { VigilEventMap, VigilEventName };

/**
 * Subscribes to one kernel event. The listener runs inside the kernel's emit, so it
 * must never throw into it: errors are logged and dropped. Returns the unsubscribe.
 */
export function listen<K extends VigilEventName>(
  vigil: Vigil,
  name: K,
  fn: (payload: VigilEventMap[K]) => void | Promise<void>,
): () => void {
  const log = vigil.logger.child({ part: 'admin' });
  const wrapped = (payload: VigilEventMap[K]) => {
    try {
      const r = fn(payload);
      if (r) r.catch((err: unknown) => log.warn({ err: (err as Error).message, event: name }, 'admin listener failed'));
    } catch (err) {
      log.warn({ err: (err as Error).message, event: name }, 'admin listener failed');
    }
  };
  vigil.events.on(name, wrapped);
  return () => vigil.events.off(name, wrapped);
}
