import { writeFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { feedLedger, ledgerOverlay } from '../cli/ledger-replay.ts';
import { main } from '../cli/main.ts';
import { FakeClock } from '../core/clock.ts';
import type { Vigil } from '../core/vigil.ts';
import type { LedgerView } from '../detectors/money/index.ts';
import { type App, buildServer } from '../service/server.ts';
import { generateCalibration, toJsonl } from './fixtures/calibration.ts';
import { tempDir, testVigil } from './helpers/index.ts';

// The calibration set (test/fixtures/calibration.ts) replayed for its ledger: `vigil
// replay --ledger` prints, per loop, the spend before the flag and before the action in
// warn and in auto_recover, and the totals; the same inputs sent to a running service
// over HTTP give the same figures at GET /ledger and in `vigil report`.

const cal = generateCalibration();
const loops = cal.cases.filter((c) => c.label === 'loop').map((c) => c.id);
const dir = tempDir('vigil-ledger');
const input = join(dir, 'calibration.jsonl');
writeFileSync(input, toJsonl(cal.inputs));

async function run(args: string[]) {
  let out = '';
  let err = '';
  const code = await main(args, {
    out: (s) => {
      out += s;
    },
    err: (s) => {
      err += s;
    },
    env: { PATH: '/nonexistent' },
  });
  return { code, out, err };
}

type Run = LedgerView & { mode: string };
let replayed: Run[] = [];
let text = '';

beforeAll(async () => {
  const j = await run(['replay', input, '--ledger', '--json']);
  expect(j.code, j.err).toBe(0);
  replayed = j.out
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l));
  const t = await run(['replay', input, '--ledger']);
  expect(t.code, t.err).toBe(0);
  text = t.out;
}, 120_000);

describe('vigil replay --ledger on the calibration set', () => {
  it('prints per loop the spend before the flag and before the action, in warn and in auto_recover, and the totals', () => {
    expect(replayed.map((r) => r.mode)).toEqual(['warn', 'auto_recover']);
    expect(text).toMatch(
      /SESSION\s+AGENT\s+RULE\s+warn: CALLS TO FLAG\s+\$ TO FLAG\s+\$ TO ACTION\/END\s+OUTCOME\s+auto_recover: CALLS TO FLAG\s+\$ TO FLAG\s+\$ TO ACTION\/END\s+OUTCOME\n/,
    );
    // Every labelled loop has its line, with its figures in both modes.
    for (const id of loops) expect(text).toMatch(new RegExp(`\\n${id}\\s+\\S+\\s+\\S+\\s+\\d+\\s+\\$\\d+\\.\\d\\d\\s`));
    // No healthy session is in the ledger: every flagged stretch is a labelled loop.
    const flagged = new Set(replayed.flatMap((r) => r.stretches.map((x) => x.session)));
    const healthy = cal.cases.filter((c) => c.label === 'ok').map((c) => c.id);
    for (const id of healthy) expect(flagged.has(id), id).toBe(false);
    const [warn, recover] = replayed;
    expect(text).toContain(
      `warn: ${warn.summary.loops} stretches, $${warn.summary.before_flag.usd.toFixed(2)} before the flag, $${warn.summary.before_action.usd.toFixed(2)} before the action or the end`,
    );
    expect(text).toMatch(
      /auto_recover against warn: \$\d+\.\d\d \(\d+%\) of the spend in flagged stretches comes after the action\n/,
    );
    // Warn acts on nothing; auto_recover acts on the loops that reach looping, before their end.
    expect(warn.summary.by_outcome.acted).toBe(0);
    expect(warn.stretches.every((x) => x.to_action === null)).toBe(true);
    expect(recover.summary.by_outcome.acted).toBeGreaterThan(5);
    expect(recover.summary.before_action.usd).toBeLessThan(warn.summary.before_action.usd);
    // Before the flag the modes agree: the first flag of each loop comes from the same judge.
    const firstFlag = (r: Run) =>
      Object.fromEntries(
        [...new Set(r.stretches.map((x) => x.session))].map((s) => {
          const x = r.stretches.find((y) => y.session === s)!;
          return [s, x.to_flag];
        }),
      );
    expect(firstFlag(recover)).toEqual(firstFlag(warn));
    // The day's counters saw all spend; the stretches are part of it.
    expect(warn.spend.usd).toBeGreaterThan(warn.summary.before_action.usd);
    expect(warn.spend.loop_usd).toBeCloseTo(warn.summary.before_action.usd, 2);
  });
});

