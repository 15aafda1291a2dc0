import { existsSync, mkdirSync, readFileSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { z } from 'zod';
import { type Logger, silentLogger } from '../core/logger.ts';
import { byTime, checkInput, type ReplayInput } from '../core/replay.ts';
import {
  type ConvertCursor,
  type ConvertedInput,
  type ConvertIssue,
  messageToInputs,
  newConvertCursor,
  type SessionBulk,
} from '../sensors/opencode/convert.ts';
import {
  type DbMessageRow,
  type DbPartRow,
  type DbSessionRow,
  dbMessage,
  dbSession,
} from '../sensors/opencode/replay.ts';
import { lit, SqliteReader } from '../sensors/opencode/sqlite.ts';
import type { Collected, CollectOptions, LoadedSession } from './collect.ts';
import { issueText, short } from './discover.ts';

// The DB fallback (no opencode server answered): read opencode.db read-only, and read
// only what changed since the last tick that read it.
//
// Which sessions: the ones updated since the window start (at most max_sessions) and
// all their descendants (landed work rolls up to the parent). Nothing else is read:
// a session's verdict depends on its own inputs and its descendants' only.
//
// What is kept between ticks (the cache file beside the state file): per session read,
// the converter's output per message (request records, tool events with fingerprints
// and coarse targets, markers: never text, arguments or outputs), the landed rules'
// memory after each message, issue lines, the bytes and newest model-side write per
// message, and high-water marks of the message and part rows (count, max rowid, max
// time_updated). A tick asks the DB which rows of the session are newer than the marks
// (a new rowid, or time_updated at or past the mark less a margin: an upsert keeps
// its rowid and bumps time_updated), and converts again from the earliest message they
// touch. The margin covers a write whose time was taken before a write we already saw.
//
// What an incremental read cannot see, and the full read of the session it causes
// instead (logged at debug): rows deleted or rewritten (the row counts do not add up,
// or a max rowid went back: an opencode revert deletes messages), the session row's
// parent, agent or directory changed (they are in every input), a session read for the
// first time. The whole cache is dropped when the file was replaced (another inode) or
// shrank (VACUUM renumbers rowids), when the tables' definitions changed, or when the
// cache was written by another converter version. Tables without time_updated or
// without rowids are read in full every tick, and nothing is kept.

/** Bump when the converter (sensors/opencode/convert.ts, normalize.ts) or the cache layout changes what it keeps. */
export const DB_CACHE_VERSION = 1;

/** Rows updated this long before the newest one seen are read again (ms). */
const MARGIN_MS = 10_000;

const MarkSchema = z.object({
  /** rows of the session */
  n: z.number().int().min(0),
  /** max rowid */
  top: z.number().int(),
  /** max time_updated */
  t: z.number(),
});
type Mark = z.output<typeof MarkSchema>;

const isInput = (v: unknown): v is ReplayInput =>
  v !== null &&
  typeof v === 'object' &&
  (((v as { type?: unknown }).type === 'progress' && typeof (v as { event?: unknown }).event === 'object') ||
    ((v as { type?: unknown }).type === 'request' && typeof (v as { record?: unknown }).record === 'object'));

const CachedMessageSchema = z.object({
  id: z.string(),
  /** time_created: with id, the order the converter sees */
  c: z.number(),
  /** the task prompt was seen by the end of this message */
  u: z.literal(1).optional(),
  /** the landed rules' failing fingerprints after this message, when this message changed them */
  f: z.array(z.string()).optional(),
  /** inputs converted, rejected ones included (issue locations count them) */
  n: z.number().int().min(0),
  /** the inputs that passed the wire schemas */
  in: z.array(z.custom<ReplayInput>(isInput)),
  /** converter issues, as issue lines */
  ci: z.array(z.string()).optional(),
  /** inputs the wire schemas rejected, as issue lines */
  ai: z.array(z.string()).optional(),
  /** the agent of its first request record ('' when that record has none) */
  ra: z.string().optional(),
  /** bytes of the message row and its part rows */
  b: z.number().min(0),
  /** newest model-side write: completion of an assistant message, or an output part's row update */
  w: z.number().optional(),
});
type CachedMessage = z.output<typeof CachedMessageSchema>;

const CachedSessionSchema = z.object({
  /** parent, agent and directory the inputs were converted with */
  ctx: z.string(),
  m: MarkSchema,
  p: MarkSchema,
  msgs: z.array(CachedMessageSchema),
});
type CachedSession = z.output<typeof CachedSessionSchema>;

export const DbCacheSchema = z.object({
  version: z.literal(DB_CACHE_VERSION),
  /** the file read: device, inode (decimal strings) and size */
  file: z.object({ dev: z.string(), ino: z.string(), size: z.number() }),
  /** the session, message and part table definitions */
  schema: z.string(),
  sessions: z.record(z.string(), CachedSessionSchema),
});
export type DbCache = z.output<typeof DbCacheSchema>;

/** The cache file beside the state file: `watchdog.json` -> `watchdog.db-cache.json`. */
export function dbCachePath(statePath: string): string {
  return statePath.replace(/(\.json)?$/, '.db-cache.json');
}

/** A missing, unreadable or stale cache is no cache: every session is read in full. */
export function readDbCache(path: string): DbCache | null {
  try {
    const r = DbCacheSchema.safeParse(JSON.parse(readFileSync(path, 'utf8')));
    return r.success ? r.data : null;
  } catch {
    return null;
  }
}

export function writeDbCache(path: string, c: DbCache): void {
  mkdirSync(dirname(path), { recursive: true });
  const tmp = `${path}.${process.pid}.tmp`;
  writeFileSync(tmp, JSON.stringify(c), { mode: 0o600 });
  renameSync(tmp, path);
}

export interface DbCollectOptions extends CollectOptions {
  /** What the last tick kept (readDbCache); null or absent: read every session in full. */
  cache?: DbCache | null;
  logger?: Logger;
}

export interface DbCollected extends Collected {
  /** What to keep for the next tick; null when this DB cannot be read incrementally. */
  cache: DbCache | null;
  /** Sessions read in full, sessions read incrementally, and messages converted. */
  reads: { full: number; incremental: number; messages: number };
}

interface ActiveRow {
  id: string;
  time_updated: number;
}

interface MsgRow extends DbMessageRow {
  c: number;
}
interface PartRow extends DbPartRow {
  t: number | null;
}

/** What a session read gives: its kept form, or the issue that made it unreadable. */
type SessionRead = { ok: true; kept: CachedSession; full: boolean } | { ok: false; issue: string };

function fileIdentity(path: string): DbCache['file'] {
  const st = statSync(path, { bigint: true });
  return { dev: String(st.dev), ino: String(st.ino), size: Number(st.size) };
}

/**
 * Read the sessions active since `o.since` (and their descendants) from opencode.db,
 * read-only, in one read transaction (the sqlite3 command: sensors/opencode/sqlite.ts); convert
 * and keep them per message.
 */
export async function collectFromDb(path: string, o: DbCollectOptions): Promise<DbCollected> {
  const out: DbCollected = {
    sessions: [],
    issues: [],
    errors: [],
    truncated: false,
    cache: o.cache ?? null,
    reads: { full: 0, incremental: 0, messages: 0 },
  };
  if (!existsSync(path)) return out;
  const log = o.logger ?? silentLogger();
  let db: SqliteReader | undefined;
  try {
    const file = fileIdentity(path);
    db = SqliteReader.open(path);
    await db.all('BEGIN');
    await read(db, path, file, o, log, out);
  } catch (e) {
    const m = short(e);
    // a missing table or column is opencode's storage changing shape; anything else (locked, unreadable) is an error
    (/no such (table|column)|not a database/i.test(m) ? out.issues : out.errors).push(`${path}: ${m}`);
    out.sessions = [];
    out.cache = o.cache ?? null;
  } finally {
    await db?.close();
  }
  return out;
}

async function read(
  db: SqliteReader,
  path: string,
  file: DbCache['file'],
  o: DbCollectOptions,
  log: Logger,
  out: DbCollected,
): Promise<void> {
  let rows = await db.all<ActiveRow>(
    `SELECT id, time_updated FROM session WHERE time_updated >= ${lit(o.since)} ORDER BY time_updated DESC LIMIT ${lit(o.maxSessions + 1)}`,
  );
  if (rows.length === 0) return;
  if (rows.length > o.maxSessions) {
    out.truncated = true;
    rows = rows.slice(0, o.maxSessions);
  }
  const updated = new Map(rows.map((r) => [r.id, r.time_updated]));

  const schema = await tableSchema(db);
  let kept: Record<string, CachedSession> = {};
  const prev = o.cache ?? null;
  if (prev !== null && schema.incremental) {
    const why =
      prev.file.dev !== file.dev || prev.file.ino !== file.ino
        ? 'opencode.db was replaced'
        : file.size < prev.file.size
          ? 'opencode.db shrank'
          : prev.schema !== schema.key
            ? 'table definitions changed'
            : null;
    if (why === null) kept = prev.sessions;
    else log.debug({ why }, 'watchdog: kept opencode.db reads dropped, reading every session in full');
  } else if (!schema.incremental) {
    log.debug({ why: schema.why }, 'watchdog: opencode.db cannot be read incrementally, reading in full');
  }

  // the active sessions and all their descendants, in the order the replay reader reads them
  const tree = await db.all<DbSessionRow>(
    `WITH RECURSIVE tree(id) AS (
       SELECT value FROM json_each(${lit(JSON.stringify([...updated.keys()]))})
       UNION SELECT s.id FROM session s JOIN tree t ON s.parent_id = t.id)
     SELECT s.id, s.parent_id, s.agent, s.directory, s.time_created
       FROM session s JOIN tree t ON s.id = t.id ORDER BY s.time_created, s.id`,
  );

  const q = statements(db, schema);
  const next: Record<string, CachedSession> = {};
  const found: string[] = [];
  // every session's queries go out at once: the reader answers them back to back
  const reads = await Promise.all(
    tree.map((row) => readSession(q, row, schema.incremental ? kept[row.id] : undefined, schema.incremental, log)),
  );
  for (const [k, row] of tree.entries()) {
    const r = reads[k];
    if (!r.ok) {
      if (updated.has(row.id)) found.push(r.issue);
      continue;
    }
    if (r.full) out.reads.full++;
    else out.reads.incremental++;
    if (schema.incremental) next[row.id] = r.kept;
    const isActive = updated.has(row.id);
    if (isActive) {
      for (const m of r.kept.msgs) if (m.ci) found.push(...m.ci);
      for (const m of r.kept.msgs) if (m.ai) found.push(...m.ai);
    }
    out.sessions.push(loadedOf(row, r.kept, isActive, updated.get(row.id) ?? 0, schema.bulk));
  }
  // an odd row in a session nobody touched for months does not blind today's tick
  for (const i of found.slice(0, 3)) out.issues.push(`${path}: ${i}`);
  out.cache = schema.incremental ? { version: DB_CACHE_VERSION, file, schema: schema.key, sessions: next } : null;
  out.reads.messages = q.converted();
  log.debug(out.reads, 'watchdog: opencode.db read');
}

interface TableSchema {
  key: string;
  /** rowid tables with time_updated on message and part */
  incremental: boolean;
  why?: string;
  /** part.time_updated exists: the newest model-side write can be told */
  bulk: boolean;
}

async function tableSchema(db: SqliteReader): Promise<TableSchema> {
  const defs = await db.all<{ name: string; sql: string | null }>(
    "SELECT name, sql FROM sqlite_master WHERE type = 'table' AND name IN ('session', 'message', 'part')",
  );
  defs.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  const key = defs.map((d) => `${d.name}:${d.sql ?? ''}`).join('\n');
  const cols = async (t: string) =>
    new Set((await db.all<{ name: string }>(`SELECT name FROM pragma_table_info('${t}')`)).map((c) => c.name));
  const mc = await cols('message');
  const pc = await cols('part');
  const bulk = pc.has('time_updated');
  const why = !mc.has('time_updated')
    ? 'message has no time_updated'
    : !bulk
      ? 'part has no time_updated'
      : defs.some((d) => d.name !== 'session' && /without\s+rowid/i.test(d.sql ?? ''))
        ? 'tables without rowid'
        : undefined;
  return { key, incremental: why === undefined, bulk, ...(why ? { why } : {}) };
}

type Mark3 = { n: number; top: number; fresh: number };

/** The queries of a read, each one statement through the reader. */
function statements(db: SqliteReader, s: TableSchema) {
  const tu = s.bulk ? 'time_updated' : 'NULL';
  let converted = 0;
  const q = {
    /** messages converted so far */
    converted: () => converted,
    count: () => {
      converted++;
    },
    all: (sid: string) =>
      db.all<MsgRow>(
        `SELECT id, time_created AS c, data FROM message WHERE session_id = ${lit(sid)} ORDER BY time_created, id`,
      ),
    from: (sid: string, c: number, id: string) =>
      db.all<MsgRow>(
        `SELECT id, time_created AS c, data FROM message WHERE session_id = ${lit(sid)}
           AND (time_created > ${lit(c)} OR (time_created = ${lit(c)} AND id >= ${lit(id)})) ORDER BY time_created, id`,
      ),
    parts: (mid: string, sid: string) =>
      db.all<PartRow>(
        `SELECT id, message_id, ${tu} AS t, data FROM part WHERE message_id = ${lit(mid)} AND session_id = ${lit(sid)} ORDER BY id`,
      ),
  };
  if (!s.incremental) return { ...q, inc: undefined };
  const mark = (t: string) => async (sid: string) =>
    (await db.get<Mark>(
      `SELECT COUNT(*) AS n, COALESCE(MAX(rowid), 0) AS top, COALESCE(MAX(time_updated), 0) AS t FROM ${t} WHERE session_id = ${lit(sid)}`,
    )) as Mark;
  const counts = (t: string) => async (sid: string, r: number) =>
    (await db.get<Mark3>(
      `SELECT COUNT(*) AS n, COALESCE(MAX(rowid), 0) AS top, COALESCE(SUM(rowid > ${lit(r)}), 0) AS fresh FROM ${t} WHERE session_id = ${lit(sid)}`,
    )) as Mark3;
  return {
    ...q,
    inc: {
      markM: mark('message'),
      markP: mark('part'),
      countM: counts('message'),
      countP: counts('part'),
      changedM: (sid: string, r: number, t: number) =>
        db.all<{ id: string; c: number; t: number }>(
          `SELECT id, time_created AS c, time_updated AS t FROM message WHERE session_id = ${lit(sid)} AND (rowid > ${lit(r)} OR time_updated >= ${lit(t)})`,
        ),
      changedP: (sid: string, r: number, t: number) =>
        db.all<{ id: string; t: number }>(
          `SELECT message_id AS id, time_updated AS t FROM part WHERE session_id = ${lit(sid)} AND (rowid > ${lit(r)} OR time_updated >= ${lit(t)})`,
        ),
      keyOf: (mid: string, sid: string) =>
        db.get<{ c: number }>(
          `SELECT time_created AS c FROM message WHERE id = ${lit(mid)} AND session_id = ${lit(sid)}`,
        ),
    },
  };
}
type Stmts = ReturnType<typeof statements>;

const ctxOf = (row: DbSessionRow) => JSON.stringify([row.parent_id, row.agent, row.directory]);

/** (time_created, id) order, as the replay reader's ORDER BY. */
const before = (c1: number, id1: string, c2: number, id2: string) => c1 < c2 || (c1 === c2 && id1 < id2);

async function readSession(
  q: Stmts,
  row: DbSessionRow,
  kept: CachedSession | undefined,
  incremental: boolean,
  log: Logger,
): Promise<SessionRead> {
  const sid = row.id;
  try {
    if (!incremental || q.inc === undefined) return { ok: true, kept: await full(q, row), full: true };
    const i = q.inc;
    const why =
      kept === undefined ? 'first read' : kept.ctx !== ctxOf(row) ? 'session parent, agent or directory changed' : null;
    if (why !== null || kept === undefined) {
      log.debug({ session: sid, why }, 'watchdog: full read of a session from opencode.db');
      return { ok: true, kept: await full(q, row), full: true };
    }
    const [cm, cp] = await Promise.all([i.countM(sid, kept.m.top), i.countP(sid, kept.p.top)]);
    if (cm.top < kept.m.top || cp.top < kept.p.top || cm.n !== kept.m.n + cm.fresh || cp.n !== kept.p.n + cp.fresh) {
      log.debug(
        { session: sid, why: 'rows deleted or rewritten' },
        'watchdog: full read of a session from opencode.db',
      );
      return { ok: true, kept: await full(q, row), full: true };
    }
    const [changedM, changedP] = await Promise.all([
      i.changedM(sid, kept.m.top, kept.m.t - MARGIN_MS),
      i.changedP(sid, kept.p.top, kept.p.t - MARGIN_MS),
    ]);
    const m: Mark = { n: cm.n, top: cm.top, t: kept.m.t };
    const p: Mark = { n: cp.n, top: cp.top, t: kept.p.t };
    for (const r of changedM) if (r.t > m.t) m.t = r.t;
    for (const r of changedP) if (r.t > p.t) p.t = r.t;

    // the earliest (time_created, id) a changed row touches, before or after its change
    const at = new Map<string, number>();
    kept.msgs.forEach((x, k) => {
      at.set(x.id, k);
    });
    let from: { c: number; id: string } | null = null;
    const touch = (c: number, id: string) => {
      if (from === null || before(c, id, from.c, from.id)) from = { c, id };
    };
    const keys = new Map(changedM.map((r) => [r.id, r.c]));
    for (const r of changedP) {
      if (keys.has(r.id)) continue;
      const k = await i.keyOf(r.id, sid);
      if (k !== undefined) keys.set(r.id, k.c);
      else if (at.has(r.id)) keys.set(r.id, kept.msgs[at.get(r.id)!].c); // its message is gone: counts disagree next
    }
    for (const [id, c] of keys) {
      touch(c, id);
      const k = at.get(id);
      if (k !== undefined) touch(kept.msgs[k].c, id);
    }
    if (from === null) return { ok: true, kept: { ...kept, m, p }, full: false };
    const f: { c: number; id: string } = from;
    let start = kept.msgs.length;
    while (start > 0 && !before(kept.msgs[start - 1].c, kept.msgs[start - 1].id, f.c, f.id)) start--;
    const rows = await q.from(sid, f.c, f.id);
    const msgs = await convert(q, row, kept.msgs.slice(0, start), rows);
    if (msgs.length !== cm.n) {
      log.debug(
        { session: sid, why: 'message rows out of order' },
        'watchdog: full read of a session from opencode.db',
      );
      return { ok: true, kept: await full(q, row), full: true };
    }
    return { ok: true, kept: { ctx: kept.ctx, m, p, msgs }, full: false };
  } catch (e) {
    const message = e instanceof Error ? e.message : String(e);
    if (/no such (table|column)|not a database/i.test(message)) throw e;
    // the parse error quotes the row: only where and what
    return { ok: false, issue: issueText({ where: `session ${sid}`, field: 'data', message: 'unreadable row' }) };
  }
}

async function full(q: Stmts, row: DbSessionRow): Promise<CachedSession> {
  const zero: Mark = { n: 0, top: 0, t: 0 };
  const [m, p, rows] = await Promise.all([
    q.inc ? q.inc.markM(row.id) : zero,
    q.inc ? q.inc.markP(row.id) : zero,
    q.all(row.id),
  ]);
  const msgs = await convert(q, row, [], rows);
  return { ctx: ctxOf(row), m, p, msgs };
}

/** Where the converter stands after `kept` (the messages before the first one converted again). */
function cursorAfter(kept: readonly CachedMessage[]): ConvertCursor {
  const cur = newConvertCursor();
  if (kept.length === 0) return cur;
  let failing: readonly string[] = cur.tracker.failing;
  for (let k = kept.length - 1; k >= 0; k--) {
    const f = kept[k].f;
    if (f !== undefined) {
      failing = f;
      break;
    }
  }
  return { tracker: { failing }, seenUser: kept[kept.length - 1].u === 1 };
}

const OUTPUT_PARTS = new Set(['text', 'tool', 'reasoning']);

/** Convert `rows` (messages in order, each read with its parts) after the `kept` ones. */
async function convert(
  q: Stmts,
  row: DbSessionRow,
  kept: CachedMessage[],
  rows: readonly MsgRow[],
): Promise<CachedMessage[]> {
  const sid = row.id;
  const session = dbSession(row);
  const out = kept;
  let cur = cursorAfter(kept);
  let offset = 0;
  for (const k of kept) offset += k.n;
  // every message's parts asked at once: the reader answers them in order
  const allParts = await Promise.all(rows.map((mrow) => q.parts(mrow.id, sid)));
  for (const [k, mrow] of rows.entries()) {
    q.count();
    const parts = allParts[k];
    const msg = dbMessage(sid, mrow, parts);
    const inputs: ConvertedInput[] = [];
    const issues: ConvertIssue[] = [];
    const after = messageToInputs(session, msg, out.length, cur, inputs, issues);
    let b = Buffer.byteLength(mrow.data, 'utf8');
    for (const pr of parts) b += Buffer.byteLength(pr.data, 'utf8');
    const e: CachedMessage = { id: mrow.id, c: mrow.c, n: inputs.length, in: [], b };
    if (after.seenUser) e.u = 1;
    if (!sameList(after.tracker.failing, cur.tracker.failing)) e.f = [...after.tracker.failing];
    if (issues.length) {
      e.ci = issues.map((i) => issueText({ where: `session ${sid} ${i.where}`, field: i.field, message: i.message }));
    }
    inputs.forEach((input, j) => {
      const bad = checkInput(input);
      if (bad === null) e.in.push(input);
      else {
        e.ai ??= [];
        e.ai.push(issueText({ where: `session ${sid} input ${offset + j}`, ...bad }));
      }
    });
    const req = inputs.find((x) => x.type === 'request');
    if (req?.type === 'request') e.ra = req.record.agent ?? '';
    const w = newestWrite(msg, parts);
    if (w !== undefined) e.w = w;
    out.push(e);
    offset += inputs.length;
    cur = after;
  }
  return out;
}

/** As the SQL of session hygiene: an assistant message's completion, or its latest output part row update. */
function newestWrite(msg: ReturnType<typeof dbMessage>, parts: readonly PartRow[]): number | undefined {
  if (msg.info.role !== 'assistant') return undefined;
  let w: number | undefined;
  const done = (msg.info.time as { completed?: unknown } | undefined)?.completed;
  if (typeof done === 'number') w = done;
  msg.parts.forEach((p, k) => {
    const t = parts[k].t;
    if (typeof t === 'number' && OUTPUT_PARTS.has(p.type as string) && (w === undefined || t > w)) w = t;
  });
  return w;
}

const sameList = (a: readonly string[], b: readonly string[]) => a.length === b.length && a.every((x, k) => x === b[k]);

function loadedOf(row: DbSessionRow, s: CachedSession, active: boolean, updated: number, bulk: boolean): LoadedSession {
  const inputs: ReplayInput[] = [];
  for (const m of s.msgs) for (const i of m.in) inputs.push(i);
  // stable: inputs of one time keep the converter's order
  byTime(inputs);
  // as the replay reader: the session row's agent, else its first request's
  const agent = row.agent || s.msgs.find((m) => m.ra !== undefined)?.ra;
  let b: SessionBulk | undefined;
  if (active && bulk) {
    let bytes = 0;
    let w: number | null = null;
    for (const m of s.msgs) {
      bytes += m.b;
      if (m.w !== undefined && (w === null || m.w > w)) w = m.w;
    }
    // the rows do not say where the last compaction cut the history
    b = { messages: s.msgs.length, stored_bytes: bytes, history_bytes: null, updated_at: w };
  }
  return {
    id: row.id,
    ...(row.parent_id ? { parent: row.parent_id } : {}),
    ...(agent ? { agent } : {}),
    active,
    updated,
    inputs,
    ...(b ? { bulk: b } : {}),
  };
}
