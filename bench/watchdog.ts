// The watchdog's DB fallback on a small and a 10x larger opencode.db with the SAME
// recent activity: a tick after a small append should cost about the same on both.
//   node bin/run-ts.mjs bench/watchdog.ts [--sessions N] [--steps N] [--active N] [--factor N] [--rounds N] [--quick]
// Both DBs hold `active` sessions in use (each with an explore child), identical in
// both, and history: `sessions` (small) or `sessions x factor` (large) idle sessions of
// `steps` tool calls each. Each round appends one finished step to every active session
// (and finishes a call left running the round before, an in-place update), then times
// one `runTick` per DB against a stub service (the whole tick: lock, state and cache
// files, the DB read, the judge, the report). Printed beside it: the DB read alone,
// the first tick (nothing kept: the active sessions read in full), and the fallback as
// it was before (the replay reader over the whole DB, then the judge).
// Goal: large tick <= 1.5x small tick.
import 'reflect-metadata';
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { z } from 'zod';
import { createRegistry } from '../builtins.ts';
import { loadConfig } from '../core/config.ts';
import type { ReplayInput } from '../core/replay.ts';
import { opencodeDbReader } from '../sensors/opencode/replay.ts';
import { type ListedMessage, OcDb } from '../test/helpers/opencode-db.ts';
import { judgeSessions, type LoadedSession } from '../watchdog/collect.ts';
import { collectFromDb, type DbCache, dbCachePath, readDbCache, writeDbCache } from '../watchdog/dbread.ts';
import { runTick, watchdogKnobs } from '../watchdog/tick.ts';
import { benchArgs } from './args.ts';

const quick = process.argv.includes('--quick');
const args = benchArgs(
  z.strictObject({
    sessions: z.coerce
      .number()
      .int()
      .min(1)
      .default(quick ? 60 : 200),
    steps: z.coerce
      .number()
      .int()
      .min(1)
      .default(quick ? 30 : 50),
    active: z.coerce.number().int().min(1).max(50).default(5),
    factor: z.coerce.number().int().min(2).default(10),
    rounds: z.coerce
      .number()
      .int()
      .min(1)
      .default(quick ? 5 : 9),
  }),
  process.argv.slice(2).filter((a) => a !== '--quick'),
);

// ---------------------------------------------------------------------------
// opencode-shaped history (deterministic ids and calls)

let seq = 0;
const nid = (p: string) => `${p}_${(++seq).toString(36).padStart(12, '0')}`;
const FILES = Array.from({ length: 40 }, (_, i) => `/work/project/src/module_${i}.ts`);

function user(at: number): ListedMessage {
  return {
    info: { id: nid('msg'), role: 'user', time: { created: at }, agent: 'build' },
    parts: [{ id: nid('prt'), type: 'text', text: 'Make the check pass. '.repeat(8) }],
  };
}

function call(k: number): { tool: string; input: Record<string, unknown>; metadata: Record<string, unknown> } {
  const f = FILES[(k * 7) % FILES.length];
  switch (k % 5) {
    case 0:
    case 1:
      return { tool: 'read', input: { filePath: f }, metadata: {} };
    case 2:
      return { tool: 'grep', input: { pattern: `symbol${k % 13}`, path: '/work/project/src' }, metadata: {} };
    case 3:
      return {
        tool: 'edit',
        input: { filePath: f, oldString: 'const a = 1;', newString: `const a = ${k};` },
        metadata: { diff: `--- a\n+++ b\n-const a = 1;\n+const a = ${k};\n` },
      };
    default:
      return { tool: 'bash', input: { command: 'npm test' }, metadata: { exit: k % 2 } };
  }
}

/** One assistant step with one tool call, its output a few hundred bytes (opencode keeps them). */
function step(at: number, k: number, ids?: string[], running = false): ListedMessage {
  const [mid, a, b, d] = ids ?? [nid('msg'), nid('prt'), nid('prt'), nid('prt')];
  const c = call(k);
  return {
    info: {
      id: mid,
      role: 'assistant',
      agent: 'build',
      mode: 'build',
      modelID: 'bench-model',
      providerID: 'fake',
      path: { cwd: '/work/project', root: '/work/project' },
      cost: running ? 0 : 0.002,
      tokens: running
        ? { total: 0, input: 0, output: 0, reasoning: 0, cache: { read: 0, write: 0 } }
        : { total: 21_000, input: 1_000, output: 40, reasoning: 0, cache: { read: 20_000, write: 0 } },
      time: running ? { created: at } : { created: at, completed: at + 900 },
      ...(running ? {} : { finish: 'tool-calls' }),
    },
    parts: [
      { id: a, type: 'step-start', snapshot: 'f'.repeat(40) },
      {
        id: b,
        type: 'tool',
        callID: `call_${b}`,
        tool: c.tool,
        state: running
          ? { status: 'running', input: c.input, time: { start: at + 100 } }
          : {
              status: 'completed',
              input: c.input,
              output: `line of output ${k}\n`.repeat(20),
              title: c.tool,
              metadata: c.metadata,
              time: { start: at + 100, end: at + 800 },
            },
      },
      ...(running ? [] : [{ id: d, type: 'step-finish', reason: 'tool-calls', snapshot: 'e'.repeat(40) }]),
    ],
  };
}

