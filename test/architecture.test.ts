import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { E2E, REDIS } from '../vitest.config.ts';

// Rules of the house that a review would otherwise have to remember.

const ROOT = resolve(import.meta.dirname, '..');

function files(dir: string, ext = /\.(ts|mjs)$/): string[] {
  const out: string[] = [];
  for (const name of readdirSync(join(ROOT, dir))) {
    if (name === 'node_modules' || name === 'dist') continue;
    const p = join(dir, name);
    if (statSync(join(ROOT, p)).isDirectory()) out.push(...files(p, ext));
    else if (ext.test(name)) out.push(p);
  }
  return out;
}

const importsOf = (file: string) =>
  [...readFileSync(join(ROOT, file), 'utf8').matchAll(/(?:from|import)\s*\(?\s*['"]([^'"]+)['"]/g)].map((m) => m[1]);

describe('architecture', () => {
  it('the kernel (core/) imports no plugin, no composition root, no service and nothing opencode-specific', () => {
    const outward = /^(\.\.\/)+(detectors|modes|channels|opencode|sensors|service|cli|builtins|index)(\/|\.ts$)/;
    const bad: string[] = [];
    for (const f of files('core')) {
      if (f.endsWith('.test.ts')) continue;
      for (const spec of importsOf(f)) if (outward.test(spec)) bad.push(`${f} imports ${spec}`);
    }
    expect(bad).toEqual([]);
  });

  it('no code or comment points outside the repository', () => {
    const outside = /shared\/(seeds|reference|lab|DESIGN|STYLE)|\b[Ss]eed 0\d\d|\/work\/(main|shared)/;
    const bad: string[] = [];
    for (const dir of [
      'core',
      'detectors',
      'channels',
      'modes',
      'opencode',
      'sensors',
      'service',
      'cli',
      'bench',
      'bin',
      'test',
      'config',
    ]) {
      for (const f of files(dir, /\.(ts|mjs|yaml|js)$/)) {
        readFileSync(join(ROOT, f), 'utf8')
          .split('\n')
          .forEach((line, i) => {
            if (outside.test(line)) bad.push(`${f}:${i + 1}`);
          });
      }
    }
    expect(bad).toEqual([]);
  });

  it('every suite with Redis cases is in the redis tier (vitest.config.ts REDIS)', () => {
    const e2e = (f: string) => /\.e2e\.test\.ts$|\.browser\.test\.ts$/.test(f);
    const redisCases = /backends\(\)|withRedis|backend: 'redis'|new RedisStore/;
    const missing: string[] = [];
    for (const dir of ['core', 'detectors', 'channels', 'modes', 'opencode', 'service', 'cli', 'test']) {
      for (const f of files(dir, /\.test\.ts$/)) {
        if (e2e(f) || relative(ROOT, join(ROOT, f)) === 'test/architecture.test.ts') continue;
        if (redisCases.test(readFileSync(join(ROOT, f), 'utf8')) && !REDIS.includes(f)) missing.push(f);
      }
    }
    expect(missing).toEqual([]);
    expect(E2E.length).toBeGreaterThan(0);
  });
});
