import { existsSync, readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The package's root folder (where package.json is), whether running from the sources or from dist/. */
export const PACKAGE_ROOT = findRoot(dirname(fileURLToPath(import.meta.url)));

function findRoot(from: string): string {
  for (let d = from; ; d = dirname(d)) {
    if (existsSync(join(d, 'package.json'))) return d;
    if (dirname(d) === d) return from;
  }
}

/** The package's version (package.json). */
export const VERSION: string = JSON.parse(readFileSync(join(PACKAGE_ROOT, 'package.json'), 'utf8')).version;

/**
 * An XDG base folder of `env`: the variable when it holds an absolute path (relative
 * ones are ignored, per the spec), else `~/<fallback>`.
 */
export function xdgDir(env: NodeJS.ProcessEnv, name: 'XDG_STATE_HOME' | 'XDG_DATA_HOME', fallback: string): string {
  const v = env[name];
  return v?.startsWith('/') ? v : join(env.HOME || homedir(), fallback);
}

/** Where Vigil keeps local state files: $XDG_STATE_HOME/vigil (~/.local/state/vigil). */
export function stateDir(env: NodeJS.ProcessEnv): string {
  return join(xdgDir(env, 'XDG_STATE_HOME', '.local/state'), 'vigil');
}
