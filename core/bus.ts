import type { DeliveryRecord } from './notifier/delivery-log.ts';
import type { VerdictLevel } from './wire.ts';

/**
 * What an instance emits on `vigil.events` (node:events), by name: the admin page's
 * live stream and any embedder can listen. Emitted after the state is written.
 */
export interface VigilEventMap {
  /** A verdict transition on a session was handled (mode applied, alert queued). */
  transition: { session: string; detector: string; from: VerdictLevel; to: VerdictLevel; source: string; root: string };
  /** A mode wrote a tree state. */
  tree: { root: string; stage: number; refused: boolean };
  /** A delivery-log row was written (delivered, failed or suppressed). */
  delivery: DeliveryRecord;
  /** Knobs were changed at run time: the values now in effect. */
  knobs: Record<string, unknown>;
  /** A channel was toggled. */
  channel: { name: string; enabled: boolean; min_severity: string; resolve_messages: boolean };
  /** The watchdog reported a tick. */
  heartbeat: unknown;
  /** Progress events were judged for these sessions (only while someone listens). */
  progress: { sessions: string[] };
  /** A request record was judged (only while someone listens). */
  request: { session: string; model: string; prompt_tokens: number };
}

export type VigilEventName = keyof VigilEventMap;