function history(w: OcDb, sid: string, t0: number, steps: number, o: { parent?: string; agent?: string } = {}) {
  w.session({ id: sid, ...o, created: t0, updated: t0 + steps * 1_000 + 1_000 });
  w.message(sid, user(t0));
  for (let k = 0; k < steps; k++) w.message(sid, step(t0 + (k + 1) * 1_000, k));
}

// ---------------------------------------------------------------------------
// the two DBs

const dir = mkdtempSync(join(tmpdir(), 'vigil-bench-wd-'));
const now = Date.now();
const activeIds = Array.from({ length: args.active }, (_, i) => `ses_active${String(i).padStart(18, '0')}`);
const childIds = activeIds.map((_, i) => `ses_child${String(i).padStart(19, '0')}`);

const t1 = performance.now();
const smallPath = join(dir, 'small', 'opencode.db');
const largePath = join(dir, 'large', 'opencode.db');
mkdirSync(join(dir, 'small'));
mkdirSync(join(dir, 'large'));
let w = new OcDb(smallPath);
w.batch(() => {
  activeIds.forEach((sid, i) => {
    // sessions in use for about an hour, with 4x the steps of an idle one
    history(w, sid, now - 3_600_000 + i * 10, args.steps * 4, { agent: 'build' });
    history(w, childIds[i], now - 1_800_000 + i * 10, 10, { parent: sid, agent: 'explore' });
  });
});
const idle = (db: OcDb, from: number, to: number) =>
  db.batch(() => {
    for (let s = from; s < to; s++) {
      history(db, `ses_idle${String(s).padStart(20, '0')}`, now - 40 * 86_400_000 + s * 60_000, args.steps);
    }
  });
idle(w, 0, args.sessions);
w.close();
copyFileSync(smallPath, largePath);
w = new OcDb(largePath);
idle(w, args.sessions, args.sessions * args.factor);
w.close();
console.log(
  `built: small ${args.sessions} idle + ${args.active} active sessions, large ${args.sessions * args.factor} idle + the same ${args.active}; ${args.steps} steps per idle session (${((performance.now() - t1) / 1000).toFixed(1)} s)\n`,
);

// a stub service: every report taken
const service = createServer((req, res) => {
  req.resume();
  req.on('end', () => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end('{}');
  });
});
await new Promise<void>((r) => service.listen(0, '127.0.0.1', r));
const serviceUrl = `http://127.0.0.1:${(service.address() as AddressInfo).port}`;

function config(name: 'small' | 'large', db: string) {
  return loadConfig({
    registry: createRegistry(),
    env: {},
    overlay: {
      local_compute: { enabled: false },
      watchdog: {
        servers: [],
        service_url: serviceUrl,
        interval: '1d',
        state_file: join(dir, name, 'state.json'),
        lock_file: join(dir, name, 'watchdog.lock'),
        opencode_db: db,
        rc_servers_file: join(dir, name, 'rc-servers.json'),
        transcripts: false,
      },
    },
  });
}
const cfg = { small: config('small', smallPath), large: config('large', largePath) };
const paths = { small: smallPath, large: largePath };
const knobs = watchdogKnobs(cfg.small);

const ms = (t0: number) => performance.now() - t0;
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
// best of the rounds: the machine is shared, the slowest rounds measure the neighbours
const best = (xs: number[]) => Math.min(...xs);
const f = (x: number) => (x >= 100 ? x.toFixed(0) : x.toFixed(1));

// warm up the code paths (not the files: the first ticks below still find nothing kept)
await collectFromDb(smallPath, { since: 0, maxSessions: 50, timeoutMs: 10_000, cache: null });
await (await fetch(`${serviceUrl}/warm-up`, { method: 'POST', body: '{}' })).text();

// the first tick: nothing kept, the active sessions and their children read in full
const first: Record<string, number> = {};
for (const k of ['small', 'large'] as const) {
  const t0 = performance.now();
  const r = await runTick({ config: cfg[k] });
  first[k] = ms(t0);
  if (r.source !== 'db' || r.sessions !== 2 * args.active)
    throw new Error(`${k}: unexpected first tick ${JSON.stringify(r)}`);
}

