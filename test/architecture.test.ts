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

/**
 * The code of a TypeScript source without its comments (strings kept: a string is code).
 * A scanner, not a parser: enough for this repository's sources (a `//` inside a regex
 * literal would be read as a comment; none in core/ has one).
 */
function codeOnly(src: string): string {
  let out = '';
  let i = 0;
  while (i < src.length) {
    const c = src[i];
    const n = src[i + 1];
    if (c === '/' && n === '/') {
      while (i < src.length && src[i] !== '\n') i++;
    } else if (c === '/' && n === '*') {
      const end = src.indexOf('*/', i + 2);
      const stop = end < 0 ? src.length : end + 2;
      out += src.slice(i, stop).replace(/[^\n]/g, ' ');
      i = stop;
    } else if (c === "'" || c === '"' || c === '`') {
      let j = i + 1;
      while (j < src.length && src[j] !== c) j += src[j] === '\\' ? 2 : 1;
      out += src.slice(i, j + 1);
      i = j + 1;
    } else {
      out += c;
      i++;
    }
  }
  return out;
}

const AGENT_NAMES = /opencode|claude|codex|gemini/i;

/** Lines of code (comments removed) in `src` that name an agent. */
function agentNames(src: string): number[] {
  return codeOnly(src)
    .split('\n')
    .flatMap((l, i) => (AGENT_NAMES.test(l) ? [i + 1] : []));
}

describe('architecture', () => {
  it('the kernel (core/) names no agent outside comments: each sensor owns its shapes', () => {
    // the check itself: a name in code is found, one in a comment is not
    expect(agentNames("const a = 'x'; // opencode\n/* claude */ const b = 'gemini-cli';\nconst c = `codex`;")).toEqual([
      2, 3,
    ]);
    const bad: string[] = [];
    for (const f of files('core')) {
      if (f.endsWith('.test.ts')) continue;
      for (const line of agentNames(readFileSync(join(ROOT, f), 'utf8'))) bad.push(`${f}:${line}`);
    }
    expect(bad).toEqual([]);
  });

  it('the kernel (core/) imports no plugin, no composition root, no service and nothing opencode-specific', () => {
    const outward = /^(\.\.\/)+(detectors|modes|channels|sensors|watchdog|service|cli|builtins|index)(\/|\.ts$)/;
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
      'sensors',
      'watchdog',
      'service',
      'cli',
      'bench',
      'bin',
      'test',
      'config',
      'docs',
      'README.md',
    ]) {
      for (const f of dir === 'README.md' ? [dir] : files(dir, /\.(ts|mjs|yaml|js|md|json)$/)) {
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
    for (const dir of ['core', 'detectors', 'channels', 'modes', 'sensors', 'watchdog', 'service', 'cli', 'test']) {
      for (const f of files(dir, /\.test\.ts$/)) {
        if (e2e(f) || relative(ROOT, join(ROOT, f)) === 'test/architecture.test.ts') continue;
        if (redisCases.test(readFileSync(join(ROOT, f), 'utf8')) && !REDIS.includes(f)) missing.push(f);
      }
    }
    expect(missing).toEqual([]);
    expect(E2E.length).toBeGreaterThan(0);
  });
});
