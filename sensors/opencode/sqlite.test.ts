import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import { needsSqlite3 } from '../../test/helpers/external.ts';
import { tempDir } from '../../test/helpers/index.ts';
import { lit, SqliteReader } from './sqlite.ts';

const SQLITE3 = needsSqlite3(import.meta.filename);
const EXPORT_DB = join(import.meta.dirname, '../../test/fixtures/opencode-export/opencode.db');

describe.runIf(SQLITE3)('opencode.db through the sqlite3 command', () => {
  const open: SqliteReader[] = [];
  afterEach(async () => {
    for (const r of open.splice(0)) await r.close();
  });
  const reader = (path: string) => {
    const r = SqliteReader.open(path);
    open.push(r);
    return r;
  };

  it('answers queries in order, empty results included, inside one read transaction', async () => {
    const db = reader(EXPORT_DB);
    await db.all('BEGIN');
    const [sessions, none, one] = await Promise.all([
      db.all<{ n: number }>('SELECT COUNT(*) AS n FROM session'),
      db.all('SELECT id FROM session WHERE 0'),
      db.get<{ x: number; s: string; n: null }>("SELECT 1 AS x, 'a' AS s, NULL AS n"),
    ]);
    expect(sessions[0].n).toBeGreaterThan(0);
    expect(none).toEqual([]);
    expect(one).toEqual({ x: 1, s: 'a', n: null });
  });

  it('a string literal comes back as it went in, whatever it holds', async () => {
    const db = reader(EXPORT_DB);
    await fc.assert(
      fc.asyncProperty(
        fc.string({ unit: 'binary' }).filter((s) => !s.includes('\0')),
        async (s) => {
          expect((await db.get<{ v: string }>(`SELECT ${lit(s)} AS v`))?.v).toBe(s);
        },
      ),
      { numRuns: 200 },
    );
    expect(() => lit(Number.NaN)).toThrow();
    expect(() => lit('a\0b')).toThrow();
  });

  it("SQLite's own error fails the query and every later one: no such table, not a database", async () => {
    const db = reader(EXPORT_DB);
    await expect(db.all('SELECT * FROM nope')).rejects.toThrow(/no such table: nope/);
    await expect(db.all('SELECT 1')).rejects.toThrow(/no such table/);
    const junk = join(tempDir(), 'junk.db');
    writeFileSync(junk, 'not sqlite at all, just text that is long enough to have a header'.repeat(20));
    await expect(reader(junk).all('SELECT 1 FROM session')).rejects.toThrow(/not a database/);
  });

  it('a missing command says which and how to get it', async () => {
    const before = process.env.VIGIL_SQLITE3;
    process.env.VIGIL_SQLITE3 = '/nonexistent/sqlite3';
    try {
      await expect(reader(EXPORT_DB).all('SELECT 1')).rejects.toThrow(
        /the \/nonexistent\/sqlite3 command is not installed \(apt-get install sqlite3\)/,
      );
    } finally {
      if (before === undefined) delete process.env.VIGIL_SQLITE3;
      else process.env.VIGIL_SQLITE3 = before;
    }
  });
});
