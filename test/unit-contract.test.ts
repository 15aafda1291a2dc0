import { afterEach, describe, expect, it } from 'vitest';
import type { Vigil } from '../core/vigil.ts';
import { normalizeCall } from '../sensors/shared/normalize.ts';
import { backends, flushPrefix, testPrefix, testVigil } from './helpers/index.ts';

// The unit of work's contract (core/contracts.ts, Detector): an input may be judged
// again after a conflict, and only the committed run counts. Here every unit's first
// commit is refused as a conflict, so every input is judged twice; what the built-in
// detectors keep outside the store (the sparklines, the agent's own loop counts, the
// spend and ledger metrics) must count each input once, as if nothing had been refused.

const running: { v: Vigil; prefix?: string }[] = [];
afterEach(async () => {
  for (const r of running.splice(0)) {
    await r.v.close();
    if (r.prefix) await flushPrefix(r.prefix);
  }
});

const read = normalizeCall('read', { filePath: '/w/a.js' }, { cwd: '/w' });
const MODEL = 'anthropic/claude-x';

async function vigil(backend: 'memory' | 'redis', conflicts: boolean) {
  const prefix = backend === 'redis' ? testPrefix() : undefined;
  const v = await testVigil({ backend, prefix, overlay: { modes: { mode: 'warn' } } });
  running.push({ v, prefix });
  let refused = 0;
  if (conflicts) {
    const base = v.store.base;
    const real = base.commitUnit.bind(base);
    const tried = new Set<string>();
    base.commitUnit = async (plan) => {
      // each input's first commit: another writer "changed" what it read
      const key = plan.inputs.join('|');
      if (key && !tried.has(key)) {
        tried.add(key);
        refused++;
        return { ok: false, conflicts: [] };
      }
      return real(plan);
    };
  }
  return { v, refused: () => refused };
}

/** The same inputs: a looping session's reads with its model calls, and the agent's own loop nudge. */
async function feed(v: Vigil): Promise<void> {
  const t0 = Date.now() - 60_000;
  for (let i = 0; i < 8; i++) {
    await v.engine.progress([
      {
        kind: 'tool',
        session_id: 'ses_u',
        tool: 'read',
        call_id: `c${i}`,
        fingerprint: read.fingerprint,
        target: read.target,
        exit: 0,
        landed: false,
        ts: t0 + i * 1000,
      },
    ]);
    await v.engine.requests([
      {
        session_id: 'ses_u',
        request_id: `r${i}`,
        model: MODEL,
        prompt_tokens: 1000 + i,
        completion_tokens: 10,
        cost_usd: 0.01,
        ts: t0 + i * 1000 + 500,
      },
    ]);
  }
  await v.engine.progress([
    { kind: 'agent_loop', session_id: 'ses_u', call_id: 'nudge-1', landed: false, ts: t0 + 9000 },
  ]);
}

/** What the inputs left outside the store: the session's readout (sparklines, agent loop) and the spend metrics. */
async function outside(v: Vigil) {
  const row = (await v.engine.sessionRow('ses_u')) as Record<string, unknown>;
  const metrics = await v.metrics.registry.metrics();
  const metric = (name: string) =>
    metrics
      .split('\n')
      .filter((l) => l.startsWith(name) && l.includes(MODEL))
      .map((l) => Number(l.split(' ').pop()))
      .reduce((a, b) => a + b, 0);
  return {
    series: row.series,
    verdict: row.verdict,
    agent_loop_nudges: row.agent_loop_nudges,
    spend_calls: metric('vigil_spend_calls_total'),
    spend_tokens: metric('vigil_spend_prompt_tokens_total'),
  };
}

describe.each(backends())('an input judged again after a conflict counts once (%s)', (backend) => {
  it('sparklines, the agent loop counts and the spend metrics are those of the inputs posted once', async () => {
    const once = await vigil(backend, false);
    await feed(once.v);
    const expected = await outside(once.v);
    expect(expected.spend_calls).toBe(8);
    expect(expected.agent_loop_nudges).toBe(1);
    expect((expected.series as { prompt_tokens: number[] }).prompt_tokens).toHaveLength(8);

    const twice = await vigil(backend, true);
    await feed(twice.v);
    // every input was judged twice: its first unit refused, then judged again and committed
    expect(twice.refused()).toBeGreaterThanOrEqual(17);
    expect(await outside(twice.v)).toEqual(expected);
  });
});
