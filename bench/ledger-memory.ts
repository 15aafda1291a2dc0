// Redis memory the ledger uses per flagged stretch: a redis-server of its own, a Vigil on
// it in auto_recover, then N sessions that each loop until the mode acts (a closed
// stretch in the day's list), and N more that stay flagged (open stretches: the index
// entry and the flag in the session's spend). `used_memory` before and after each
// phase, divided by N; beside it MEMORY USAGE of the ledger's keys by family.
//   node bin/run-ts.mjs bench/ledger-memory.ts [--stretches 1000]
import 'reflect-metadata';
import { z } from 'zod';
import { createVigil } from '../index.ts';
import { LOOP_KNOBS, loopEvents } from '../service/admin/testkit.ts';
import { benchArgs } from './args.ts';
import { ownRedis } from './serve.ts';

const args = benchArgs(z.strictObject({ stretches: z.coerce.number().int().min(10).max(100_000).default(1_000) }));
const { url, client: r, used } = await ownRedis();

async function vigilIn(mode: string) {
  return createVigil({
    env: {},
    overlay: {
      store: { backend: 'redis', redis_url: url, key_prefix: 'vigil' },
      detection: { tick_interval: 0 },
      notifications: { channels: [] },
      modes: { mode },
      progress: LOOP_KNOBS,
    },
  });
}

/** One session's loop: a request (a few cents, realistic ids and model), then the same read, `turns` times. */
async function loop(v: Awaited<ReturnType<typeof vigilIn>>, i: number, phase: string, turns: number) {
  const session = `ses_${phase}${i.toString().padStart(6, '0')}R0k9y2hQm1Vx`;
  const parent = `ses_${phase}${i.toString().padStart(6, '0')}R0k9y2hQm1Va`;
  const evs = loopEvents(session, turns, { parent, agent: 'sisyphus-junior' });
  for (const [t, ev] of evs.entries()) {
    await v.requests({
      session_id: session,
      parent_session_id: parent,
      agent: 'sisyphus-junior',
      request_id: `msg_${phase}_${i}_${t}`,
      model: 'openrouter/z-ai/glm-5.3-flash',
      prompt_tokens: 40_000 + 1_500 * t,
      cost_usd: 0.004_321,
      ts: Date.now(),
    });
    await v.progress({ ...ev, kind: 'tool' as const, ts: Date.now() });
  }
}

const keysBy = async (pattern: RegExp) => {
  const fam = new Map<string, { n: number; bytes: number }>();
  let cursor = '0';
  do {
    const [next, batch] = await r.scan(cursor, 'MATCH', 'vigil:p:money:*', 'COUNT', 1000);
    cursor = next;
    for (const k of batch) {
      // Sessions by phase (ses_c: closed, ses_o: open), days as *.
      const f = k.replace(pattern, (m) => (m.startsWith('ses_') ? `${m.slice(0, 5)}*` : '*'));
      const e = fam.get(f) ?? { n: 0, bytes: 0 };
      e.n++;
      e.bytes += Number(await r.memory('USAGE', k));
      fam.set(f, e);
    }
  } while (cursor !== '0');
  return fam;
};

// Phase 1: closed stretches (auto_recover acts at looping: 6 turns with these knobs).
const closedV = await vigilIn('auto_recover');
await loop(closedV, 0, 'warm', 6);
const before = await used();
for (let i = 1; i <= args.stretches; i++) await loop(closedV, i, 'c', 6);
const afterClosed = await used();
const closed =
  (await closedV.engine
    .detectors()
    .find((d) => d.type === 'money')
    ?.health?.()) ?? {};
await closedV.close();

// Phase 2: open stretches (warn: flagged, never acted on).
const openV = await vigilIn('warn');
const beforeOpen = await used();
for (let i = 1; i <= args.stretches; i++) await loop(openV, i, 'o', 6);
const afterOpen = await used();
const open =
  (await openV.engine
    .detectors()
    .find((d) => d.type === 'money')
    ?.health?.()) ?? {};
const families = await keysBy(/ses_[a-z]+\d+R0k9y2hQm1V[a-z]|\d{4}-\d\d-\d\d/g);
const listLen = Number(await r.llen(`vigil:p:money:l:${new Date().toISOString().slice(0, 10)}`));
await openV.close();
await r.quit();

const perSession = (afterClosed - before) / args.stretches;
console.log(
  `ledger memory bench: ${args.stretches} stretches closed by auto_recover, then ${args.stretches} left open (warn), redis-server of its own`,
);
console.log(
  `closed: ${listLen} in the day's list; open index: ${JSON.stringify(open.open_stretches)} (closed phase left ${JSON.stringify(closed.open_stretches)} open)`,
);
console.log(
  `used_memory per closed stretch and its session: ${perSession.toFixed(0)} B (every key of the loop: judge, hygiene, tree, ledger)`,
);
console.log(
  `used_memory per open stretch and its session: ${((afterOpen - beforeOpen) / args.stretches).toFixed(0)} B`,
);
console.log('the ledger s keys by family (MEMORY USAGE; a list or the open index: its total over the entries in it):');
for (const [f, e] of [...families].sort((a, b) => b[1].bytes - a[1].bytes)) {
  const per = f.endsWith(':l:*') ? e.bytes / listLen : f.endsWith(':open') ? e.bytes / args.stretches : e.bytes / e.n;
  const what = f.endsWith(':l:*') ? 'per closed stretch' : f.endsWith(':open') ? 'per open stretch' : 'per key';
  console.log(`  ${f.padEnd(32)} ${per.toFixed(0).padStart(6)} B ${what}   (${e.n} keys)`);
}
process.exit(0);
