import {
  closeSync,
  createReadStream,
  existsSync,
  openSync,
  readdirSync,
  readFileSync,
  readSync,
  statSync,
} from 'node:fs';
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import type { z } from 'zod';
import { ProgressEventSchema, RequestRecordSchema } from '../../../core/wire.ts';
import { type OcSession, sessionToInputs } from '../../../opencode/convert.ts';
import { isRollout, rolloutSession } from '../../../sensors/codex/replay.ts';
import { chatSession, isChat } from '../../../sensors/gemini/replay.ts';
import type { JudgeInput } from '../judge.ts';
import { fastInput } from './fastline.ts';
import { lit, SqliteReader } from './sqlite.ts';

// The three inputs `vigil replay INPUT` reads, all turned into judge inputs in replay
// order. A bad record is reported (where + field + message) and skipped; the rest goes
// on. `eachInput` hands them over one at a time and keeps none; `loadInput` collects
// them into a list.
//
// 1. JSONL: one object per line, a progress event or a request record. The optional
//    `type` field says which ("progress" | "request"); without it a line with
//    `request_id` is a request record, anything else a progress event. Lines are
//    replayed in file order (the writer's order is the truth), read line by line:
//    memory does not grow with the file.
// 2. A folder of opencode exports:
//      session.json            the `GET /session` list (children included)
//      messages/<id>.json      `GET /session/{id}/message` for each session
//    (`<id>.json` beside session.json is accepted too). Sessions are merged by time.
// 3. opencode's own SQLite DB (`opencode.db`, tables session / message / part with the
//    JSON in `data`), opened read-only. Sessions are merged by time.
// 4. Codex rollouts: one `rollout-*.jsonl`, or a folder holding them (CODEX_HOME/sessions),
//    mapped as the Codex hooks map them live (sensors/codex/replay.ts). Merged by time.
// 5. Gemini CLI chat files: one `session-*.jsonl`, or a folder holding them (a project's
//    chats/, subagents' files in chats/<parent>/), mapped as the Gemini hooks map them
//    live (sensors/gemini/replay.ts). Merged by time.
// Merging by time needs every session's inputs first: folders and DBs are loaded (in
// their converted form, no content), then handed over.

export type InputKind = 'jsonl' | 'folder' | 'sqlite' | 'codex' | 'gemini';

export interface InputIssue {
  /** `line 12`, `messages/ses_x.json message 3 part 2`, `session ses_x` */
  where: string;
  field: string;
  message: string;
}

export interface SessionInfo {
  agent?: string;
  parent?: string;
}

export interface LoadedInput {
  kind: InputKind;
  inputs: JudgeInput[];
  issues: InputIssue[];
  /** what the source says about each session (exports and the DB know agents and parents) */
  sessions: Map<string, SessionInfo>;
}

export interface LoadOptions {
  /** Called once per issue as it is found (replay prints them to stderr at once). */
  onIssue?: (i: InputIssue) => void;
  /** Progress: lines for JSONL (counted first, only when asked), sessions for the others. */
  onProgress?: (done: number, total: number) => void;
}

/** What a streamed input leaves besides its inputs: no input is kept. */
export interface StreamedInput {
  kind: InputKind;
  /** inputs handed over */
  inputs: number;
  /** rejected records, all counted */
  rejected: number;
  /** the first MAX_KEPT_ISSUES of them (each went to onIssue as it was found) */
  issues: InputIssue[];
  sessions: Map<string, SessionInfo>;
}

/** Issues kept in a result; the rest are counted (and were each reported as found). */
export const MAX_KEPT_ISSUES = 100;

const SQLITE_MAGIC = 'SQLite format 3\0';

export function detectKind(path: string): InputKind {
  const st = statSync(path);
  if (st.isDirectory()) {
    if (existsSync(join(path, 'session.json'))) return 'folder';
    if (rolloutFiles(path).length) return 'codex';
    return chatFiles(path).length ? 'gemini' : 'folder';
  }
  const head = Buffer.alloc(200);
  const fd = openSync(path, 'r');
  try {
    readSync(fd, head, 0, 200, 0);
  } finally {
    closeSync(fd);
  }
  if (head.subarray(0, 16).toString('latin1') === SQLITE_MAGIC) return 'sqlite';
  const text = head.toString('utf8');
  return isRollout(text) ? 'codex' : isChat(text) ? 'gemini' : 'jsonl';
}

