import type { Vigil } from '../../core/app.ts';
import type { SessionRow } from '../../core/engine.ts';

/** Points kept per series (most recent last) and sessions kept (least recently sampled go first). */
export const SERIES_POINTS = 60;
const MAX_SESSIONS = 5_000;

/** A detector's say on one session, shown generically by the page. */
export interface DetectorView {
  level: string;
  reason: string;
}

/** A /sessions row as the admin page reads it: the readout plus detector views and sparkline data. */
export interface AdminRow extends SessionRow {
  detectors: Record<string, DetectorView>;
  series: Record<string, number[]>;
}

/**
 * Bounded per-session sample rings for the sparklines, fed by the kernel's events
 * (service/admin/live.ts): turns since landed at each update, prompt tokens per call.
 */
export class SeriesRings {
  private readonly data = new Map<string, Record<string, number[]>>();

  push(session: string, name: string, value: number): void {
    let s = this.data.get(session);
    if (s) this.data.delete(session);
    else s = {};
    this.data.set(session, s);
    if (this.data.size > MAX_SESSIONS) this.data.delete(this.data.keys().next().value as string);
    const ring = s[name] ?? [];
    s[name] = ring;
    ring.push(value);
    if (ring.length > SERIES_POINTS) ring.splice(0, ring.length - SERIES_POINTS);
  }

  of(session: string): Record<string, number[]> {
    const s = this.data.get(session);
    if (!s) return {};
    const out: Record<string, number[]> = {};
    for (const [k, v] of Object.entries(s)) out[k] = [...v];
    return out;
  }
}

const rings = new WeakMap<Vigil, SeriesRings>();

/** The rings of one Vigil instance (made on first use, so route order does not matter). */
export function seriesOf(vigil: Vigil): SeriesRings {
  let r = rings.get(vigil);
  if (!r) {
    r = new SeriesRings();
    rings.set(vigil, r);
  }
  return r;
}

/** Models whose breaker is tripped now (one read per call, shared by every row). */
export async function trippedModels(vigil: Vigil): Promise<Set<string>> {
  const view = await vigil.breaker.view(0);
  return new Set(view.models.filter((m) => m.tripped).map((m) => m.model));
}

/** Adds `detectors` and `series` to readout rows. */
export async function withExtras(vigil: Vigil, rows: SessionRow[], tripped?: Set<string>): Promise<AdminRow[]> {
  const t = tripped ?? (await trippedModels(vigil));
  const series = seriesOf(vigil);
  return rows.map((r) => {
    const detectors: Record<string, DetectorView> = { 'no-progress': { level: r.verdict, reason: r.reason } };
    if (r.models.length) {
      const hit = r.models.filter((m) => t.has(m));
      detectors['behavior-breaker'] = hit.length
        ? { level: 'tripped', reason: `model tripped: ${hit.join(', ')}` }
        : { level: 'ok', reason: '' };
    }
    return { ...r, detectors, series: series.of(r.session) };
  });
}
