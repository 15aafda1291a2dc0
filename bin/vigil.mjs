#!/usr/bin/env node
// The `vigil` command. Sources are TypeScript run through tsx's loader, so a fresh
// clone needs `npm install` and nothing else (no build step to forget).
import { register } from 'tsx/esm/api';

register();
await import('../cli/main.ts');
