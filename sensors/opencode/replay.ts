import { existsSync } from 'node:fs';
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import {
  byTime,
  checkInput,
  type InputIssue,
  type InputReader,
  type LoadedInput,
  type LoadOptions,
  type ReplayInput,
} from '../../core/replay.ts';
import { type OcSession, sessionToInputs } from './convert.ts';
import { lit, SqliteReader } from './sqlite.ts';

// opencode's recorded history as replay inputs (core/replay.ts), through the one
// converter (convert.ts) the plugin and the watchdog use:
// - a folder of exports:
//     session.json            the `GET /session` list (children included)
//     messages/<id>.json      `GET /session/{id}/message` for each session
//   (`<id>.json` beside session.json is accepted too);
// - opencode's own SQLite DB (`opencode.db`, tables session / message / part with the
//   JSON in `data`), opened read-only.
// Sessions are merged by time. Converter output that fails the wire schemas is an issue,
// not an input.

const SQLITE_MAGIC = 'SQLite format 3\0';

/** A folder of `GET /session` and `GET /session/{id}/message` exports. */
export const opencodeExportReader: InputReader = {
  kind: 'folder',
  claims: (p) => p.dir && existsSync(join(p.path, 'session.json')),
  load: loadFolder,
};

/** opencode.db, read through the sqlite3 command (sqlite.ts). */
export const opencodeDbReader: InputReader = {
  kind: 'sqlite',
  claims: (p) => !p.dir && p.head.startsWith(SQLITE_MAGIC),
  load: loadSqlite,
};

/** A load in progress: issues reported as found, inputs checked against the wire schemas. */
function collector(kind: string, opts: LoadOptions) {
  const out: LoadedInput = { kind, inputs: [], issues: [], sessions: new Map() };
  const all: ReplayInput[] = [];
  const issue = (where: string, field: string, message: string): void => {
    const i: InputIssue = { where, field, message };
    out.issues.push(i);
    opts.onIssue?.(i);
  };
  return {
    issue,
    /** One session's messages (the JSON array of `GET /session/{id}/message`) through the converter. */
    session(s: OcSession, messages: unknown, file: string): void {
      if (!Array.isArray(messages)) {
        issue(file, '(file)', 'expected the JSON array of GET /session/{id}/message');
        return;
      }
      const { inputs, issues } = sessionToInputs(s, messages);
      for (const i of issues) issue(`${file} ${i.where}`, i.field, i.message);
      inputs.forEach((i, j) => {
        const bad = checkInput(i);
        if (bad !== null) issue(`${file} input ${j}`, bad.field, bad.message);
        else all.push(i);
      });
      if (!out.sessions.has(s.id)) {
        const agent = s.agent ?? inputs.find((i) => i.type === 'request')?.record.agent;
        out.sessions.set(s.id, { ...(agent ? { agent } : {}), ...(s.parentID ? { parent: s.parentID } : {}) });
      }
    },
    finish(): LoadedInput {
      out.inputs = byTime(all);
      return out;
    },
  };
}

