import { html } from 'htm/preact';
import { useEffect, useState } from 'preact/hooks';
import { api, errorText } from '../api.ts';
import { ago, clock, short, usd } from '../format.ts';
import { Spark } from '../spark.ts';
import { type AdminRow, act, S } from '../state.ts';

const SEVERITY: Record<string, number> = { ok: 0, stalling: 1, looping: 2 };

interface Tree {
  root: string;
  rows: { row: AdminRow; depth: number }[];
  stage: number;
  /** Refused by the gate, and not stale. */
  refused: boolean;
  /** A budget ceiling is reached (acting modes refuse the tree until Resume or the next day). */
  overBudget: boolean;
  /** No sensor reported on the tree for stale_after (its opencode is likely gone). */
  stale: boolean;
  worst: string;
  last: string;
}

/**
 * Sessions grouped by conversation tree, each tree in parent-before-child order. A tree
 * is stale when the service says so or, between reads, once its last event is older
 * than `staleAfterMs`; a stale tree leaves the refused list (it keeps its Resume).
 */
export function trees(rows: Iterable<AdminRow>, now = Date.now(), staleAfterMs = Number.POSITIVE_INFINITY): Tree[] {
  const byRoot = new Map<string, AdminRow[]>();
  for (const r of rows) byRoot.set(r.root, [...(byRoot.get(r.root) ?? []), r]);
  const out: Tree[] = [];
  for (const [root, list] of byRoot) {
    const ids = new Set(list.map((r) => r.session));
    const kids = new Map<string, AdminRow[]>();
    const tops: AdminRow[] = [];
    for (const r of list) {
      if (r.parent && ids.has(r.parent) && r.session !== root) kids.set(r.parent, [...(kids.get(r.parent) ?? []), r]);
      else tops.push(r);
    }
    const ordered: Tree['rows'] = [];
    const seen = new Set<string>();
    const visit = (r: AdminRow, depth: number) => {
      if (seen.has(r.session)) return;
      seen.add(r.session);
      ordered.push({ row: r, depth });
      for (const k of kids.get(r.session) ?? []) visit(k, depth + 1);
    };
    tops.sort((a, b) => (a.session === root ? -1 : b.session === root ? 1 : 0));
    for (const t of tops) visit(t, t.session === root ? 0 : 1);
    for (const r of list) visit(r, 1);
    const last = list.map((r) => r.last_event_at ?? '').sort()[list.length - 1];
    const stale = list.every((r) => r.stale) || (last !== '' && now - Date.parse(last) > staleAfterMs);
    out.push({
      root,
      rows: ordered,
      stage: Math.max(...list.map((r) => r.stage)),
      refused: !stale && list.some((r) => r.refused),
      overBudget: list.some((r) => r.budget_level === 'over'),
      stale,
      worst: list.reduce((w, r) => ((SEVERITY[r.verdict] ?? 0) > (SEVERITY[w] ?? 0) ? r.verdict : w), 'ok'),
      last,
    });
  }
  return out.sort((a, b) => (SEVERITY[b.worst] ?? 0) - (SEVERITY[a.worst] ?? 0) || b.last.localeCompare(a.last));
}

// Sparkline columns: whatever series the rows carry, the known ones first and named short.
const SERIES_LABELS: Record<string, string> = { turns_since_landed: 'turns trend', prompt_tokens: 'tokens/call' };
const seriesNames = (rows: Iterable<AdminRow>): string[] => {
  const names = new Set(Object.keys(SERIES_LABELS));
  for (const r of rows) for (const k of Object.keys(r.series ?? {})) names.add(k);
  return [...names];
};
const seriesLabel = (name: string) => SERIES_LABELS[name] ?? name.replace(/_/g, ' ');

const resumeErrors = new Map<string, string>();

function TreeHead({ t, cols, onChange }: { t: Tree; cols: number; onChange: () => void }) {
  const [busy, setBusy] = useState(false);
  const stopped = t.stage === 3;
  const resume = async () => {
    setBusy(true);
    resumeErrors.set(
      t.root,
      await act(() => api('POST', `/trees/${encodeURIComponent(t.root)}/resume`, { by: 'admin-page' })),
    );
    setBusy(false);
    onChange();
  };
  return html`<tr class="tree" data-root=${t.root}>
    <th colspan=${cols} scope="rowgroup">
      <span>tree ${t.root}</span>
      <span class=${`badge v-${t.worst}`}>${t.worst}</span>
      ${t.stage ? html`<span class="badge stage">stage ${t.stage}${stopped ? ' hard stop' : ''}</span>` : null}
      ${t.refused ? html`<span class="badge refused">refused</span>` : null}
      ${t.overBudget ? html`<span class="badge refused">over budget</span>` : null}
      ${t.stale ? html`<span class="badge stale" title="no plugin, router or watchdog input for this tree">stale: no sensor for ${t.last ? ago(Date.now() - Date.parse(t.last)) : 'ever'}</span>` : null}
      ${
        t.refused || stopped || t.overBudget
          ? html`<button class="resume" disabled=${busy} onClick=${resume} aria-label=${`Resume tree ${t.root}`}>Resume</button>`
          : null
      }
      ${resumeErrors.get(t.root) ? html`<span class="err" role="alert">${resumeErrors.get(t.root)}</span>` : null}
    </th>
  </tr>`;
}

