import { copyFileSync, readFileSync, renameSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createLogger } from '../core/logger.ts';
import type { ReplayInput } from '../core/replay.ts';
import { type NoProgressKnobs, NoProgressKnobsSchema } from '../detectors/no-progress/knobs.ts';
import { opencodeDbReader } from '../sensors/opencode/replay.ts';
import { lit } from '../sensors/opencode/sqlite.ts';
import { needsSqlite3 } from '../test/helpers/external.ts';
import { tempDir } from '../test/helpers/index.ts';
import { type ListedMessage, OcDb } from '../test/helpers/opencode-db.ts';
import { judgeSessions, type LoadedSession } from './collect.ts';
import { collectFromDb, type DbCache, type DbCollected, dbCachePath, readDbCache } from './dbread.ts';

const SQLITE3 = needsSqlite3(import.meta.filename);

// The DB fallback reads only what changed since the last tick. Over one history built
// step by step in a real opencode.db (appends, a tool part going from running to
// completed in place, a revert, a session row change, a replaced file, a message that
// sorts before the tail), each step's incremental read must give what a read from
// scratch gives, and the same verdicts as the whole-history replay reader the fallback
// used before.

const knobs: NoProgressKnobs = NoProgressKnobsSchema.parse({
  window: 30,
  dup_min_events: 10,
  stall_turns: 10,
  loop_turns: 20,
  top_warn: 8,
  top_loop: 16,
  session_repeat_warn: 10,
  session_repeat_loop: 20,
});

const T0 = 1_800_000_000_000;
const SINCE = T0 - 3_600_000;
const ROOT = 'ses_root000000000000000000001';
const CHILD = 'ses_child00000000000000000001';
const GRAND = 'ses_grand00000000000000000001';
const OTHER = 'ses_other00000000000000000001';
const OLD = 'ses_old0000000000000000000001';

let seq = 0;
const nid = (p: string) => `${p}_${(++seq).toString(36).padStart(10, '0')}`;

function user(at: number, text = 'SECRET-PROMPT: fix the bug'): ListedMessage {
  const id = nid('msg');
  return {
    info: { id, role: 'user', time: { created: at }, agent: 'build' },
    parts: [{ id: nid('prt'), type: 'text', text }],
  };
}

interface Call {
  tool: string;
  input: Record<string, unknown>;
  metadata?: Record<string, unknown>;
}

/** One assistant step with one tool call; `running` leaves the message open and the call unfinished. */
function step(at: number, c: Call, o: { running?: boolean; ids?: string[] } = {}): ListedMessage {
  const [mid, a, b, d] = o.ids ?? [nid('msg'), nid('prt'), nid('prt'), nid('prt')];
  const done = !o.running;
  return {
    info: {
      id: mid,
      role: 'assistant',
      agent: 'build',
      mode: 'build',
      modelID: 'loop-model',
      providerID: 'fake',
      path: { cwd: '/work/project', root: '/work/project' },
      cost: done ? 0.001 : 0,
      tokens: done
        ? { total: 1010, input: 1000, output: 10, reasoning: 0, cache: { read: 0, write: 0 } }
        : { total: 0, input: 0, output: 0, reasoning: 0, cache: { read: 0, write: 0 } },
      time: done ? { created: at, completed: at + 500 } : { created: at },
      ...(done ? { finish: 'tool-calls' } : {}),
    },
    parts: [
      { id: a, type: 'step-start' },
      {
        id: b,
        type: 'tool',
        callID: `call_${b}`,
        tool: c.tool,
        state: done
          ? {
              status: 'completed',
              input: c.input,
              output: 'SECRET-OUTPUT: file content',
              title: 'x',
              metadata: c.metadata ?? {},
              time: { start: at + 100, end: at + 200 },
            }
          : { status: 'running', input: c.input, time: { start: at + 100 } },
      },
      ...(done ? [{ id: d, type: 'step-finish', reason: 'tool-calls' }] : []),
    ],
  };
}

