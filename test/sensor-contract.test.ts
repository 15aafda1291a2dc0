import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defineSensor, gapsOf } from '../core/sensor.ts';
import type { Vigil } from '../core/vigil.ts';
import { claudeCodeSensor } from '../sensors/claude-code/descriptor.ts';
import { opencodeSensor } from '../sensors/opencode/descriptor.ts';
import { type App, buildServer } from '../service/server.ts';
import { testVigil } from './helpers/index.ts';

// The sensor contract's visible half: what a mode asks that a session's sensor cannot
// take itself is in the Sessions readout and in /health, per sensor.

describe('sensor contract', () => {
  let vigil: Vigil;
  let app: App;
  beforeAll(async () => {
    vigil = await testVigil({ backend: 'memory', overlay: { modes: { mode: 'auto_compact' } } });
    app = await buildServer(vigil);
  });
  afterAll(async () => {
    await app?.close();
    await vigil?.close();
  });

  const tool = (session: string, i: number) => ({
    kind: 'tool',
    session_id: session,
    tool: 'read',
    call_id: `c${i}`,
    fingerprint: 'a'.repeat(64),
    target: 'src/app.js',
    exit: 0,
    landed: false,
    ts: Date.now(),
  });

  it("the Sessions readout names each session's sensor and the mode's actions it cannot take", async () => {
    for (const [session, plugin] of [
      ['cc-1', 'vigil-claude-code/0.1.0+abc'],
      ['oc-1', 'vigil-opencode/0.1.0+def'],
      ['x-1', 'someone-else/1'],
    ]) {
      const r = await app.inject({
        method: 'POST',
        url: '/progress',
        headers: { 'x-vigil-plugin': plugin },
        payload: tool(session, 1),
      });
      expect(r.statusCode).toBe(202);
    }
    const rows = (await app.inject({ method: 'GET', url: '/sessions' })).json() as Record<string, unknown>[];
    const by = Object.fromEntries(rows.map((r) => [r.session, r]));
    expect(by['cc-1']).toMatchObject({ sensor: 'claude-code', cannot_act: 'compact via inject; toast none' });
    expect(by['oc-1']).toMatchObject({ sensor: 'opencode', cannot_act: '' });
    // a sender that declared no sensor: nothing claimed either way
    expect(by['x-1']).toMatchObject({ sensor: null, cannot_act: '' });
  });

  it("an agent's own loop detection (agent_loop markers) is in the readout and counted as nothing else", async () => {
    const post = (payload: object) =>
      app.inject({ method: 'POST', url: '/progress', headers: { 'x-vigil-plugin': 'vigil-gemini/0.1.0+x' }, payload });
    const events = [1, 2, 3, 4].map((i) => tool('gm-1', i));
    expect((await post(events)).statusCode).toBe(202);
    const before = (await vigil.engine.sessionRow('gm-1')) as Record<string, unknown>;
    const loop = (o: Record<string, unknown>) => ({ kind: 'agent_loop', session_id: 'gm-1', ts: Date.now(), ...o });
    // the nudge twice (a re-read), then the stop
    for (const e of [loop({ call_id: 'n-1' }), loop({ call_id: 'n-1' }), loop({ call_id: 'stop-t1', stopped: true })])
      expect((await post(e)).statusCode).toBe(202);
    const row = (await vigil.engine.sessionRow('gm-1')) as Record<string, unknown>;
    expect(row).toMatchObject({ agent_loop_nudges: 1, agent_loop_stopped: true });
    // no call and no turn more: the same verdict and counts as before the markers
    for (const k of ['calls', 'verdict', 'reason', 'turns_since_landed', 'top_count'])
      expect(row[k]).toEqual(before[k]);
    expect(before.agent_loop_nudges).toBeUndefined();
  });

  it('/health lists every declared sensor, when it last reported and what it cannot do in this mode', async () => {
    const h = (await app.inject({ method: 'GET', url: '/health' })).json() as { sensors: Record<string, unknown>[] };
    const by = Object.fromEntries(h.sensors.map((s) => [s.name, s]));
    expect(by['claude-code']).toMatchObject({ agent: 'Claude Code 2.1', cannot_act: 'compact via inject; toast none' });
    expect(typeof by['claude-code'].last_seen_at).toBe('string');
    expect(by.opencode).toMatchObject({ cannot_act: '' });
  });

  it('the gaps follow the mode: auto_recover asks more of each sensor', () => {
    const asks = ['block_tool', 'abort', 'compact', 'cap_context', 'stop_run', 'toast'] as const;
    expect(gapsOf(claudeCodeSensor, asks).map((g) => `${g.action} ${g.how}`)).toEqual([
      'abort via block_tool',
      'compact via inject',
      'cap_context router',
      'toast none',
    ]);
    expect(gapsOf(opencodeSensor, asks).map((g) => `${g.action} ${g.how}`)).toEqual(['cap_context router']);
  });

  it('a sensor declaration is validated: a missing capability is named', () => {
    const { toast: _, ...caps } = claudeCodeSensor.capabilities;
    expect(() => defineSensor({ ...claudeCodeSensor, name: 'x', capabilities: caps as never })).toThrow(/toast/);
  });
});
