import type { Vigil } from '../../core/app.ts';

/** A generic table a detector contributes to the admin page (GET /panels). */
export interface Panel {
  detector: string;
  title: string;
  columns: { key: string; label: string }[];
  /** Cells are strings, numbers, booleans or null: formatted here, so the page needs no detector knowledge. */
  rows: Record<string, string | number | boolean | null>[];
}

export type PanelSource = (vigil: Vigil) => Promise<Panel | Panel[] | undefined>;

const iso = (ms: number | null | undefined) => (ms ? new Date(ms).toISOString() : null);

/** The behavior breaker: one row per model it has seen. */
export const breakerPanel: PanelSource = async (vigil) => {
  const v = await vigil.breaker.view(0);
  return {
    detector: 'behavior-breaker',
    title: `Behavior breaker: models (window ${Math.round(v.window_ms / 60_000)}m${v.enabled ? '' : ', disabled'})`,
    columns: [
      { key: 'model', label: 'model' },
      { key: 'tripped', label: 'tripped' },
      { key: 'until', label: 'skip until' },
      { key: 'trips', label: 'trips' },
      { key: 'backoff_level', label: 'backoff' },
      { key: 'served_sessions', label: 'served' },
      { key: 'stalled_sessions', label: 'stalled' },
      { key: 'ratio', label: 'ratio' },
      { key: 'note', label: 'last check' },
    ],
    rows: v.models.map((m) => ({
      model: m.model,
      tripped: m.tripped,
      until: m.tripped ? iso(m.until) : null,
      trips: m.trips,
      backoff_level: m.backoff_level,
      served_sessions: m.served_sessions,
      stalled_sessions: m.stalled_sessions,
      ratio: m.last_check?.ratio ?? null,
      note: m.last_check?.note ?? null,
    })),
  };
};

/** Detectors contribute here; the page renders whatever comes back. */
export const PANEL_SOURCES: PanelSource[] = [breakerPanel];

export async function panels(vigil: Vigil, sources: readonly PanelSource[] = PANEL_SOURCES): Promise<Panel[]> {
  const out: Panel[] = [];
  for (const s of sources) {
    const p = await s(vigil);
    if (p) out.push(...(Array.isArray(p) ? p : [p]));
  }
  return out;
}