describe('the same inputs through a running service', () => {
  let vigil: Vigil;
  let app: App;
  let base = '';
  const clock = new FakeClock(
    Math.min(
      ...cal.inputs
        .slice(0, 100)
        .map((i) => (i.type === 'request' ? i.record.ts : i.type === 'progress' ? i.event.ts : Infinity)),
    ),
  );

  beforeAll(async () => {
    vigil = await testVigil({
      backend: 'memory',
      clock,
      overlay: { ...ledgerOverlay('auto_recover'), server: { rate_limit: { max: 1_000_000 } } },
    });
    app = await buildServer(vigil);
    await app.listen({ host: '127.0.0.1', port: 0 });
    base = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
    const post = async (url: string, payload: unknown) => {
      const r = await app.inject({ method: 'POST', url, payload: payload as object });
      if (r.statusCode !== 202) throw new Error(`${url}: ${r.statusCode} ${r.body}`);
    };
    await feedLedger(
      cal.inputs,
      clock,
      {
        progress: (ev) => post('/progress', ev),
        request: (rec) => post('/requests', rec),
        tick: (now) => vigil.engine.tick(now),
      },
      vigil.knobs.get<{ idle_close: number }>('money').idle_close,
    );
  }, 180_000);

  afterAll(async () => {
    await app.close();
    await vigil.close();
  });

  it('GET /ledger answers the figures the replay printed for auto_recover', async () => {
    const got = (await (await fetch(`${base}/ledger?since=30d&limit=100000`)).json()) as LedgerView;
    const want = replayed.find((r) => r.mode === 'auto_recover')!;
    expect(got.summary).toEqual(want.summary);
    expect(got.stretches).toEqual(want.stretches);
    expect(got.spend).toEqual(want.spend);
  });

  it('vigil report prints them: the headline, each loop, the groups; --json is GET /ledger', async () => {
    const want = replayed.find((r) => r.mode === 'auto_recover')!;
    const j = await run(['report', '--url', base, '--since', '30d', '--json']);
    expect(j.code, j.err).toBe(0);
    const view = JSON.parse(j.out) as LedgerView;
    expect(view.summary).toEqual(want.summary);
    const t = await run(['report', '--url', base, '--since', '30d', '--by', 'agent']);
    expect(t.code, t.err).toBe(0);
    const s = want.summary;
    expect(t.out).toContain(
      `${s.loops} loops caught, $${s.before_action.usd.toFixed(2)} spent in them before action ($${s.before_flag.usd.toFixed(2)} before the flag), median ${s.median_calls_to_flag} calls to flag`,
    );
    expect(t.out).toContain(`, ${s.open} still open\n`);
    expect(t.out).toMatch(
      /\nFLAGGED\s+SESSION\s+AGENT\s+MODEL\s+RULE\s+LEVEL\s+CALLS TO FLAG\s+\$ TO FLAG\s+CALLS\s+\$\s+MIN\s+OUTCOME\n/,
    );
    expect(t.out).toMatch(
      // (rows by spend: the calibration's busy orchestrators put atlas first)
      /\nby agent\nAGENT\s+LOOPS\s+OPEN\s+\$ BEFORE FLAG\s+\$ BEFORE ACTION\s+CALLS\n(?:\S+\s+\d+.*\n)*sisyphus-junior\s+\d+/,
    );
    const bad = await run(['report', '--url', base, '--since', 'yesterday']);
    expect(bad.code).toBe(2);
    expect(bad.err).toContain('--since: not a duration');
  });
});
