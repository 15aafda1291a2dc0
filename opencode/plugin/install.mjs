#!/usr/bin/env node
// Builds the Vigil opencode plugin and copies it where opencode loads plugins from.
//
//   node opencode/plugin/install.mjs                  (npm run plugin:install)
//       -> $XDG_CONFIG_HOME/opencode/plugin/vigil.js (default ~/.config/opencode/plugin/)
//   node opencode/plugin/install.mjs --project DIR    -> DIR/.opencode/plugin/vigil.js
//   node opencode/plugin/install.mjs --dest DIR       -> DIR/vigil.js
//
// Prints the version it installed and the one it replaced, so a stale install is
// obvious; GET /health on the service lists the versions it hears from.
import { copyFileSync, existsSync, mkdirSync, readFileSync, realpathSync } from 'node:fs';
import { homedir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildPlugin } from './build.mjs';

const USAGE = 'usage: install.mjs [--dest DIR | --project DIR]';

function targetDir(argv, env) {
  const at = (flag) => {
    const i = argv.indexOf(flag);
    if (i < 0) return undefined;
    const v = argv[i + 1];
    if (!v || v.startsWith('--')) throw new Error(`${flag} needs a directory\n${USAGE}`);
    return resolve(v);
  };
  const dest = at('--dest');
  const project = at('--project');
  if (dest && project) throw new Error(`give --dest or --project, not both\n${USAGE}`);
  const unknown = argv.filter((a) => a.startsWith('--') && !['--dest', '--project'].includes(a));
  if (unknown.length) throw new Error(`unknown option ${unknown[0]}\n${USAGE}`);
  if (dest) return dest;
  if (project) return join(project, '.opencode', 'plugin');
  return join(env.XDG_CONFIG_HOME || join(homedir(), '.config'), 'opencode', 'plugin');
}

/** The version banner of an installed bundle, if any. */
function installedVersion(file) {
  if (!existsSync(file)) return undefined;
  const m = readFileSync(file, 'utf8')
    .slice(0, 300)
    .match(/^\/\/ vigil-opencode (\S+):/);
  return m ? m[1] : 'unknown';
}

export async function install(argv = [], env = process.env) {
  const dir = targetDir(argv, env);
  const { path, version } = await buildPlugin();
  mkdirSync(dir, { recursive: true });
  const file = join(dir, 'vigil.js');
  const before = installedVersion(file);
  copyFileSync(path, file);
  return { file, version, before };
}

if (process.argv[1] && realpathSync(process.argv[1]) === fileURLToPath(import.meta.url)) {
  try {
    const { file, version, before } = await install(process.argv.slice(2));
    const was = before === undefined ? '' : before === version ? ' (unchanged)' : ` (replaced ${before})`;
    console.log(`installed vigil-opencode/${version} -> ${file}${was}`);
    console.log(
      'restart opencode to load it; GET /health on the Vigil service lists the plugin versions it hears from',
    );
  } catch (e) {
    console.error(`install failed: ${e instanceof Error ? e.message : String(e)}`);
    process.exit(1);
  }
}
