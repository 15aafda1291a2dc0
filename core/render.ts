import type { Alert } from './alert.ts';

// Channels without a lifecycle (desktop, SMS, chat) render the same way, so the
// wording exists once: trigger and escalate as a message, resolve as "recovered".

// A test alert says TEST once per message: the renderers add the mark, so a title that
// already carries one loses it here.
const bare = (a: Alert) => (a.test ? a.title.replace(/^TEST\b:?\s*/i, '') : a.title);

/** A short title for the transition (`TEST: ...` for a test alert). */
export function renderTitle(a: Alert): string {
  const prefix = a.test
    ? 'TEST'
    : a.state === 'resolve'
      ? 'Recovered'
      : a.state === 'escalate'
        ? 'Escalated'
        : undefined;
  return ascii(prefix ? `${prefix}: ${bare(a)}` : a.title);
}

/**
 * One line that says what happened. `mark: false` leaves out the TEST mark, for a
 * channel that shows the line under renderTitle() (which carries it).
 */
export function renderLine(a: Alert, o: { mark?: boolean } = {}): string {
  if (a.state === 'resolve') return ascii(`recovered: ${bare(a)}`);
  const sev = a.severity === 'critical' ? 'CRITICAL' : a.severity === 'warning' ? 'WARNING' : 'INFO';
  return ascii(`${a.test && o.mark !== false ? 'TEST ' : ''}${sev} ${bare(a)}: ${a.summary}`);
}

/** Cut to `max` characters on a word boundary where possible, ending in "...". */
export function truncate(s: string, max: number): string {
  if (s.length <= max) return s;
  if (max <= 3) return s.slice(0, max);
  const cut = s.slice(0, max - 3);
  const sp = cut.lastIndexOf(' ');
  return `${sp > max * 0.6 ? cut.slice(0, sp) : cut}...`;
}

/** Alerts stay ASCII: SMS GSM-7 segments, terminals and logs all take it. */
export function ascii(s: string): string {
  return s.replace(/[^\x20-\x7e\n]/g, '?');
}
