import { html } from 'htm/preact';
import { cell } from '../format.ts';
import { S } from '../state.ts';

/** Tables the detectors contribute (GET /panels), rendered without knowing any detector. */
export function PanelsView() {
  return html`<section aria-labelledby="h-panels">
    <h2 id="h-panels">Detectors</h2>
    ${S.panels.map(
      (p) => html`<table class="grid panel" data-detector=${p.detector} key=${`${p.detector}:${p.title}`}>
        <caption>${p.title}</caption>
        <thead><tr>${p.columns.map((c) => html`<th scope="col">${c.label}</th>`)}</tr></thead>
        <tbody>
          ${p.rows.map((r) => html`<tr>${p.columns.map((c) => html`<td>${cell(r[c.key])}</td>`)}</tr>`)}
          ${p.rows.length ? null : html`<tr><td colspan=${p.columns.length} class="empty">no rows</td></tr>`}
        </tbody>
      </table>`,
    )}
    ${S.panels.length ? null : html`<p class="empty">no detector panels</p>`}
  </section>`;
}