async function loadFolder(dir: string, opts: LoadOptions): Promise<LoadedInput> {
  const c = collector('folder', opts);
  let list: unknown = [];
  const listFile = join(dir, 'session.json');
  if (existsSync(listFile)) {
    try {
      list = JSON.parse(await readFile(listFile, 'utf8'));
    } catch (e) {
      c.issue('session.json', '(json)', `invalid JSON (${(e as Error).message.slice(0, 80)})`);
    }
  } else {
    c.issue('session.json', '(file)', 'missing: expected the GET /session list');
  }
  const sessions: OcSession[] = [];
  if (!Array.isArray(list)) c.issue('session.json', '(file)', 'expected a JSON array');
  else {
    list.forEach((s, i) => {
      if (s === null || typeof s !== 'object' || typeof (s as OcSession).id !== 'string') {
        c.issue(`session.json [${i}]`, 'id', 'expected a session object with a string id');
      } else {
        sessions.push(s as OcSession);
      }
    });
  }
  // message files of sessions the list does not name are replayed too
  const msgDir = join(dir, 'messages');
  const listed = new Set(sessions.map((s) => s.id));
  if (existsSync(msgDir)) {
    for (const f of (await readdir(msgDir)).sort()) {
      const id = f.replace(/\.json$/, '');
      if (f.endsWith('.json') && !listed.has(id)) sessions.push({ id });
    }
  }
  let done = 0;
  for (const s of sessions) {
    const candidates = [join('messages', `${s.id}.json`), `${s.id}.json`];
    const rel = candidates.find((f) => existsSync(join(dir, f)));
    opts.onProgress?.(++done, sessions.length);
    if (rel === undefined) {
      c.issue(`session ${s.id}`, '(file)', `missing messages/${s.id}.json`);
      continue;
    }
    let messages: unknown;
    try {
      messages = JSON.parse(await readFile(join(dir, rel), 'utf8'));
    } catch (e) {
      c.issue(rel, '(json)', `invalid JSON (${(e as Error).message.slice(0, 80)})`);
      continue;
    }
    c.session(s, messages, rel);
  }
  return c.finish();
}

export interface DbSessionRow {
  id: string;
  parent_id: string | null;
  agent: string | null;
  directory: string | null;
  time_created: number;
}

/** A session row -> the session as opencode's API gives it (the fields the converter reads). */
export function dbSession(row: DbSessionRow): OcSession {
  return {
    id: row.id,
    ...(row.parent_id ? { parentID: row.parent_id } : {}),
    ...(row.agent ? { agent: row.agent } : {}),
    ...(row.directory ? { directory: row.directory } : {}),
  };
}

export interface DbMessageRow {
  id: string;
  data: string;
}
export interface DbPartRow {
  id: string;
  message_id: string;
  data: string;
}

/**
 * A message row and its part rows (in part id order) -> the message as
 * `GET /session/{id}/message` lists it. Throws when a row's `data` is not JSON.
 */
export function dbMessage(
  sessionId: string,
  m: DbMessageRow,
  parts: readonly DbPartRow[],
): { info: Record<string, unknown>; parts: Record<string, unknown>[] } {
  return {
    info: { ...JSON.parse(m.data), id: m.id, sessionID: sessionId },
    parts: parts.map((p) => ({ ...JSON.parse(p.data), id: p.id, messageID: p.message_id, sessionID: sessionId })),
  };
}

async function loadSqlite(path: string, opts: LoadOptions): Promise<LoadedInput> {
  const c = collector('sqlite', opts);
  // one read transaction through the sqlite3 command (sqlite.ts)
  const db = SqliteReader.open(path);
  try {
    await db.all('BEGIN');
    const sessions = await db.all<DbSessionRow>(
      'SELECT id, parent_id, agent, directory, time_created FROM session ORDER BY time_created, id',
    );
    const msgs = (sid: string) =>
      db.all<DbMessageRow>(`SELECT id, data FROM message WHERE session_id = ${lit(sid)} ORDER BY time_created, id`);
    const parts = (sid: string) =>
      db.all<DbPartRow>(`SELECT id, message_id, data FROM part WHERE session_id = ${lit(sid)} ORDER BY message_id, id`);
    let done = 0;
    for (const row of sessions) {
      opts.onProgress?.(++done, sessions.length);
      const where = `session ${row.id}`;
      const byMessage = new Map<string, DbPartRow[]>();
      const messages: unknown[] = [];
      const [partRows, msgRows] = await Promise.all([parts(row.id), msgs(row.id)]);
      try {
        for (const p of partRows) {
          const list = byMessage.get(p.message_id);
          if (list === undefined) byMessage.set(p.message_id, [p]);
          else list.push(p);
        }
        for (const m of msgRows) messages.push(dbMessage(row.id, m, byMessage.get(m.id) ?? []));
      } catch (e) {
        c.issue(where, 'data', `unreadable row (${(e as Error).message.slice(0, 80)})`);
        continue;
      }
      c.session(dbSession(row), messages, where);
    }
  } finally {
    await db.close();
  }
  return c.finish();
}