/** Gemini CLI chat files under `dir` (a main session's, and subagents' in a folder named by their parent). */
function chatFiles(dir: string): { file: string; parent?: string }[] {
  const out: { file: string; parent?: string }[] = [];
  const walk = (d: string, depth: number, parent?: string) => {
    if (depth > 4) return;
    for (const e of readdirSync(d, { withFileTypes: true })) {
      if (e.isDirectory()) walk(join(d, e.name), depth + 1, /^[0-9a-f-]{36}$/.test(e.name) ? e.name : undefined);
      else if (e.name.endsWith('.jsonl') && (parent || /^session-.*\.jsonl$/.test(e.name)))
        out.push({ file: join(d, e.name), ...(parent ? { parent } : {}) });
    }
  };
  walk(dir, 0);
  return out.sort((a, b) => a.file.localeCompare(b.file));
}

async function loadGemini(path: string, opts: LoadOptions): Promise<LoadedInput> {
  const out: LoadedInput = { kind: 'gemini', inputs: [], issues: [], sessions: new Map() };
  const timed: Timed[] = [];
  const files = statSync(path).isDirectory() ? chatFiles(path) : [{ file: path }];
  files.forEach((f, n) => {
    const s = chatSession(readFileSync(f.file, 'utf8'), f.parent);
    if (!s) {
      const i = { where: f.file, field: 'sessionId', message: 'not a Gemini CLI chat file (no header line)' };
      out.issues.push(i);
      opts.onIssue?.(i);
      return;
    }
    out.sessions.set(s.session, s.parent ? { parent: s.parent } : {});
    for (const e of s.events) timed.push({ ts: e.ts, seq: timed.length, input: { type: 'progress', event: e } });
    opts.onProgress?.(n + 1, files.length);
  });
  return finish(out, timed);
}

/** The Codex rollout files under `dir`, any depth. */
function rolloutFiles(dir: string): string[] {
  const out: string[] = [];
  const walk = (d: string, depth: number) => {
    if (depth > 5) return;
    for (const e of readdirSync(d, { withFileTypes: true })) {
      if (e.isDirectory()) walk(join(d, e.name), depth + 1);
      else if (/^rollout-.*\.jsonl$/.test(e.name)) out.push(join(d, e.name));
    }
  };
  walk(dir, 0);
  return out.sort();
}

async function loadCodex(path: string, opts: LoadOptions): Promise<LoadedInput> {
  const out: LoadedInput = { kind: 'codex', inputs: [], issues: [], sessions: new Map() };
  const timed: Timed[] = [];
  const files = statSync(path).isDirectory() ? rolloutFiles(path) : [path];
  files.forEach((f, n) => {
    const s = rolloutSession(readFileSync(f, 'utf8'));
    if (!s) {
      const i = { where: f, field: 'session_meta', message: 'not a Codex rollout (no session_meta first)' };
      out.issues.push(i);
      opts.onIssue?.(i);
      return;
    }
    out.sessions.set(s.session, { ...(s.agent ? { agent: s.agent } : {}), ...(s.parent ? { parent: s.parent } : {}) });
    for (const e of s.events) timed.push({ ts: e.ts, seq: timed.length, input: { type: 'progress', event: e } });
    opts.onProgress?.(n + 1, files.length);
  });
  return finish(out, timed);
}

export async function loadInput(path: string, opts: LoadOptions = {}): Promise<LoadedInput> {
  const kind = detectKind(path);
  if (kind === 'folder') return loadFolder(path, opts);
  if (kind === 'sqlite') return loadSqlite(path, opts);
  if (kind === 'codex') return loadCodex(path, opts);
  if (kind === 'gemini') return loadGemini(path, opts);
  const out: LoadedInput = { kind, inputs: [], issues: [], sessions: new Map() };
  await streamJsonl(
    path,
    (i) => {
      out.inputs.push(i);
    },
    {
      ...opts,
      onIssue: (i) => {
        out.issues.push(i);
        opts.onIssue?.(i);
      },
    },
  );
  return out;
}

/**
 * Hand INPUT's judge inputs to `each` in replay order, keeping none: a JSONL file is
 * read and judged line by line; a folder or a DB is loaded first (merged by time).
 */
export async function eachInput(
  path: string,
  each: (i: JudgeInput) => void,
  opts: LoadOptions = {},
): Promise<StreamedInput> {
  const kind = detectKind(path);
  if (kind === 'jsonl') return streamJsonl(path, each, opts);
  const loaded =
    kind === 'folder'
      ? await loadFolder(path, opts)
      : kind === 'codex'
        ? await loadCodex(path, opts)
        : kind === 'gemini'
          ? await loadGemini(path, opts)
          : await loadSqlite(path, opts);
  for (const i of loaded.inputs) each(i);
  return {
    kind,
    inputs: loaded.inputs.length,
    rejected: loaded.issues.length,
    issues: loaded.issues.slice(0, MAX_KEPT_ISSUES),
    sessions: loaded.sessions,
  };
}