const read = (f = 'docs/spec.md'): Call => ({ tool: 'read', input: { filePath: `/work/project/${f}` } });
const bash = (command: string, exit: number): Call => ({ tool: 'bash', input: { command }, metadata: { exit } });
const edit: Call = {
  tool: 'edit',
  input: { filePath: '/work/project/src/app.js', oldString: 'a - b', newString: 'a + b' },
  metadata: { diff: '--- a\n+++ b\n-a - b\n+a + b\n' },
};

let dir = '';
let path = '';
let w: OcDb;
let logs: { why?: string; session?: string; msg: string }[] = [];
const logger = () =>
  createLogger({
    level: 'debug',
    format: 'json',
    destination: new Writable({
      write(chunk, _enc, cb) {
        for (const l of String(chunk).split('\n')) if (l) logs.push(JSON.parse(l));
        cb();
      },
    }),
  });

beforeEach(() => {
  dir = tempDir('vigil-wd-db');
  path = join(dir, 'opencode.db');
  w = new OcDb(path);
  logs = [];
});
afterEach(() => {
  w.close();
  rmSync(dir, { recursive: true, force: true });
});

const tsOf = (i: ReplayInput) => (i.type === 'progress' ? i.event.ts : i.type === 'request' ? i.record.ts : 0);

/** What the fallback did before: the replay reader over the whole DB, grouped per session, the same active rule. */
async function wholeHistory(): Promise<LoadedSession[]> {
  const rows = w.all<{ id: string; time_updated: number }>(
    `SELECT id, time_updated FROM session WHERE time_updated >= ${lit(SINCE)} ORDER BY time_updated DESC LIMIT 51`,
  );
  const updated = new Map(rows.map((r) => [r.id, r.time_updated]));
  const loaded = await opencodeDbReader.load(path, {});
  const by = new Map<string, ReplayInput[]>();
  for (const i of loaded.inputs) {
    const id = i.type === 'progress' ? i.event.session_id : i.type === 'request' ? i.record.session_id : '';
    by.set(id, [...(by.get(id) ?? []), i]);
  }
  return [...loaded.sessions].map(([id, info]) => ({
    id,
    ...(info.parent ? { parent: info.parent } : {}),
    ...(info.agent ? { agent: info.agent } : {}),
    active: updated.has(id),
    updated: updated.get(id) ?? 0,
    inputs: by.get(id) ?? [],
  }));
}

/** Session hygiene as the SQL the fallback ran before (per active session). */
function bulksBySql(ids: string[]) {
  const q = (id: string) =>
    w.all<Record<string, number | null>>(`SELECT
      (SELECT COUNT(*) FROM message WHERE session_id = ${lit(id)}) AS messages,
      (SELECT SUM(LENGTH(CAST(data AS BLOB))) FROM message WHERE session_id = ${lit(id)}) AS mb,
      (SELECT SUM(LENGTH(CAST(data AS BLOB))) FROM part WHERE session_id = ${lit(id)}) AS pb,
      (SELECT MAX(json_extract(data, '$.time.completed')) FROM message
         WHERE session_id = ${lit(id)} AND json_extract(data, '$.role') = 'assistant') AS completed,
      (SELECT MAX(p.time_updated) FROM part p JOIN message m ON m.id = p.message_id
         WHERE p.session_id = ${lit(id)} AND json_extract(m.data, '$.role') = 'assistant'
           AND json_extract(p.data, '$.type') IN ('text', 'tool', 'reasoning')) AS output`)[0];
  const out = ids.map((id) => {
    const r = q(id);
    const times = [r.completed, r.output].filter((t): t is number => typeof t === 'number');
    return {
      id,
      messages: r.messages,
      stored_bytes: (r.mb ?? 0) + (r.pb ?? 0),
      history_bytes: null,
      updated_at: times.length ? Math.max(...times) : null,
    };
  });
  return out;
}

