import type { SessionRow } from '../../core/engine.ts';

/** A detector's say on one session, shown generically by the page. */
export interface DetectorView {
  level: string;
  reason: string;
}

/**
 * A /sessions row as the admin page reads it: the kernel's readout, with every
 * detector's verdict (`detectors`) and the sparkline series the detectors keep.
 */
export type AdminRow = SessionRow & {
  /** The no-progress detector's columns, when it is registered. */
  turns_since_landed?: number;
  usd_since_landed?: number;
  top_target?: string | null;
  top_count?: number;
  /** The money detector's columns, when it is registered: the tightest budget today, and its level. */
  budget?: string;
  budget_level?: 'ok' | 'warning' | 'over' | 'resumed';
};