/** The first issue of a zod error, as field + message. */
export function zodIssue(e: z.ZodError): { field: string; message: string } {
  const i = e.issues[0];
  const field = i.path.length
    ? i.path.join('.')
    : i.code === 'unrecognized_keys'
      ? (i as { keys: string[] }).keys.join(',')
      : '(record)';
  return { field, message: i.message };
}

/** One JSONL line -> a judge input, or the issue that rejects it. */
export function parseLine(line: string, where: string): JudgeInput | InputIssue {
  let raw: unknown;
  try {
    raw = JSON.parse(line);
  } catch (e) {
    return { where, field: '(json)', message: `invalid JSON (${(e as Error).message.slice(0, 80)})` };
  }
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) {
    return { where, field: '(json)', message: 'expected a JSON object' };
  }
  // the common, plainly valid records skip zod (fastline.ts: the same checks, the same output)
  const fast = fastInput(raw as Record<string, unknown>);
  if (fast !== undefined) return fast;
  const { type, ...rest } = raw as Record<string, unknown>;
  const isRequest = type === 'request' || (type === undefined && 'request_id' in rest);
  if (type !== undefined && type !== 'request' && type !== 'progress') {
    return {
      where,
      field: 'type',
      message: `expected "progress" or "request", got ${JSON.stringify(type).slice(0, 40)}`,
    };
  }
  if (isRequest) {
    const r = RequestRecordSchema.safeParse(rest);
    return r.success ? { type: 'request', record: r.data } : { where, ...zodIssue(r.error) };
  }
  const r = ProgressEventSchema.safeParse(rest);
  return r.success ? { type: 'progress', event: r.data } : { where, ...zodIssue(r.error) };
}

/** Lines in a file, read in chunks (for a progress total, without holding the file). */
async function countLines(path: string): Promise<number> {
  let n = 0;
  let last = 10;
  for await (const chunk of createReadStream(path)) {
    const buf = chunk as Buffer;
    for (let i = buf.indexOf(10); i >= 0; i = buf.indexOf(10, i + 1)) n++;
    if (buf.length) last = buf[buf.length - 1];
  }
  return last === 10 ? n : n + 1;
}

const isSpace = (c: number) => c === 32 || (c >= 9 && c <= 13) || c === 0xa0 || c === 0xfeff || c > 0x1000;

async function streamJsonl(path: string, each: (i: JudgeInput) => void, opts: LoadOptions): Promise<StreamedInput> {
  const out: StreamedInput = { kind: 'jsonl', inputs: 0, rejected: 0, issues: [], sessions: new Map() };
  const total = opts.onProgress ? await countLines(path) : 0;
  const rl = createInterface({
    input: createReadStream(path, { encoding: 'utf8' }),
    crlfDelay: Number.POSITIVE_INFINITY,
  });
  let n = 0;
  for await (const line of rl) {
    n++;
    if (opts.onProgress && (n & 1023) === 0) opts.onProgress(n, total);
    // blank lines are skipped; only a line starting with a space can be blank
    if (line.length === 0 || (isSpace(line.charCodeAt(0)) && line.trim() === '')) continue;
    const r = parseLine(line, `line ${n}`);
    if ('where' in r) {
      out.rejected++;
      if (out.issues.length < MAX_KEPT_ISSUES) out.issues.push(r);
      opts.onIssue?.(r);
    } else {
      out.inputs++;
      each(r);
    }
  }
  opts.onProgress?.(n, total);
  return out;
}

interface Timed {
  ts: number;
  seq: number;
  input: JudgeInput;
}

const tsOf = (i: JudgeInput) => (i.type === 'progress' ? i.event.ts : i.type === 'request' ? i.record.ts : 0);

/** Converter output checked against the wire schemas (bounds, ASCII): null when it passes, else why not. */
export function checkInput(i: JudgeInput): { field: string; message: string } | null {
  const r =
    i.type === 'progress'
      ? ProgressEventSchema.safeParse(i.event)
      : i.type === 'request'
        ? RequestRecordSchema.safeParse(i.record)
        : null;
  return r !== null && !r.success ? zodIssue(r.error) : null;
}

