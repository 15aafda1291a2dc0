#!/usr/bin/env node
// Kept for scripts that call it: the same as `vigil install opencode [--dest DIR | --project DIR]`
// (sensors/opencode/plugin/installer.ts, the one implementation).
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const cli = fileURLToPath(new URL('../../../bin/vigil.mjs', import.meta.url));
const r = spawnSync(process.execPath, [cli, 'install', 'opencode', ...process.argv.slice(2)], { stdio: 'inherit' });
process.exit(r.status ?? 1);
