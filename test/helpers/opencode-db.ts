import Database from 'better-sqlite3';

// A synthetic opencode.db with opencode 1.18.33's own definitions of the tables the
// watchdog and replay read (copied from test/fixtures/opencode-export/opencode.db), in
// WAL mode as opencode runs it. Rows are written the way opencode writes them: an
// upsert on the id keeps the rowid and bumps time_updated (a tool part going from
// running to completed is one such update). For the watchdog's DB tests and
// bench/watchdog.ts.

const SCHEMA = `
CREATE TABLE \`project\` (
  \`id\` text PRIMARY KEY,
  \`worktree\` text NOT NULL,
  \`vcs\` text,
  \`name\` text,
  \`icon_url\` text,
  \`icon_url_override\` text,
  \`icon_color\` text,
  \`time_created\` integer NOT NULL,
  \`time_updated\` integer NOT NULL,
  \`time_initialized\` integer,
  \`sandboxes\` text NOT NULL,
  \`commands\` text
);
CREATE TABLE \`session\` (
  \`id\` text PRIMARY KEY,
  \`project_id\` text NOT NULL,
  \`workspace_id\` text,
  \`parent_id\` text,
  \`slug\` text NOT NULL,
  \`directory\` text NOT NULL,
  \`path\` text,
  \`title\` text NOT NULL,
  \`version\` text NOT NULL,
  \`share_url\` text,
  \`summary_additions\` integer,
  \`summary_deletions\` integer,
  \`summary_files\` integer,
  \`summary_diffs\` text,
  \`metadata\` text,
  \`cost\` real DEFAULT 0 NOT NULL,
  \`tokens_input\` integer DEFAULT 0 NOT NULL,
  \`tokens_output\` integer DEFAULT 0 NOT NULL,
  \`tokens_reasoning\` integer DEFAULT 0 NOT NULL,
  \`tokens_cache_read\` integer DEFAULT 0 NOT NULL,
  \`tokens_cache_write\` integer DEFAULT 0 NOT NULL,
  \`revert\` text,
  \`permission\` text,
  \`agent\` text,
  \`model\` text,
  \`time_created\` integer NOT NULL,
  \`time_updated\` integer NOT NULL,
  \`time_compacting\` integer,
  \`time_archived\` integer,
  CONSTRAINT \`fk_session_project_id_project_id_fk\` FOREIGN KEY (\`project_id\`) REFERENCES \`project\`(\`id\`) ON DELETE CASCADE
);
CREATE TABLE \`message\` (
  \`id\` text PRIMARY KEY,
  \`session_id\` text NOT NULL,
  \`time_created\` integer NOT NULL,
  \`time_updated\` integer NOT NULL,
  \`data\` text NOT NULL,
  CONSTRAINT \`fk_message_session_id_session_id_fk\` FOREIGN KEY (\`session_id\`) REFERENCES \`session\`(\`id\`) ON DELETE CASCADE
);
CREATE TABLE \`part\` (
  \`id\` text PRIMARY KEY,
  \`message_id\` text NOT NULL,
  \`session_id\` text NOT NULL,
  \`time_created\` integer NOT NULL,
  \`time_updated\` integer NOT NULL,
  \`data\` text NOT NULL,
  CONSTRAINT \`fk_part_message_id_message_id_fk\` FOREIGN KEY (\`message_id\`) REFERENCES \`message\`(\`id\`) ON DELETE CASCADE
);
CREATE INDEX \`message_session_time_created_id_idx\` ON \`message\` (\`session_id\`,\`time_created\`,\`id\`);
CREATE INDEX \`part_message_id_id_idx\` ON \`part\` (\`message_id\`,\`id\`);
CREATE INDEX \`part_session_idx\` ON \`part\` (\`session_id\`);
CREATE INDEX \`session_project_idx\` ON \`session\` (\`project_id\`);
CREATE INDEX \`session_workspace_idx\` ON \`session\` (\`workspace_id\`);
CREATE INDEX \`session_parent_idx\` ON \`session\` (\`parent_id\`);
`;

