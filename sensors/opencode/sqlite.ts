import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';

// opencode.db read through the sqlite3 command (one process per read, its stdin kept
// open): Node 20 has no SQLite of its own, a native addon compiles on every install,
// and the WASM builds cannot read a database in WAL mode while opencode writes it (sql.js
// reads the main file only and misses the WAL; node-sqlite3-wasm cannot open it). The
// command is SQLite itself: it reads the WAL as opencode left it, read-only.
// Each query is written with a marker line after it (`.print`); its rows arrive as one
// JSON array (-json) before the marker. With -bail an SQL error ends the process and
// fails the query with SQLite's message (no such table, not a database, ...).

/** An SQL literal (the CLI has no bound parameters): a finite number, a string, or NULL. */
export function lit(v: string | number | null): string {
  if (v === null) return 'NULL';
  if (typeof v === 'number') {
    if (!Number.isFinite(v)) throw new Error(`not an SQL number: ${v}`);
    return String(v);
  }
  if (v.includes('\0')) throw new Error('a NUL in an SQL string');
  return `'${v.replaceAll("'", "''")}'`;
}

/** Where the sqlite3 command is: $VIGIL_SQLITE3, else `sqlite3` on PATH. */
export const sqliteCommand = (): string => process.env.VIGIL_SQLITE3 || 'sqlite3';

interface Pending {
  resolve(rows: unknown[]): void;
  reject(e: Error): void;
}

export class SqliteReader {
  private out = '';
  private err = '';
  private readonly pending: Pending[] = [];
  private readonly marker = `@@vigil-${randomBytes(6).toString('hex')}@@`;
  private dead: Error | undefined;

  private constructor(private readonly child: ChildProcess) {
    child.stdout?.setEncoding('utf8');
    child.stdout?.on('data', (d: string) => {
      this.out += d;
      this.drain();
    });
    child.stderr?.on('data', (d: Buffer) => {
      this.err = (this.err + d.toString('utf8')).slice(-4_000);
    });
    child.on('error', (e: NodeJS.ErrnoException) =>
      this.fail(
        e.code === 'ENOENT'
          ? new Error(
              `the ${sqliteCommand()} command is not installed (apt-get install sqlite3), needed to read opencode.db`,
            )
          : e,
      ),
    );
    child.on('close', () => this.fail(new Error(this.err.trim().split('\n')[0] || 'sqlite3 exited')));
    child.stdin?.on('error', () => {}); // a write after an exit: 'close' fails the query
  }

  /** Opens `path` read-only (a busy database is waited for up to 5 s, as opencode's own writes take a moment). */
  static open(path: string): SqliteReader {
    const child = spawn(sqliteCommand(), ['-readonly', '-batch', '-bail', '-json', path], {
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    const r = new SqliteReader(child);
    child.stdin?.write('.timeout 5000\n');
    return r;
  }

  /** The rows of one statement. */
  all<T>(sql: string): Promise<T[]> {
    if (this.dead) return Promise.reject(this.dead);
    return new Promise<T[]>((resolve, reject) => {
      this.pending.push({ resolve: resolve as (rows: unknown[]) => void, reject });
      this.child.stdin?.write(`${sql.trim().replace(/;+$/, '')};\n.print ${this.marker}\n`);
    });
  }

  async get<T>(sql: string): Promise<T | undefined> {
    return (await this.all<T>(sql))[0];
  }

  /** Ends the process (and with it the read transaction). */
  async close(): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    const closed = new Promise((r) => this.child.once('close', r));
    this.child.stdin?.end();
    await closed;
  }

  private drain(): void {
    for (;;) {
      const at = this.out.indexOf(`${this.marker}\n`);
      if (at < 0) return;
      const body = this.out.slice(0, at).trim();
      this.out = this.out.slice(at + this.marker.length + 1);
      const p = this.pending.shift();
      if (!p) continue;
      try {
        p.resolve(body === '' ? [] : (JSON.parse(body) as unknown[]));
      } catch (e) {
        p.reject(e as Error);
      }
    }
  }

  private fail(e: Error): void {
    this.dead ??= e;
    for (const p of this.pending.splice(0)) p.reject(this.dead);
  }
}