const collect = (cache: DbCache | null, quiet = false) =>
  collectFromDb(path, {
    since: SINCE,
    maxSessions: 50,
    timeoutMs: 1_000,
    cache,
    ...(quiet ? {} : { logger: logger() }),
  });

/** One tick after a change: the incremental read against a read from scratch and the whole-history reader. */
async function tick(cache: DbCache | null): Promise<DbCollected> {
  const inc = await collect(cache);
  const scratch = await collect(null, true);
  expect(inc.issues).toEqual([]);
  expect(inc.errors).toEqual([]);
  expect(inc.sessions).toEqual(scratch.sessions);
  expect(inc.cache).toEqual(scratch.cache);
  const ref = await wholeHistory();
  const judged = judgeSessions(inc.sessions, knobs);
  expect(judged).toEqual(judgeSessions(ref, knobs));
  // the same inputs per session, in the order each session's history gives them
  for (const s of inc.sessions) {
    const r = ref.find((x) => x.id === s.id);
    expect(s.inputs).toEqual([...(r?.inputs ?? [])].sort((a, b) => tsOf(a) - tsOf(b)));
  }
  const active = inc.sessions.filter((s) => s.active);
  expect(active.map((s) => ({ id: s.id, ...s.bulk }))).toEqual(bulksBySql(active.map((s) => s.id)));
  return inc;
}

const levels = (c: DbCollected) =>
  Object.fromEntries(judgeSessions(c.sessions, knobs).map((j) => [j.id.slice(4, 9), j.verdict.level]));
const fullReads = () => logs.filter((l) => l.msg === 'watchdog: full read of a session from opencode.db');

