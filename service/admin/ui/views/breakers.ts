import { html } from 'htm/preact';
import { api } from '../api.ts';
import { cell, clock } from '../format.ts';
import { act, refreshNow, S } from '../state.ts';

const errors = new Map<string, string>();

export function BreakersView({ onChange }: { onChange: () => void }) {
  const b = S.breaker;
  if (!b) return html`<p class="empty">loading</p>`;
  const resume = async (model: string) => {
    errors.set(
      model,
      await act(() => api('POST', `/breaker/${encodeURIComponent(model)}/resume`, { by: 'admin-page' })),
    );
    await refreshNow();
    onChange();
  };
  const evidence = [...b.evidence, ...b.held].sort((x, y) => y.at - x.at).slice(0, 50);
  return html`<section aria-labelledby="h-breakers">
    <h2 id="h-breakers">Behavior breaker</h2>
    <p class="line">${b.enabled ? 'enabled' : 'disabled'}, window ${Math.round(b.window_ms / 60_000)}m</p>
    <table class="grid" id="breaker-models">
      <thead><tr><th scope="col">model</th><th scope="col">state</th><th scope="col">skip until</th><th scope="col">trips</th>
        <th scope="col">backoff</th><th scope="col">served</th><th scope="col">stalled</th><th scope="col">last check</th><th scope="col">action</th></tr></thead>
      <tbody>${b.models.map(
        (m) => html`<tr data-model=${m.model}>
          <td>${m.model}</td>
          <td><span class=${`badge ${m.tripped ? 'lvl-tripped' : 'v-ok'}`}>${m.tripped ? 'tripped' : 'ok'}</span></td>
          <td>${m.tripped ? clock(m.until) : '-'}</td>
          <td class="num">${m.trips}</td><td class="num">${m.backoff_level}</td>
          <td class="num">${m.served_sessions}</td><td class="num">${m.stalled_sessions}</td>
          <td>${m.last_check?.note ?? '-'}</td>
          <td>${m.tripped ? html`<button onClick=${() => resume(m.model)} aria-label=${`Resume model ${m.model}`}>Resume</button>` : null}
            ${errors.get(m.model) ? html`<span class="err" role="alert">${errors.get(m.model)}</span>` : null}</td>
        </tr>`,
      )}</tbody>
    </table>
    ${b.models.length ? null : html`<p class="empty">no models seen yet</p>`}
    <h3>Evidence</h3>
    ${
      evidence.length
        ? html`<table class="grid" id="breaker-evidence">
          <thead><tr><th scope="col">at</th><th scope="col">model</th><th scope="col">decision</th><th scope="col">stalled/served</th>
            <th scope="col">others</th><th scope="col">ratio</th><th scope="col">p</th><th scope="col">sessions</th><th scope="col">note</th></tr></thead>
          <tbody>${evidence.map(
            (e) => html`<tr>
              <td>${clock(e.at)}</td><td>${e.model}</td><td>${e.decision}</td>
              <td>${e.model_rate.stalled}/${e.model_rate.served}</td><td>${e.others.stalled}/${e.others.served}</td>
              <td>${cell(e.ratio)}</td><td>${cell(e.p_value)}</td>
              <td title=${e.sessions.map((s) => s.session).join(' ')}>${e.sessions.length}</td><td>${e.note}</td>
            </tr>`,
          )}</tbody></table>`
        : html`<p class="empty">no trips or held comparisons</p>`
    }
  </section>`;
}
