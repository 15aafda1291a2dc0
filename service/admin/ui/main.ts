import { html, render } from 'htm/preact';
import { useEffect, useState } from 'preact/hooks';
import { token } from './api.ts';
import { changed, connect, forgetToken, S, subscribe, useToken } from './state.ts';
import { BreakersView } from './views/breakers.ts';
import { ChannelsView } from './views/channels.ts';
import { HealthView, Watchdog } from './views/health.ts';
import { KnobsView } from './views/knobs.ts';
import { PanelsView } from './views/panels.ts';
import { SessionsView } from './views/sessions.ts';

const VIEWS = [
  ['sessions', 'Sessions'],
  ['channels', 'Channels'],
  ['knobs', 'Knobs'],
  ['breakers', 'Breakers'],
  ['detectors', 'Detectors'],
  ['health', 'Health'],
] as const;
type View = (typeof VIEWS)[number][0];

const viewOf = (): View => {
  const h = location.hash.slice(1);
  return (VIEWS.find(([k]) => k === h)?.[0] ?? 'sessions') as View;
};

function TokenBox() {
  const [text, setText] = useState('');
  if (token.get()) {
    return html`<div class="token"><span>admin token set for this tab</span>
      <button onClick=${forgetToken}>Forget token</button></div>`;
  }
  const cfg = S.meta && !S.meta.token_configured ? ' (not configured on the service: actions are off)' : '';
  return html`<form class="token" onSubmit=${(e: Event) => {
    e.preventDefault();
    if (text.trim()) useToken(text.trim());
    setText('');
  }}>
    <label for="token">Admin token${cfg}</label>
    <input id="token" type="password" autocomplete="off" value=${text}
      onInput=${(e: Event) => setText((e.target as HTMLInputElement).value)} />
    <button type="submit">Use token</button>
  </form>`;
}

function App() {
  const [, bump] = useState(0);
  const [view, setView] = useState<View>(viewOf());
  useEffect(() => subscribe(() => bump((n) => n + 1)), []);
  useEffect(() => {
    const f = () => setView(viewOf());
    addEventListener('hashchange', f);
    return () => removeEventListener('hashchange', f);
  }, []);
  const body =
    S.conn === 'token needed'
      ? html`<p class="need" role="alert">This service needs the admin token to show anything. Enter it above.</p>`
      : !S.loaded
        ? html`<p class="empty">loading</p>`
        : view === 'sessions'
          ? html`<${SessionsView} onChange=${changed} />`
          : view === 'channels'
            ? html`<${ChannelsView} onChange=${changed} />`
            : view === 'knobs'
              ? html`<${KnobsView} onChange=${changed} />`
              : view === 'breakers'
                ? html`<${BreakersView} onChange=${changed} />`
                : view === 'detectors'
                  ? html`<${PanelsView} />`
                  : html`<${HealthView} />`;
  return html`<header>
      <h1>Vigil</h1>
      <nav aria-label="views"><ul>
        ${VIEWS.map(
          ([k, label]) =>
            html`<li><a href=${`#${k}`} aria-current=${view === k ? 'page' : undefined} id=${`tab-${k}`}>${label}</a></li>`,
        )}
      </ul></nav>
      <span class=${`conn conn-${S.conn.replace(' ', '-')}`} id="conn" role="status">${S.conn}</span>
      <${Watchdog} />
      <span class="mode">mode <b id="mode">${S.health?.mode ?? '-'}</b></span>
      <${TokenBox} />
    </header>
    ${S.error ? html`<p class="err" role="alert">${S.error}</p>` : null}
    <main>${body}</main>`;
}

render(html`<${App} />`, document.getElementById('app')!);
void connect();
// Ages (watchdog last tick) are relative to now: redraw now and then; no request is made.
setInterval(changed, 15_000);