describe.runIf(SQLITE3)('watchdog DB fallback: incremental reads', () => {
  it('gives the same sessions, inputs, bulk and verdicts as a full read, step by step', async () => {
    // history: a root reading in circles, its explore child, an active other session, and one from last week
    let t = T0;
    const later = (ms: number) => {
      t += ms;
      return t;
    };
    const root = [user(t)];
    for (let i = 0; i < 10; i++) root.push(step(later(1_000), read()));
    const child = [user(t + 10)];
    for (let i = 0; i < 3; i++) child.push(step(later(1_000), read(`src/m${i}.js`)));
    const other = [user(t + 20), step(later(1_000), read('src/app.js'))];
    const old = [user(T0 - 9 * 86_400_000)];
    for (let i = 0; i < 12; i++) old.push(step(T0 - 9 * 86_400_000 + i * 1_000, read()));
    w.batch(() => {
      w.session({ id: ROOT, agent: 'build', created: T0 - 1, updated: t });
      w.session({ id: CHILD, parent: ROOT, agent: 'explore', created: T0, updated: t });
      w.session({ id: OTHER, created: T0 + 5, updated: t });
      w.session({ id: OLD, created: T0 - 9 * 86_400_000, updated: T0 - 8 * 86_400_000 });
      for (const m of root) w.message(ROOT, m);
      for (const m of child) w.message(CHILD, m);
      for (const m of other) w.message(OTHER, m);
      for (const m of old) w.message(OLD, m);
    });

    // 1. first tick: every session read in full; the week-old one is not read at all
    let c = await tick(null);
    expect(c.sessions.map((s) => s.id)).toEqual([ROOT, CHILD, OTHER]);
    expect(c.reads).toMatchObject({ full: 3, incremental: 0 });

    // 2. appends: only the new messages (and the margin's few) are converted
    for (let i = 0; i < 6; i++) w.message(ROOT, step(later(1_000), read()));
    w.touch(ROOT, t);
    logs = [];
    c = await tick(c.cache);
    expect(c.reads).toMatchObject({ full: 0, incremental: 3 });
    expect(c.reads.messages).toBeLessThan(25);
    expect(fullReads()).toEqual([]);
    expect(levels(c).root0).not.toBe('ok');

    // 3. a step opens with its tool running (no event yet), then the same rows are updated in place
    const ids = [nid('msg'), nid('prt'), nid('prt'), nid('prt')];
    const at = later(60_000);
    w.message(ROOT, step(at, read(), { running: true, ids }), at + 150);
    w.touch(ROOT, at + 150);
    c = await tick(c.cache);
    const before = c.sessions.find((s) => s.id === ROOT)?.inputs.length ?? 0;
    w.message(ROOT, step(at, read(), { ids }), at + 700);
    w.touch(ROOT, at + 700);
    logs = [];
    c = await tick(c.cache);
    // the request record and the finished call appear, read incrementally
    expect(c.sessions.find((s) => s.id === ROOT)?.inputs.length).toBe(before + 2);
    expect(fullReads()).toEqual([]);

    // the same with only the part row updated (the message stays open): the call is seen
    const ids2 = [nid('msg'), nid('prt'), nid('prt'), nid('prt')];
    const at2 = later(60_000);
    w.message(ROOT, step(at2, read(), { running: true, ids: ids2 }), at2 + 150);
    w.touch(ROOT, at2 + 150);
    c = await tick(c.cache);
    const open = step(at2, read(), { ids: ids2 });
    w.part(ROOT, ids2[0], open.parts[1], at2 + 300);
    w.touch(ROOT, at2 + 300);
    c = await tick(c.cache);
    const closed = c.sessions.find((s) => s.id === ROOT)?.inputs.at(-1);
    expect(closed?.type === 'progress' && closed.event.kind === 'tool' && closed.event.call_id).toBe(`call_${ids2[2]}`);
    w.message(ROOT, open, at2 + 700);
    w.touch(ROOT, at2 + 700);
    c = await tick(c.cache);

    // 4. the child lands an edit (rolls up to the root); 5. a grandchild appears
    w.message(CHILD, step(later(1_000), edit));
    w.touch(CHILD, t);
    c = await tick(c.cache);
    w.session({ id: GRAND, parent: CHILD, agent: 'explore', created: t, updated: t });
    for (let i = 0; i < 4; i++) w.message(GRAND, step(later(1_000), read('src/deep.js')));
    c = await tick(c.cache);
    expect(c.sessions.map((s) => s.id)).toContain(GRAND);

    // 6. the other session fails a check in one tick and passes it in the next: the landed
    //    rules' memory crosses the tick boundary
    w.message(OTHER, step(later(1_000), bash('sh test.sh', 1)));
    w.touch(OTHER, t);
    c = await tick(c.cache);
    w.message(OTHER, step(later(1_000), bash('sh test.sh', 0)));
    w.touch(OTHER, t);
    c = await tick(c.cache);
    const passed = c.sessions.find((s) => s.id === OTHER)?.inputs.at(-1);
    expect(passed?.type === 'progress' && passed.event.kind === 'tool' && passed.event.landed).toBe(true);

    // 7. a part added to an early message: converted again from that message on
    w.part(OTHER, other[1].info.id, { id: nid('prt'), type: 'text', text: 'SECRET-TEXT later' }, later(1_000));
    w.touch(OTHER, t);
    c = await tick(c.cache);

    // 8. revert: the root's last two messages go -> the counts disagree, a full read of the root only
    const last = w.all<{ id: string }>(
      `SELECT id FROM message WHERE session_id = ${lit(ROOT)} ORDER BY time_created DESC LIMIT 2`,
    );
    for (const m of last) w.deleteMessage(m.id);
    w.touch(ROOT, later(1_000));
    logs = [];
    c = await tick(c.cache);
    expect(fullReads()).toEqual([expect.objectContaining({ session: ROOT, why: 'rows deleted or rewritten' })]);

    // 9. a message that sorts before the tail (a clock that went back)
    w.message(ROOT, step(at - 30_000, read('src/late.js')), later(1_000));
    w.touch(ROOT, t);
    c = await tick(c.cache);

    // a message whose time_created moves (its old place and its new one both count)
    const moved = root[3].info.id;
    w.exec(
      `UPDATE message SET time_created = ${lit(t + 5)}, time_updated = ${lit(later(1_000))} WHERE id = ${lit(moved)}`,
    );
    w.touch(ROOT, t);
    logs = [];
    c = await tick(c.cache);
    expect(fullReads()).toEqual([]);

    // 10. the session row's agent changes: it is in every input, the session is read in full
    w.session({ id: ROOT, agent: 'plan', created: T0 - 1, updated: later(1_000) });
    logs = [];
    c = await tick(c.cache);
    expect(fullReads()).toEqual([
      expect.objectContaining({ session: ROOT, why: 'session parent, agent or directory changed' }),
    ]);

    // 11. nothing changed: nothing read in full, the result stands
    logs = [];
    const same = await tick(c.cache);
    expect(same.sessions).toEqual(c.sessions);
    expect(fullReads()).toEqual([]);

    // 12. the file is replaced (a restore, a copy): every kept read is dropped
    w.close();
    copyFileSync(path, join(dir, 'copy.db'));
    rmSync(`${path}-wal`, { force: true });
    rmSync(`${path}-shm`, { force: true });
    renameSync(join(dir, 'copy.db'), path);
    w = new OcDb(path);
    w.message(OTHER, step(later(1_000), read('src/app.js')));
    w.touch(OTHER, t);
    logs = [];
    c = await tick(same.cache);
    expect(logs).toContainEqual(expect.objectContaining({ why: 'opencode.db was replaced' }));
    expect(c.reads).toMatchObject({ incremental: 0 });
  });

  it('keeps no content in the cache file, and a tick keeps it beside the state file', async () => {
    const msgs = [user(T0)];
    for (let i = 0; i < 5; i++) msgs.push(step(T0 + i * 1_000, i % 2 ? read() : bash('sh test.sh', i)));
    w.session({ id: ROOT, agent: 'build', created: T0, updated: T0 + 10_000 });
    for (const m of msgs) w.message(ROOT, m);
    const c = await collect(null);
    const text = JSON.stringify(c.cache);
    // the prompt, outputs and diffs stay in opencode.db; fingerprints and coarse targets are kept
    expect(text).not.toMatch(/SECRET|fix the bug|file content|a \+ b/);
    expect(text).toContain('"fingerprint"');
    expect(dbCachePath('/x/watchdog.json')).toBe('/x/watchdog.db-cache.json');
    // a cache of another version, or not a cache, is no cache
    expect(readDbCache(join(dir, 'missing.json'))).toBeNull();
    const bad = join(dir, 'bad.json');
    w.close();
    const { writeFileSync } = await import('node:fs');
    writeFileSync(bad, JSON.stringify({ ...c.cache, version: 0 }));
    expect(readDbCache(bad)).toBeNull();
    writeFileSync(bad, '{"version":');
    expect(readDbCache(bad)).toBeNull();
    w = new OcDb(path);
    expect(readFileSync(path).length).toBeGreaterThan(0);
  });

  it('an unreadable row in an active session is a blind issue naming no content; the rest is judged', async () => {
    w.session({ id: ROOT, agent: 'build', created: T0, updated: T0 + 10_000 });
    w.session({ id: OTHER, created: T0 + 1, updated: T0 + 10_000 });
    for (const m of [user(T0), step(T0 + 1_000, read())]) w.message(ROOT, m);
    for (const m of [user(T0), step(T0 + 1_000, read())]) w.message(OTHER, m);
    const c0 = await collect(null);
    const [first] = w.all<{ id: string }>(`SELECT id FROM message WHERE session_id = ${lit(ROOT)} LIMIT 1`);
    w.exec(
      `UPDATE message SET data = 'SECRET not json', time_updated = ${lit(T0 + 20_000)} WHERE id = ${lit(first.id)}`,
    );
    const c = await collect(c0.cache);
    expect(c.issues).toEqual([`${path}: session ${ROOT}: data: unreadable row`]);
    expect(c.sessions.map((s) => s.id)).toEqual([OTHER]);
    expect(Object.keys(c.cache?.sessions ?? {})).toEqual([OTHER]);
  });
});
