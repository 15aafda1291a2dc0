import { afterEach, describe, expect, it } from 'vitest';
import { createRegistry } from '../builtins.ts';
import { desktopPlugin } from '../channels/desktop/index.ts';
import { pagerdutyPlugin } from '../channels/pagerduty/index.ts';
import { twilioPlugin } from '../channels/twilio/index.ts';
import { webhookPlugin } from '../channels/webhook/index.ts';
import { ConfigError, loadConfig, readRawConfig, validateConfig } from '../core/config.ts';
import { Registry } from '../core/registry.ts';
import { createKernel, type Vigil } from '../core/vigil.ts';
import { behaviorBreakerPlugin } from '../detectors/behavior-breaker/index.ts';
import { noProgressPlugin } from '../detectors/no-progress/index.ts';
import { autoCompactPlugin } from '../modes/auto-compact/index.ts';
import { autoLimitContextPlugin } from '../modes/auto-limit-context/index.ts';
import { autoRecoverPlugin } from '../modes/auto-recover/index.ts';
import { warnPlugin } from '../modes/warn/index.ts';
import { buildServer } from '../service/server.ts';
import { LocalComputeSchema, WatchdogSchema } from '../watchdog/options.ts';

// Session hygiene is an ordinary plugin: a registry without it (the built-in list minus
// one line) has no `hygiene` config section, no knobs, no routes, no readout fields,
// no panels. The kernel names it nowhere. The same checks with the built-in registry
// show each of them present, so the test can fail.

/** createRegistry() without the session-hygiene line. */
const withoutHygiene = () =>
  new Registry()
    .register(desktopPlugin)
    .register(webhookPlugin)
    .register(pagerdutyPlugin)
    .register(twilioPlugin)
    .register(noProgressPlugin)
    .register(behaviorBreakerPlugin)
    .register(warnPlugin)
    .register(autoCompactPlugin)
    .register(autoLimitContextPlugin)
    .register(autoRecoverPlugin)
    .section('local_compute', LocalComputeSchema)
    .section('watchdog', WatchdogSchema);

const overlay = {
  store: { backend: 'memory' },
  notifications: { channels: [] },
  detection: { tick_interval: 0 },
};

const running: { v: Vigil; close: () => Promise<unknown> }[] = [];
afterEach(async () => {
  for (const r of running.splice(0)) {
    await r.close();
    await r.v.close();
  }
});

/** default.yaml plus the overlay, read for what this registry has (a removed detector's section goes with it). */
async function build(registry: Registry) {
  const config = loadConfig({ registry, overlay, env: {} });
  const v = await createKernel({ registry, config, env: {} });
  const app = await buildServer(v);
  running.push({ v, close: () => app.close() });
  return { v, app, config };
}

/** A session well past the retire threshold, reported by the router. */
const bulky = Array.from({ length: 3 }, (_, i) => ({
  session_id: 'ses_bulky',
  request_id: `r${i}`,
  model: 'route/m',
  prompt_tokens: 250_000,
  visible_output: true,
  finish_reason: i === 2 ? 'stop' : 'tool_calls',
  ts: Date.now() + i,
}));

describe.each([
  ['the built-in registry', createRegistry, true],
  ['a registry without session-hygiene', withoutHygiene, false],
] as const)('%s', (_name, registry, present) => {
  it(present ? 'has the hygiene section, knobs, route, readout fields and panels' : 'has none of them', async () => {
    const { v, app, config } = await build(registry());
    expect('hygiene' in config).toBe(present);
    expect(v.knobs.sections().includes('hygiene')).toBe(present);
    expect(v.detectors.has('session-hygiene')).toBe(present);
    const schema = (await app.inject({ method: 'GET', url: '/knobs/schema' })).json();
    expect(schema.some((s: { section: string }) => s.section === 'hygiene')).toBe(present);
    expect((await app.inject({ method: 'GET', url: '/envelopes' })).statusCode).toBe(present ? 200 : 404);
    const doc = (await app.inject({ method: 'GET', url: '/openapi.json' })).json();
    expect('/envelopes' in doc.paths).toBe(present);

    expect((await app.inject({ method: 'POST', url: '/requests', payload: bulky })).statusCode).toBe(202);
    const row = (await app.inject({ method: 'GET', url: '/sessions' })).json()[0];
    expect(row.session).toBe('ses_bulky');
    for (const f of ['watch_number', 'hygiene_level', 'hygiene_rule', 'stored_bytes']) expect(f in row).toBe(present);
    expect('watch_number' in row.series).toBe(present);
    expect('session-hygiene' in row.detectors).toBe(present);
    // without it nothing else flags a session for its size: three requests are no loop
    expect(row.verdict).toBe(present ? 'looping' : 'ok');
    const panels = (await app.inject({ method: 'GET', url: '/panels' })).json();
    expect(panels.some((p: { detector: string }) => p.detector === 'session-hygiene')).toBe(present);
    const health = (await app.inject({ method: 'GET', url: '/health' })).json();
    expect('session-hygiene' in health.detectors).toBe(present);
  });
});

describe('config/default.yaml', () => {
  it('its hygiene block is left out for a registry without the detector; an operator naming it still fails', () => {
    expect(loadConfig({ registry: withoutHygiene(), overlay, env: {} })).not.toHaveProperty('hygiene');
    const { raw } = readRawConfig({
      overlay: { ...overlay, hygiene: { per_call_warn: 1000 } },
      env: {},
      registry: withoutHygiene(),
    });
    expect(() => validateConfig(withoutHygiene(), raw, {})).toThrow(ConfigError);
    try {
      validateConfig(withoutHygiene(), raw, {});
    } catch (e) {
      expect((e as ConfigError).problems).toEqual(['hygiene: unknown key']);
    }
  });
});
