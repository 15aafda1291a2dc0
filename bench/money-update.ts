// What the money detector's one update of a session's packed spend costs inside a unit of
// work on the memory backend, beside a unit that only commits its input id, in one run:
//   A  a unit with its input id only (the baseline);
//   B  A plus one store.update of the session's packed spend, as the detector makes it
//      (decode, add the call, encode, the session's expiry);
//   C  A plus the same update with the input-id cache of the store full (as after
//      200,000 inputs: a long-running service);
//   D  C without the update (the cost of a full input-id cache alone).
//   node bin/run-ts.mjs bench/money-update.ts [-- --units 50000]
import 'reflect-metadata';
import { z } from 'zod';
import { silentLogger } from '../core/logger.ts';
import { MemoryStore } from '../core/store/memory.ts';
import { UnitStore, Units } from '../core/unit.ts';
import { addSpend, decodeSpend, encodeSpend, newSessionSpend } from '../detectors/money/ledger.ts';
import { benchArgs } from './args.ts';

const args = benchArgs(z.strictObject({ units: z.coerce.number().int().positive().default(50_000) }));

let ids = 0;
async function run(fill: number, update: boolean): Promise<number> {
  const base = new MemoryStore();
  const store = new UnitStore(base);
  const units = new Units(store, silentLogger());
  // (the input-id cache as a long-running service has it)
  for (let i = 0; i < fill; i++) await units.run(() => undefined, [`in:fill${ids++}`]);
  const one = async (i: number) => {
    await units.run(async () => {
      if (!update) return;
      await store.update<unknown, number>(`p:money:s:ses_${i % 200}`, (cur) => {
        const st = decodeSpend(cur) ?? newSessionSpend(i);
        const r = addSpend(st, { kind: 'tool', calls: 1, tokens: 0, usd: 0, ts: i, agent: 'build' });
        return { value: encodeSpend(st), result: r.c, ttlMs: 7 * 86_400_000 };
      });
    }, [`in:${ids++}`]);
  };
  for (let i = 0; i < 5_000; i++) await one(i); // warm-up
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < args.units; i++) await one(i);
  return Number(process.hrtime.bigint() - t0) / 1e3 / args.units;
}

const a = await run(0, false);
const b = await run(0, true);
const d = await run(200_000, false);
const c = await run(200_000, true);
const f = (x: number) => `${x.toFixed(2)} us/unit`;
console.log(`money update micro-bench, ${args.units} units each, node ${process.version}`);
console.log(`A input id only                       ${f(a)}`);
console.log(
  `B with the spend update               ${f(b)}   update ${(b - a).toFixed(2)} us (${(b / a).toFixed(2)}x A)`,
);
console.log(`D input id only, input cache full     ${f(d)}   (${(d / a).toFixed(2)}x A)`);
console.log(
  `C with the update, input cache full   ${f(c)}   update ${(c - d).toFixed(2)} us (${(c / a).toFixed(2)}x A)`,
);
