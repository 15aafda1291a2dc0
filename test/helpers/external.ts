import { accessSync, constants } from 'node:fs';
import { delimiter, isAbsolute, join, relative } from 'node:path';

// The one rule for a suite that needs a program from outside the repo (chromium, an
// agent CLI, redis-server, sqlite3): found, the suite runs; missing, it is skipped with
// ONE line on stderr saying which suite, what is missing and how to get it, except
// where CI is set: there a missing program fails the suite (CI must run everything,
// and .ci/run installs what it needs).

const ROOT = join(import.meta.dirname, '..', '..');

/** Where CI runs (the CI variable set, as every CI service does, and .ci/run's caller). */
export const inCi = (): boolean => !!process.env.CI && process.env.CI !== 'false' && process.env.CI !== '0';

/** The absolute path of an executable: `cmd` itself when it is a path, else the first on PATH. */
export function which(cmd: string): string | undefined {
  const ok = (p: string) => {
    try {
      accessSync(p, constants.X_OK);
      return true;
    } catch {
      return false;
    }
  };
  if (isAbsolute(cmd) || cmd.includes('/')) return ok(cmd) ? cmd : undefined;
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    if (dir && ok(join(dir, cmd))) return join(dir, cmd);
  }
  return undefined;
}

export interface Need {
  /** The suite's file (import.meta.filename): named in the line. */
  suite: string;
  /** What is needed, as the line says it: `chromium at /usr/bin/chromium`. */
  what: string;
  /** Its path when found (which(), or an install step's answer); undefined: missing. */
  found: string | undefined;
  /** How to get it: `apt-get install -y chromium, or set VIGIL_CHROMIUM`. */
  hint: string;
}

const said = new Set<string>();

/**
 * The path of what `n` needs, or undefined when the suite is to be skipped (the line
 * is printed once per suite and program). Throws where CI is set and it is missing.
 * Use: `const bin = needs({...}); describe.runIf(bin)(...)`.
 */
export function needs(n: Need): string | undefined {
  if (n.found !== undefined) return n.found;
  const suite = relative(ROOT, n.suite);
  if (inCi())
    throw new Error(`${suite} needs ${n.what}, not found (${n.hint}); CI is set, so this fails instead of skipping`);
  const line = `skipped ${suite}: no ${n.what} (${n.hint})`;
  if (!said.has(line)) {
    said.add(line);
    process.stderr.write(`${line}\n`);
  }
  return undefined;
}

/** The common case: a program on PATH. */
export const needsCommand = (suite: string, cmd: string, hint: string): string | undefined =>
  needs({ suite, what: `${cmd} on PATH`, found: which(cmd), hint });

/** redis-server and redis-cli, for the suites that start a Redis of their own. */
export const needsRedisServer = (suite: string): string | undefined =>
  needs({
    suite,
    what: 'redis-server and redis-cli on PATH',
    found: which('redis-cli') && which('redis-server'),
    hint: 'apt-get install -y redis-server',
  });

/** The sqlite3 command, for the suites that read or write an opencode.db (sensors/opencode/sqlite.ts reads through it). */
export const needsSqlite3 = (suite: string): string | undefined =>
  needs({
    suite,
    what: `${process.env.VIGIL_SQLITE3 || 'sqlite3'} on PATH`,
    found: which(process.env.VIGIL_SQLITE3 || 'sqlite3'),
    hint: 'apt-get install -y sqlite3, or set VIGIL_SQLITE3',
  });