function admit(out: LoadedInput, timed: Timed[], where: string, i: JudgeInput, opts: LoadOptions): void {
  const bad = checkInput(i);
  if (bad !== null) {
    const issue = { where, ...bad };
    out.issues.push(issue);
    opts.onIssue?.(issue);
    return;
  }
  timed.push({ ts: tsOf(i), seq: timed.length, input: i });
}

function convertSession(
  out: LoadedInput,
  timed: Timed[],
  s: OcSession,
  messages: unknown,
  file: string,
  opts: LoadOptions,
): void {
  if (!Array.isArray(messages)) {
    const issue = { where: file, field: '(file)', message: 'expected the JSON array of GET /session/{id}/message' };
    out.issues.push(issue);
    opts.onIssue?.(issue);
    return;
  }
  const { inputs, issues } = sessionToInputs(s, messages);
  for (const i of issues) {
    const issue = { where: `${file} ${i.where}`, field: i.field, message: i.message };
    out.issues.push(issue);
    opts.onIssue?.(issue);
  }
  inputs.forEach((i, j) => {
    admit(out, timed, `${file} input ${j}`, i, opts);
  });
  if (!out.sessions.has(s.id)) {
    const agent = s.agent ?? inputs.find((i) => i.type === 'request')?.record.agent;
    out.sessions.set(s.id, { ...(agent ? { agent } : {}), ...(s.parentID ? { parent: s.parentID } : {}) });
  }
}

function finish(out: LoadedInput, timed: Timed[]): LoadedInput {
  timed.sort((a, b) => a.ts - b.ts || a.seq - b.seq);
  out.inputs = timed.map((t) => t.input);
  return out;
}

async function loadFolder(dir: string, opts: LoadOptions): Promise<LoadedInput> {
  const out: LoadedInput = { kind: 'folder', inputs: [], issues: [], sessions: new Map() };
  const timed: Timed[] = [];
  const issue = (where: string, field: string, message: string) => {
    const i = { where, field, message };
    out.issues.push(i);
    opts.onIssue?.(i);
  };
  let list: unknown = [];
  const listFile = join(dir, 'session.json');
  if (existsSync(listFile)) {
    try {
      list = JSON.parse(await readFile(listFile, 'utf8'));
    } catch (e) {
      issue('session.json', '(json)', `invalid JSON (${(e as Error).message.slice(0, 80)})`);
    }
  } else {
    issue('session.json', '(file)', 'missing: expected the GET /session list');
  }
  const sessions: OcSession[] = [];
  if (!Array.isArray(list)) issue('session.json', '(file)', 'expected a JSON array');
  else {
    list.forEach((s, i) => {
      if (s === null || typeof s !== 'object' || typeof (s as OcSession).id !== 'string') {
        issue(`session.json [${i}]`, 'id', 'expected a session object with a string id');
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
    const rel = candidates.find((c) => existsSync(join(dir, c)));
    opts.onProgress?.(++done, sessions.length);
    if (rel === undefined) {
      issue(`session ${s.id}`, '(file)', `missing messages/${s.id}.json`);
      continue;
    }
    let messages: unknown;
    try {
      messages = JSON.parse(await readFile(join(dir, rel), 'utf8'));
    } catch (e) {
      issue(rel, '(json)', `invalid JSON (${(e as Error).message.slice(0, 80)})`);
      continue;
    }
    convertSession(out, timed, s, messages, rel, opts);
  }
  return finish(out, timed);
}

interface SessionRow {
  id: string;
  parent_id: string | null;
  agent: string | null;
  directory: string | null;
  time_created: number;
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
  const out: LoadedInput = { kind: 'sqlite', inputs: [], issues: [], sessions: new Map() };
  const timed: Timed[] = [];
  // one read transaction through the sqlite3 command (sqlite.ts)
  const db = SqliteReader.open(path);
  try {
    await db.all('BEGIN');
    const sessions = await db.all<SessionRow>(
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
        for (const m of msgRows) {
          messages.push(dbMessage(row.id, m, byMessage.get(m.id) ?? []));
        }
      } catch (e) {
        const issue = { where, field: 'data', message: `unreadable row (${(e as Error).message.slice(0, 80)})` };
        out.issues.push(issue);
        opts.onIssue?.(issue);
        continue;
      }
      const s: OcSession = {
        id: row.id,
        ...(row.parent_id ? { parentID: row.parent_id } : {}),
        ...(row.agent ? { agent: row.agent } : {}),
        ...(row.directory ? { directory: row.directory } : {}),
      };
      convertSession(out, timed, s, messages, where, opts);
    }
  } finally {
    await db.close();
  }
  return finish(out, timed);
}
