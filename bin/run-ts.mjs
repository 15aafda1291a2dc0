#!/usr/bin/env node
import { register as registerHooks } from 'node:module';
// Runs a TypeScript script (bench/*.ts, test helpers) through tsx: node bin/run-ts.mjs FILE [args]
import { resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { register } from 'tsx/esm/api';

registerHooks('./source-conditions.mjs', import.meta.url);
register({ tsconfig: fileURLToPath(new URL('../tsconfig.json', import.meta.url)) });
const [file] = process.argv.splice(2, 1);
if (!file) {
  console.error('usage: node bin/run-ts.mjs FILE.ts [args...]');
  process.exit(2);
}
await import(pathToFileURL(resolve(file)).href);