const PROJECT = 'prj_synthetic';

export interface DbSession {
  id: string;
  parent?: string;
  agent?: string;
  directory?: string;
  created: number;
  updated: number;
}

/** An opencode-shaped message as `GET /session/{id}/message` lists it (ocMessages in test/helpers/opencode.ts). */
export interface ListedMessage {
  info: { id: string; sessionID?: string; time?: { created?: number; completed?: number }; [k: string]: unknown };
  parts: { id: string; [k: string]: unknown }[];
}

export class OcDb {
  readonly db: Database.Database;
  private readonly stmts = new Map<string, Database.Statement>();

  private q(sql: string): Database.Statement {
    let st = this.stmts.get(sql);
    if (st === undefined) {
      st = this.db.prepare(sql);
      this.stmts.set(sql, st);
    }
    return st;
  }

  constructor(readonly path: string) {
    this.db = new Database(path);
    this.db.pragma('journal_mode = WAL');
    const fresh = !this.db.prepare("SELECT 1 FROM sqlite_master WHERE name = 'session'").get();
    if (fresh) {
      this.db.exec(SCHEMA);
      this.db
        .prepare(
          "INSERT INTO project (id, worktree, time_created, time_updated, sandboxes) VALUES (?, '/work/project', 0, 0, '[]')",
        )
        .run(PROJECT);
    }
  }

  session(s: DbSession): void {
    this.q(
      `INSERT INTO session (id, project_id, parent_id, slug, directory, title, version, agent, time_created, time_updated)
         VALUES (@id, @project, @parent, 'synthetic', @directory, 'synthetic', '1.18.33', @agent, @created, @updated)
         ON CONFLICT(id) DO UPDATE SET parent_id = excluded.parent_id, agent = excluded.agent,
           directory = excluded.directory, time_updated = excluded.time_updated`,
    ).run({
      id: s.id,
      project: PROJECT,
      parent: s.parent ?? null,
      directory: s.directory ?? '/work/project',
      agent: s.agent ?? null,
      created: s.created,
      updated: s.updated,
    });
  }

  touch(id: string, updated: number): void {
    this.q('UPDATE session SET time_updated = ? WHERE id = ?').run(updated, id);
  }

  /** Upsert one message and its parts (rows keep their rowid; time_updated moves to `at`). */
  message(sid: string, m: ListedMessage, at?: number): void {
    const { id, sessionID: _s, ...info } = m.info;
    const created = m.info.time?.created ?? 0;
    const when = at ?? created;
    this.q(
      `INSERT INTO message (id, session_id, time_created, time_updated, data) VALUES (?, ?, ?, ?, ?)
         ON CONFLICT(id) DO UPDATE SET data = excluded.data, time_updated = excluded.time_updated`,
    ).run(id, sid, created, when, JSON.stringify(info));
    for (const p of m.parts) this.part(sid, id, p, when);
  }

  part(sid: string, mid: string, p: { id: string; [k: string]: unknown }, at: number): void {
    const { id, sessionID: _s, messageID: _m, ...data } = p;
    this.q(
      `INSERT INTO part (id, message_id, session_id, time_created, time_updated, data) VALUES (?, ?, ?, ?, ?, ?)
         ON CONFLICT(id) DO UPDATE SET data = excluded.data, time_updated = excluded.time_updated`,
    ).run(id, mid, sid, at, at, JSON.stringify(data));
  }

  /** opencode's revert: the message and its parts go. */
  deleteMessage(id: string): void {
    this.q('DELETE FROM part WHERE message_id = ?').run(id);
    this.q('DELETE FROM message WHERE id = ?').run(id);
  }

  /** Many writes as one transaction (a bench builds thousands of sessions). */
  batch(fn: () => void): void {
    this.db.transaction(fn)();
  }

  close(): void {
    this.db.pragma('wal_checkpoint(TRUNCATE)');
    this.db.close();
  }
}
