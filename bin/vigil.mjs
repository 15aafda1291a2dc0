#!/usr/bin/env node
// The `vigil` command. In a clone (the TypeScript sources are here) it runs them through
// tsx's loader, so `npm install` is all a clone needs; an installed package runs the
// JavaScript build in dist/.
import { existsSync } from 'node:fs';
import { register as registerHooks } from 'node:module';
import { fileURLToPath } from 'node:url';

if (existsSync(new URL('../cli/main.ts', import.meta.url))) {
  const { register } = await import('tsx/esm/api');
  registerHooks('./source-conditions.mjs', import.meta.url);
  // The project's tsconfig (decorators) whatever the working directory.
  register({ tsconfig: fileURLToPath(new URL('../tsconfig.json', import.meta.url)) });
  await import('../cli/main.ts');
} else {
  await import('../dist/cli/main.js');
}
