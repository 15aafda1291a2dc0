import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { lit, sqliteCommand } from '../../sensors/opencode/sqlite.ts';

// A synthetic opencode.db with opencode 1.18.33's own definitions of the tables the
// watchdog and replay read (copied from test/fixtures/opencode-export/opencode.db), in
// WAL mode as opencode runs it. Rows are written the way opencode writes them: an
// upsert on the id keeps the rowid and bumps time_updated (a tool part going from
// running to completed is one such update). For the watchdog's DB tests and
// bench/watchdog.ts. Written through the sqlite3 command (as the watchdog reads), one
// call per write or per batch(), with a connection kept open so the WAL stays.

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
  /** Statements of the batch being written (batch()); undefined: each write runs at once. */
  private pending: string[] | undefined;
  /** A connection kept open, as opencode keeps its own: the WAL stays between writes. */
  private keeper: ChildProcess | undefined;

  constructor(readonly path: string) {
    const fresh = !existsSync(path) || this.all("SELECT 1 AS x FROM sqlite_master WHERE name = 'session'").length === 0;
    this.run(
      `PRAGMA journal_mode = WAL;${
        fresh
          ? `${SCHEMA};INSERT INTO project (id, worktree, time_created, time_updated, sandboxes) VALUES (${lit(PROJECT)}, '/work/project', 0, 0, '[]')`
          : ''
      }`,
    );
    this.keeper = spawn(sqliteCommand(), [path], { stdio: ['pipe', 'ignore', 'ignore'] });
    this.keeper.on('error', () => {});
    this.keeper.stdin?.on('error', () => {});
    this.keeper.stdin?.write('SELECT count(*) FROM sqlite_master;\n');
  }

  /** Runs SQL (several statements), or adds it to the batch being written. */
  exec(sql: string): void {
    if (this.pending) {
      this.pending.push(sql);
      return;
    }
    this.run(`BEGIN;\n${sql};\nCOMMIT`);
  }

  private run(sql: string): void {
    execFileSync(sqliteCommand(), ['-bail', this.path], {
      input: `.timeout 5000\n${sql};\n`,
      stdio: ['pipe', 'ignore', 'pipe'],
      maxBuffer: 64 * 1024 * 1024,
    });
  }

  /** Rows of one query, read as a reader would (read-only). */
  all<T = Record<string, unknown>>(sql: string): T[] {
    const out = execFileSync(sqliteCommand(), ['-json', '-readonly', this.path, sql], {
      encoding: 'utf8',
      maxBuffer: 256 * 1024 * 1024,
    }).trim();
    return out ? (JSON.parse(out) as T[]) : [];
  }

  session(s: DbSession): void {
    this.exec(
      `INSERT INTO session (id, project_id, parent_id, slug, directory, title, version, agent, time_created, time_updated)
         VALUES (${[s.id, PROJECT, s.parent ?? null].map(lit).join(', ')}, 'synthetic', ${lit(s.directory ?? '/work/project')},
           'synthetic', '1.18.33', ${lit(s.agent ?? null)}, ${lit(s.created)}, ${lit(s.updated)})
         ON CONFLICT(id) DO UPDATE SET parent_id = excluded.parent_id, agent = excluded.agent,
           directory = excluded.directory, time_updated = excluded.time_updated`,
    );
  }

  touch(id: string, updated: number): void {
    this.exec(`UPDATE session SET time_updated = ${lit(updated)} WHERE id = ${lit(id)}`);
  }

  /** Upsert one message and its parts (rows keep their rowid; time_updated moves to `at`). */
  message(sid: string, m: ListedMessage, at?: number): void {
    const { id, sessionID: _s, ...info } = m.info;
    const created = m.info.time?.created ?? 0;
    const when = at ?? created;
    const sql = [
      `INSERT INTO message (id, session_id, time_created, time_updated, data)
         VALUES (${[id, sid, created, when, JSON.stringify(info)].map(lit).join(', ')})
         ON CONFLICT(id) DO UPDATE SET data = excluded.data, time_updated = excluded.time_updated`,
      ...m.parts.map((p) => this.partSql(sid, id, p, when)),
    ];
    this.exec(sql.join(';\n'));
  }

  part(sid: string, mid: string, p: { id: string; [k: string]: unknown }, at: number): void {
    this.exec(this.partSql(sid, mid, p, at));
  }

  private partSql(sid: string, mid: string, p: { id: string; [k: string]: unknown }, at: number): string {
    const { id, sessionID: _s, messageID: _m, ...data } = p;
    return `INSERT INTO part (id, message_id, session_id, time_created, time_updated, data)
         VALUES (${[id, mid, sid, at, at, JSON.stringify(data)].map(lit).join(', ')})
         ON CONFLICT(id) DO UPDATE SET data = excluded.data, time_updated = excluded.time_updated`;
  }

  /** opencode's revert: the message and its parts go. */
  deleteMessage(id: string): void {
    this.exec(`DELETE FROM part WHERE message_id = ${lit(id)};\nDELETE FROM message WHERE id = ${lit(id)}`);
  }

  /** Many writes as one transaction (a bench builds thousands of sessions). */
  batch(fn: () => void): void {
    const outer = this.pending === undefined;
    this.pending ??= [];
    try {
      fn();
    } finally {
      if (outer) {
        const sql = this.pending.join(';\n');
        this.pending = undefined;
        if (sql) this.exec(sql);
      }
    }
  }

  /** The WAL checkpointed into the file (as opencode leaves it when it exits), the kept connection closed. */
  close(): void {
    this.keeper?.kill('SIGKILL');
    this.keeper = undefined;
    this.run('PRAGMA wal_checkpoint(TRUNCATE)');
  }
}
