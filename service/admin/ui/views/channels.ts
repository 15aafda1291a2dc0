import { html } from 'htm/preact';
import { api } from '../api.ts';
import { clock, duration } from '../format.ts';
import { act, type Channel, S } from '../state.ts';

const SEVERITIES = ['info', 'warning', 'critical'];
const results = new Map<string, { text: string; cls: string }>();
const errors = new Map<string, string>();

interface TestAnswer {
  outcome: string;
  attempts?: number;
  reason?: string;
}

function ChannelRow({ c, onChange }: { c: Channel; onChange: () => void }) {
  const id = `ch-${c.name}`;
  // Shown at once (a redraw before the answer must not flip the control back), undone if refused.
  const patch = async (body: Partial<Channel>) => {
    const undo = Object.fromEntries(Object.keys(body).map((k) => [k, c[k as keyof Channel]]));
    const set = (p: Partial<Channel>) => {
      S.channels = S.channels.map((x) => (x.name === c.name ? { ...x, ...p } : x));
    };
    set(body);
    onChange();
    const err = await act(() => api('PATCH', `/channels/${encodeURIComponent(c.name)}`, body));
    errors.set(c.name, err);
    if (err) set(undo);
    onChange();
  };
  const test = async () => {
    results.set(c.name, { text: 'sending', cls: 'pending' });
    onChange();
    let r: TestAnswer | undefined;
    const err = await act(async () => {
      r = await api<TestAnswer>('POST', `/channels/${encodeURIComponent(c.name)}/test`);
    });
    if (err) results.set(c.name, { text: `error: ${err}`, cls: 'err' });
    else if (r?.outcome === 'delivered')
      results.set(c.name, { text: `delivered (${r.attempts ?? 1} attempt${r.attempts === 1 ? '' : 's'})`, cls: 'ok' });
    else if (r?.outcome === 'failed') results.set(c.name, { text: `failed: ${r.reason ?? 'unknown'}`, cls: 'err' });
    else results.set(c.name, { text: r?.outcome ?? 'queued', cls: 'pending' });
    onChange();
  };
  const res = results.get(c.name);
  const recent = S.deliveries.filter((d) => d.channel === c.name).slice(0, 5);
  return html`<tbody data-channel=${c.name}>
    <tr>
      <th scope="row">${c.name}</th>
      <td>${c.type}</td>
      <td>
        <input type="checkbox" id=${`${id}-enabled`} data-knob="notifications.channels[].enabled" checked=${c.enabled}
          onChange=${(e: Event) => patch({ enabled: (e.target as HTMLInputElement).checked })} />
        <label for=${`${id}-enabled`}>enabled</label>
      </td>
      <td>
        <label for=${`${id}-sev`}>min severity</label>
        <select id=${`${id}-sev`} data-knob="notifications.channels[].min_severity" value=${c.min_severity}
          onChange=${(e: Event) => patch({ min_severity: (e.target as HTMLSelectElement).value })}>
          ${SEVERITIES.map((s) => html`<option value=${s} selected=${s === c.min_severity}>${s}</option>`)}
        </select>
      </td>
      <td>
        <input type="checkbox" id=${`${id}-resolve`} data-knob="notifications.channels[].resolve_messages" checked=${c.resolve_messages}
          onChange=${(e: Event) => patch({ resolve_messages: (e.target as HTMLInputElement).checked })} />
        <label for=${`${id}-resolve`}>resolve messages</label>
      </td>
      <td>${c.rate_limit.max} per ${duration(c.rate_limit.window)}, quiet ${duration(c.quiet_window)}</td>
      <td>
        <button class="test" onClick=${test} disabled=${res?.cls === 'pending' && res.text === 'sending'}
          aria-label=${`Send test alert to ${c.name}`}>Send test alert</button>
        <span class=${`result ${res?.cls ?? ''}`} role="status">${res?.text ?? ''}</span>
        ${errors.get(c.name) ? html`<span class="err" role="alert">${errors.get(c.name)}</span>` : null}
      </td>
    </tr>
    <tr class="sub"><td colspan="7">
      ${
        recent.length
          ? html`<table class="mini"><tbody>${recent.map(
              (d) =>
                html`<tr class=${`o-${d.outcome}`}><td>${clock(d.at)}</td><td>${d.outcome}${d.test ? ' (test)' : ''}</td><td>${d.state} ${d.title}</td><td>${d.reason ?? ''}</td></tr>`,
            )}</tbody></table>`
          : html`<span class="empty">no deliveries yet</span>`
      }
    </td></tr>
  </tbody>`;
}

export function ChannelsView({ onChange }: { onChange: () => void }) {
  return html`<section aria-labelledby="h-channels">
    <h2 id="h-channels">Channels</h2>
    <table class="grid" id="channels">
      <thead><tr><th scope="col">name</th><th scope="col">type</th><th scope="col">enabled</th><th scope="col">severity</th>
        <th scope="col">resolve</th><th scope="col">limits</th><th scope="col">test</th></tr></thead>
      ${S.channels.map((c) => html`<${ChannelRow} key=${c.name} c=${c} onChange=${onChange} />`)}
    </table>
    ${S.channels.length ? null : html`<p class="empty">no channels configured</p>`}
  </section>`;
}
