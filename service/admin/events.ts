import type { Vigil } from '../../core/app.ts';
import type { DeliveryRecord } from '../../core/notifier/delivery-log.ts';
import type { VerdictLevel } from '../../core/wire.ts';

/** What the kernel emits on `vigil.events` (core/app.ts, core/engine.ts, the routes), by name. */
export interface VigilEventMap {
  /** A verdict transition was handled (mode applied, alert queued). */
  transition: { session: string; from: VerdictLevel; to: VerdictLevel; source: string; root: string };
  /** A mode wrote a tree state. */
  tree: { root: string; stage: number; refused: boolean };
  /** A delivery-log row was written (delivered, failed or suppressed). */
  delivery: DeliveryRecord;
  /** Knobs were PATCHed: the values now in effect. */
  knobs: Record<string, unknown>;
  /** A channel was toggled. */
  channel: { name: string; enabled: boolean; min_severity: string; resolve_messages: boolean };
  /** The watchdog reported a tick. */
  heartbeat: unknown;
  /** Progress events were judged for these sessions. */
  progress: { sessions: string[] };
  /** A request record was judged. */
  request: { session: string; model: string; prompt_tokens: number };
}

export type VigilEventName = keyof VigilEventMap;

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