// rounds: the same small append on both, then one tick each (order alternating)
const writers = { small: new OcDb(smallPath), large: new OcDb(largePath) };
const ticks = { small: [] as number[], large: [] as number[] };
const reads = { small: [] as number[], large: [] as number[] };
let open: { sid: string; at: number; k: number; ids: string[] } | null = null;
for (let r = 0; r < args.rounds; r++) {
  const at = Date.now() + 1;
  // the same writes on both DBs
  const steps = activeIds.map((sid, i) => ({ sid, m: step(at, 1_000 + r * 10 + i) }));
  const run = {
    sid: activeIds[r % activeIds.length],
    at: at + 10,
    k: 2_000 + r,
    ids: [nid('msg'), nid('prt'), nid('prt'), nid('prt')],
  };
  for (const wr of Object.values(writers)) {
    wr.batch(() => {
      // the call left running last round finishes: its rows are updated in place
      if (open) wr.message(open.sid, step(open.at, open.k, open.ids), at);
      for (const x of steps) {
        wr.message(x.sid, x.m, at);
        wr.touch(x.sid, at);
      }
      // one call starts, and runs until the next round
      wr.message(run.sid, step(run.at, run.k, run.ids, true), run.at);
    });
  }
  open = run;
  const order = r % 2 ? (['large', 'small'] as const) : (['small', 'large'] as const);
  for (const k of order) {
    // the DB read alone, from what the last tick kept (read-only: the tick below keeps its own)
    const cache: DbCache | null = readDbCache(dbCachePath(join(dir, k, 'state.json')));
    const since = at - 1;
    const t0 = performance.now();
    const c = await collectFromDb(paths[k], { since, maxSessions: 50, timeoutMs: 10_000, cache });
    judgeSessions(c.sessions, knobs);
    reads[k].push(ms(t0));
    if (c.reads.full !== 0) throw new Error(`${k}: a full read in round ${r}: ${JSON.stringify(c.reads)}`);
    const t1 = performance.now();
    const t = await runTick({ config: cfg[k] });
    ticks[k].push(ms(t1));
    if (t.source !== 'db' || t.sessions !== args.active) throw new Error(`${k}: unexpected tick ${JSON.stringify(t)}`);
  }
}
for (const wr of Object.values(writers)) wr.close();

// the kept reads: what a tick reads and writes besides the DB
const cachePath = dbCachePath(join(dir, 'large', 'state.json'));
const cacheKb = statSync(cachePath).size / 1024;
let t2 = performance.now();
const kept = readDbCache(cachePath);
const cacheRead = ms(t2);
t2 = performance.now();
if (kept) writeDbCache(`${cachePath}.copy`, kept);
const cacheWrite = ms(t2);

// before: the replay reader over the whole DB, grouped per session, then the judge
async function wholeDb(path: string): Promise<number> {
  const t0 = performance.now();
  const loaded = await opencodeDbReader.load(path, {});
  const by = new Map<string, ReplayInput[]>();
  for (const i of loaded.inputs) {
    const id = i.type === 'progress' ? i.event.session_id : i.type === 'request' ? i.record.session_id : '';
    const list = by.get(id);
    if (list === undefined) by.set(id, [i]);
    else list.push(i);
  }
  const active = new Set(activeIds);
  const sessions: LoadedSession[] = [...loaded.sessions].map(([id, info]) => ({
    id,
    ...(info.parent ? { parent: info.parent } : {}),
    active: active.has(id),
    updated: 0,
    inputs: by.get(id) ?? [],
  }));
  judgeSessions(sessions, knobs);
  return ms(t0);
}
const before = { small: await wholeDb(smallPath), large: await wholeDb(largePath) };

service.close();
rmSync(dir, { recursive: true, force: true });

const row = (label: string, s: number, l: number, goal = '') =>
  console.log(
    `${label.padEnd(44)} small ${f(s).padStart(7)} ms   large ${f(l).padStart(7)} ms   ratio ${(l / s).toFixed(2)}${goal ? ` (${goal})` : ''}`,
  );
row(`tick after a small append (best of ${args.rounds})`, best(ticks.small), best(ticks.large), 'goal <= 1.5');
row('  median', median(ticks.small), median(ticks.large));
row('  its DB read and judge alone (best)', best(reads.small), best(reads.large));
row('first tick (nothing kept yet)', first.small, first.large);
row('before: whole DB through the replay reader', before.small, before.large);
console.log(
  `  of which the kept reads (${cacheKb.toFixed(0)} KB): read and checked ${f(cacheRead)} ms, written ${f(cacheWrite)} ms`,
);
console.log(
  `gain on the large DB: ${(before.large / best(ticks.large)).toFixed(0)}x (whole-DB read vs incremental tick)`,
);
