import type { AlertInput } from '../core/alert.ts';

/**
 * A blind watchdog (opencode's API changed shape) must not pass for "all healthy": one
 * warning while it is blind, resolved by the next tick that reads again. The service
 * raises what this returns with the heartbeat (transitions only, like every alert).
 */
export function blindAlert(result: { status: string; error?: string }): AlertInput | undefined {
  const base = {
    dedup_key: 'watchdog:blind',
    severity: 'warning',
    title: 'watchdog is blind',
    source: 'watchdog',
  } as const;
  if (result.status === 'blind') {
    return {
      ...base,
      summary: `the watchdog cannot read opencode: ${result.error ?? 'unexpected API shape'}`.slice(0, 1024),
    };
  }
  if (result.status === 'ok' || result.status === 'flagged' || result.status === 'idle') {
    return { ...base, state: 'resolve', summary: 'the watchdog reads opencode again' };
  }
  return undefined;
}
