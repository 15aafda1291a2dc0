import { html } from 'htm/preact';
import { Chart } from '../chart.ts';
import { cell } from '../format.ts';
import { S } from '../state.ts';

/**
 * Tables (and their charts) the detectors contribute (GET /panels), rendered without
 * knowing any detector; panels with a chart first.
 */
export function PanelsView() {
  return html`<section aria-labelledby="h-panels">
    <h2 id="h-panels">Detectors</h2>
    ${[...S.panels]
      .sort((a, b) => Number(Boolean(b.chart)) - Number(Boolean(a.chart)))
      .map(
        (p) => html`<div class="panel-box" key=${`${p.detector}:${p.title}`}>
        ${p.chart ? html`<${Chart} chart=${p.chart} title=${p.title} />` : null}
        <table class="grid panel" data-detector=${p.detector}>
          <caption>${p.title}</caption>
          <thead><tr>${p.columns.map((c) => html`<th scope="col">${c.label}</th>`)}</tr></thead>
          <tbody>
            ${p.rows.map((r) => html`<tr>${p.columns.map((c) => html`<td>${cell(r[c.key])}</td>`)}</tr>`)}
            ${p.rows.length ? null : html`<tr><td colspan=${p.columns.length} class="empty">no rows</td></tr>`}
          </tbody>
        </table>
      </div>`,
      )}
    ${S.panels.length ? null : html`<p class="empty">no detector panels</p>`}
  </section>`;
}
