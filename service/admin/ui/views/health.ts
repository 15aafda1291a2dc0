import { html } from 'htm/preact';
import { ago, clock, duration } from '../format.ts';
import { S } from '../state.ts';

/** The watchdog as the page judges it: never seen, stale (missed two periods), blind, or its last result. */
export function watchdogState(): { label: string; cls: string; detail: string } {
  const w = S.health?.watchdog;
  if (!S.health) return { label: 'unknown', cls: 'lvl-unknown', detail: '' };
  if (!w) return { label: 'never ticked', cls: 'lvl-stale', detail: 'no heartbeat received' };
  const age = Date.now() - Date.parse(w.last_tick_at);
  const period = S.meta?.watchdog_interval_ms ?? 300_000;
  const detail = `last tick ${clock(w.last_tick_at)} (${ago(age)} ago), ${w.result.sessions ?? 0} sessions, ${w.result.flagged ?? 0} flagged`;
  if (age > 2 * period) return { label: `stale (${ago(age)})`, cls: 'lvl-stale', detail };
  if (w.result.status === 'blind') return { label: 'blind', cls: 'lvl-blind', detail };
  if (w.result.status === 'error') return { label: 'error', cls: 'lvl-blind', detail };
  return { label: w.result.status, cls: `lvl-${w.result.status}`, detail };
}

export function Watchdog() {
  const w = watchdogState();
  return html`<span class="wd">watchdog <span class=${`badge ${w.cls}`} id="watchdog" title=${w.detail}>${w.label}</span></span>`;
}

export function HealthView() {
  const h = S.health;
  if (!h) return html`<p class="empty">loading</p>`;
  const w = watchdogState();
  const rows: [string, unknown][] = [
    ['version', h.version],
    ['ok', h.ok ? 'yes' : 'no'],
    ['backend', h.backend],
    ['redis', h.redis],
    ['queue', h.queue],
    ['mode', h.mode],
    ['watchdog', w.label],
    ['watchdog last tick', h.watchdog ? `${clock(h.watchdog.last_tick_at)}` : '-'],
    [
      'watchdog result',
      h.watchdog
        ? Object.entries(h.watchdog.result)
            .map(([k, v]) => `${k} ${v}`)
            .join(', ')
        : '-',
    ],
    ['watchdog period', S.meta ? duration(S.meta.watchdog_interval_ms) : '-'],
    // Whatever each detector reports about itself, one row per fact.
    ...Object.entries(h.detectors ?? {}).flatMap(([d, facts]) =>
      Object.entries(facts).map(([k, v]): [string, unknown] => [
        `${d}: ${k.replace(/_/g, ' ')}`,
        Array.isArray(v) ? v.join(', ') || 'none' : v === true ? 'yes' : v === false ? 'no' : v,
      ]),
    ),
  ];
  return html`<section aria-labelledby="h-health">
    <h2 id="h-health">Health</h2>
    <table class="kv" id="health"><tbody>
      ${rows.map(([k, v]) => html`<tr><th scope="row">${k}</th><td data-key=${k}>${String(v)}</td></tr>`)}
    </tbody></table>
    <h3>Sensors</h3>
    ${
      h.sensors?.length
        ? html`<table class="grid" id="sensors"><thead><tr><th scope="col">sensor</th><th scope="col">agent</th><th scope="col">last report</th><th scope="col">cannot take (this mode)</th></tr></thead>
          <tbody>${h.sensors.map((s) => html`<tr><td>${s.name}</td><td>${s.agent}</td><td>${s.last_seen_at ? clock(s.last_seen_at) : 'never'}</td><td>${s.cannot_act || 'nothing missing'}</td></tr>`)}</tbody></table>`
        : html`<p class="empty">none declared</p>`
    }
    <h3>Plugin versions seen</h3>
    ${
      h.plugins.length
        ? html`<table class="grid"><thead><tr><th scope="col">version</th><th scope="col">last seen</th></tr></thead>
          <tbody>${h.plugins.map((p) => html`<tr><td>${p.version}</td><td>${clock(p.last_seen_at)}</td></tr>`)}</tbody></table>`
        : html`<p class="empty">none</p>`
    }
  </section>`;
}
