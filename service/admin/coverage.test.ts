import { describe, expect, it } from 'vitest';
import { createRegistry } from '../../builtins.ts';
import { configLeaves, controlledLeaves, NOT_IN_ADMIN, reasonFor } from './coverage.ts';

// Knob coverage (the browser test checks the same set against the rendered page).
describe('knob coverage', () => {
  const registry = createRegistry();
  const leaves = configLeaves(registry);
  const controlled = new Set(controlledLeaves(registry));

  it('enumerates the whole config schema', () => {
    for (const k of ['progress.window', 'modes.auto_recover.max_recoveries', 'breaker.alpha', 'server.port'])
      expect(leaves).toContain(k);
    expect(leaves).toContain('notifications.channels[].min_severity');
    expect(leaves).toContain('notifications.channels[].options.webhook.url');
    expect(leaves.length).toBeGreaterThan(80);
  });

  it('every knob has a control on the page or a recorded reason', () => {
    const missing = leaves.filter((l) => !controlled.has(l) && !reasonFor(l));
    expect(missing, 'add a control, or a reason in service/admin/coverage.ts NOT_IN_ADMIN').toEqual([]);
  });

  it('every control is a knob, and every recorded reason still matches a knob without a control', () => {
    expect([...controlled].filter((c) => !leaves.includes(c))).toEqual([]);
    const stale = Object.keys(NOT_IN_ADMIN).filter(
      (p) => !leaves.some((l) => !controlled.has(l) && (l === p || l.startsWith(`${p}.`))),
    );
    expect(stale).toEqual([]);
  });

  it('the live knob sections are all controlled: mode and every threshold', () => {
    for (const l of leaves.filter((x) => /^(progress|breaker|modes)\./.test(x)))
      expect(controlled.has(l), l).toBe(true);
  });
});
