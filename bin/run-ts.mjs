#!/usr/bin/env node
// Runs a TypeScript script (bench/*.ts, test helpers) through tsx: node bin/run-ts.mjs FILE [args]
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { register } from 'tsx/esm/api';

register();
const [file] = process.argv.splice(2, 1);
if (!file) {
  console.error('usage: node bin/run-ts.mjs FILE.ts [args...]');
  process.exit(2);
}
await import(pathToFileURL(resolve(file)).href);
