import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { SessionRow } from '../core/engine.ts';
import { http } from './fixtures/opencode-e2e/procs.ts';
import { flushPrefix, REDIS_URL, testPrefix } from './helpers/index.ts';
import { script, type ToolCall } from './helpers/progress.ts';
import { crash, postUntilAccepted, type Served, vigilServe } from './helpers/serve.ts';

// Input idempotency is the service's, not a process's: a client that retries against
// another instance (its first answer was lost) sends the same input id to two instances
// on one Redis, possibly at the same moment. Here every one of 40 distinct tool calls is
// posted to both instances at once; the session must read as if each was posted once:
// 40 calls, and the verdict and the transitions of the same calls posted once to one
// instance.

const prefix = testPrefix();
let a: Served;
let b: Served;

beforeAll(async () => {
  const config = {
    store: { backend: 'redis', key_prefix: prefix },
    server: { rate_limit: { max: 1_000_000, window: '1m' } },
    notifications: { channels: [{ name: 'desktop', remove: true }] },
  };
  [a, b] = await Promise.all(
    ['vigil-a', 'vigil-b'].map((name) => vigilServe({ name, config, env: { REDIS_URL: REDIS_URL } })),
  );
}, 60_000);

afterAll(async () => {
  for (const s of [a, b]) if (s) await crash(s);
  await flushPrefix(prefix);
});

/**
 * Eight rounds of three reads of one file, then an edit of it that lands: posted once,
 * no run reaches the lookup-run threshold (5) and every round lands, so the session is
 * fine; each call counted twice would make runs of 6 identical reads (stalling).
 */
const CALLS: ToolCall[] = Array.from({ length: 8 }, (_, k) => [
  { tool: 'read', target: `src/f${k}.ts` },
  { tool: 'read', target: `src/f${k}.ts` },
  { tool: 'read', target: `src/f${k}.ts` },
  { tool: 'read', target: `src/f${k}.ts` },
  { tool: 'edit', target: `src/f${k}.ts`, landed: true },
]).flat();

type Answer = { verdicts: { session: string; from: string; to: string }[] };

const rowOf = async (s: Served, session: string): Promise<SessionRow | undefined> =>
  (await http<SessionRow[]>('GET', `${s.url}/sessions?limit=10000`)).data.find((r) => r.session === session);

/** What the readout says of a session, without what differs between two sessions by design (ids, times). */
const judged = (r: SessionRow | undefined) =>
  r && {
    verdict: r.verdict,
    reason: r.reason,
    calls: r.calls,
    landed: r.landed,
    turns_since_landed: r.turns_since_landed,
    top_target: r.top_target,
    top_count: r.top_count,
  };

describe('two instances on one Redis given the same input at once', () => {
  it('judge it once: 40 calls counted, the verdict of posting each once', async () => {
    expect(CALLS).toHaveLength(40);
    const once = `ses_once_${prefix.slice(-8)}`;
    const both = `ses_both_${prefix.slice(-8)}`;

    // The reference: each call posted once, to one instance.
    const onceMoves: string[] = [];
    for (const ev of script(once, CALLS)) {
      const r = await http<Answer>('POST', `${a.url}/progress`, ev);
      expect(r.status).toBe(202);
      for (const v of r.data.verdicts) onceMoves.push(`${v.from}->${v.to}`);
    }

    // The same calls, each to both instances at the same moment. A 503 (the store's
    // compare-and-set lost to the other instance) is retried, as a sensor does.
    const bothMoves: string[] = [];
    let retries = 0;
    const onRetry = () => {
      retries++;
    };
    for (const ev of script(both, CALLS)) {
      const rs = await Promise.all([a, b].map((s) => postUntilAccepted(`${s.url}/progress`, ev, { onRetry })));
      for (const r of rs) for (const v of (r.data as Answer).verdicts) bothMoves.push(`${v.from}->${v.to}`);
    }

    const ref = judged(await rowOf(a, once));
    const fromA = judged(await rowOf(a, both));
    const fromB = judged(await rowOf(b, both));
    console.log(
      `same input at two instances: reference ${JSON.stringify(ref)}; doubled, read at A ${JSON.stringify(fromA)}, at B ${JSON.stringify(fromB)}; transitions once [${onceMoves}] doubled [${bothMoves}]; ${retries} retries`,
    );
    expect(ref?.calls).toBe(40);
    expect(fromA?.calls).toBe(40);
    expect(fromB?.calls).toBe(40);
    expect(fromA).toEqual(ref);
    expect(fromB).toEqual(ref);
    // Each transition reported once between the two instances' answers.
    expect(bothMoves).toEqual(onceMoves);
  }, 60_000);
});
