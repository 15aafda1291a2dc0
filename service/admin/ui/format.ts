// Display helpers. ASCII only.

export function duration(ms: number): string {
  if (!Number.isFinite(ms)) return String(ms);
  if (ms > 0 && ms % 3_600_000 === 0) return `${ms / 3_600_000}h`;
  if (ms > 0 && ms % 60_000 === 0) return `${ms / 60_000}m`;
  if (ms > 0 && ms % 1_000 === 0) return `${ms / 1_000}s`;
  return `${ms}ms`;
}

export function ago(ms: number): string {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 90) return `${s}s`;
  if (s < 5400) return `${Math.round(s / 60)}m`;
  if (s < 129_600) return `${Math.round(s / 3600)}h`;
  return `${Math.round(s / 86_400)}d`;
}

/** HH:MM:SS local for today, else the date too. */
export function clock(t: string | number | null | undefined): string {
  if (t === null || t === undefined || t === '') return '-';
  const d = new Date(t);
  if (Number.isNaN(d.getTime())) return String(t);
  const pad = (n: number) => String(n).padStart(2, '0');
  const hms = `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  return d.toDateString() === new Date().toDateString()
    ? hms
    : `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${hms}`;
}

export function usd(n: number): string {
  return `$${n < 10 ? n.toFixed(2) : n.toFixed(1)}`;
}

export function short(id: string | null | undefined, n = 18): string {
  if (!id) return '-';
  return id.length > n ? `${id.slice(0, n - 3)}...` : id;
}

export function cell(v: unknown): string {
  if (v === null || v === undefined || v === '') return '-';
  if (typeof v === 'boolean') return v ? 'yes' : 'no';
  if (typeof v === 'number') return Number.isInteger(v) ? String(v) : v.toFixed(3).replace(/\.?0+$/, '');
  if (typeof v === 'object') return JSON.stringify(v);
  if (/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$/.test(String(v))) return clock(String(v));
  return String(v);
}