function Row({
  row,
  depth,
  stale,
  series,
  budgets,
  onOpen,
}: {
  row: AdminRow;
  depth: number;
  stale: boolean;
  series: string[];
  budgets: boolean;
  onOpen: (id: string) => void;
}) {
  const plugin = row.plugin_live && !stale ? 'live' : row.plugin_version ? 'stale' : 'none';
  // Every detector that is not ok, no-progress included (its loop is the common case).
  const flagged = Object.entries(row.detectors ?? {}).filter(([, d]) => d.level !== 'ok');
  return html`<tr data-session=${row.session} class=${`v-row-${row.verdict}`}>
    <td style=${`padding-left:${0.4 + depth * 1.1}em`}>
      <button class="link" onClick=${() => onOpen(row.session)} aria-label=${`Incident report of ${row.session}`}>${short(row.session, 22)}</button>
    </td>
    <td>${row.agent ?? '-'}</td>
    <td title=${row.parent ?? ''}>${short(row.parent)}</td>
    <td class="verdict"><span class=${`badge v-${row.verdict}`} title=${row.reason}>${row.verdict}</span></td>
    <td>${row.stage}${row.refused && !stale ? ' refused' : ''}</td>
    <td class="num">${row.turns_since_landed ?? '-'}</td>
    <td class="num">${row.usd_since_landed === undefined ? '-' : usd(row.usd_since_landed)}</td>
    ${budgets ? html`<td class=${`budget budget-${row.budget_level ?? 'none'}`} title="the tightest budget today">${row.budget ?? '-'}</td>` : null}
    <td title=${row.top_target ?? ''}>${row.top_target ? `${short(row.top_target, 40)} x${row.top_count}` : '-'}</td>
    <td>${row.models.length ? row.models.map((m) => html`<div>${short(m, 24)}</div>`) : '-'}</td>
    <td class=${`plugin-${plugin}`} title=${row.sensor ?? ''}>${plugin}${row.cannot_act ? html`<div class="cannot" title="actions the mode asks that this agent's sensor does not take itself">cannot: ${row.cannot_act}</div>` : null}</td>
    <td>${clock(row.last_event_at)}</td>
    <td class="detectors">${flagged.length ? flagged.map(([k, d]) => html`<span class=${`badge lvl-${d.level}`} title=${d.reason}>${k}: ${d.level}</span>`) : '-'}</td>
    ${series.map((n) => html`<td><${Spark} values=${row.series?.[n] ?? []} label=${n.replace(/_/g, ' ')} /></td>`)}
  </tr>`;
}

let open: { id: string; text: string; error: string } | null = null;

export function SessionsView({ onChange }: { onChange: () => void }) {
  // Trees turn stale with no event at all: look again every half minute.
  const [, tick] = useState(0);
  useEffect(() => {
    const t = setInterval(() => tick((n) => n + 1), 30_000);
    return () => clearInterval(t);
  }, []);
  const load = async (id: string) => {
    open = { id, text: '', error: '' };
    onChange();
    try {
      open = { id, text: await api<string>('GET', `/sessions/${encodeURIComponent(id)}/report`), error: '' };
    } catch (e) {
      open = { id, text: '', error: errorText(e) };
    }
    onChange();
  };
  const ts = trees(S.sessions.values(), Date.now(), S.meta?.stale_after_ms);
  const series = seriesNames(S.sessions.values());
  // Budgets (the money detector's column) show only when a ceiling is set.
  const budgets = [...S.sessions.values()].some((r) => r.budget !== undefined);
  const failures = S.deliveries.filter((d) => d.outcome === 'failed').slice(0, 10);
  return html`<section aria-labelledby="h-sessions">
    <h2 id="h-sessions">Sessions</h2>
    <p class="line">${S.sessions.size} session${S.sessions.size === 1 ? '' : 's'}, ${ts.length} tree${ts.length === 1 ? '' : 's'}</p>
    <table class="grid" id="sessions">
      <thead><tr>
        <th scope="col">session</th><th scope="col">agent</th><th scope="col">parent</th><th scope="col">verdict</th>
        <th scope="col">stage</th><th scope="col">turns</th><th scope="col">$ since landed</th>
        ${budgets ? html`<th scope="col">budget</th>` : null}<th scope="col">top repeated</th>
        <th scope="col">models</th><th scope="col">plugin</th><th scope="col">last event</th><th scope="col">detectors</th>
        ${series.map((n) => html`<th scope="col" title=${n}>${seriesLabel(n)}</th>`)}
      </tr></thead>
      ${ts.map(
        (t) => html`<tbody key=${t.root}>
          <${TreeHead} t=${t} cols=${12 + (budgets ? 1 : 0) + series.length} onChange=${onChange} />
          ${t.rows.map((r) => html`<${Row} key=${r.row.session} row=${r.row} depth=${r.depth} stale=${t.stale} series=${series} budgets=${budgets} onOpen=${load} />`)}
        </tbody>`,
      )}
    </table>
    ${ts.length ? null : html`<p class="empty">no sessions yet</p>`}
    ${
      open
        ? html`<div class="report" id="report" aria-live="polite">
            <h3>Incident report: ${open.id}
              <button onClick=${() => load(open!.id)}>Refresh</button>
              <button onClick=${() => {
                open = null;
                onChange();
              }}>Close</button>
            </h3>
            ${open.error ? html`<p class="err" role="alert">${open.error}</p>` : html`<pre>${open.text || 'loading'}</pre>`}
          </div>`
        : null
    }
    <h3>Delivery failures</h3>
    ${
      failures.length
        ? html`<table class="grid" id="failures"><thead><tr><th scope="col">at</th><th scope="col">channel</th><th scope="col">alert</th><th scope="col">attempts</th><th scope="col">reason</th></tr></thead>
          <tbody>${failures.map((d) => html`<tr><td>${clock(d.at)}</td><td>${d.channel}</td><td>${d.state} ${d.title}</td><td class="num">${d.attempts}</td><td>${d.reason ?? '-'}</td></tr>`)}</tbody></table>`
        : html`<p class="empty">none</p>`
    }
  </section>`;
}
