import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, normalize, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';

// The dependency rule between plugins: a detector, mode or channel is replaceable only
// if no other plugin reaches into it. Code shared by the plugins of one kind lives at
// the kind's level (a file directly in modes/, or channels/shared/), never in a sibling.

const ROOT = resolve(import.meta.dirname, '..');
const KINDS = ['detectors', 'modes', 'channels'];

function files(dir: string): string[] {
  const out: string[] = [];
  for (const name of readdirSync(join(ROOT, dir))) {
    if (name === 'node_modules' || name === 'dist') continue;
    const p = join(dir, name);
    if (statSync(join(ROOT, p)).isDirectory()) out.push(...files(p));
    else if (/\.(ts|mjs)$/.test(name) && !/\.test\.ts$/.test(name)) out.push(p);
  }
  return out;
}

const specifiers = (file: string) =>
  [...readFileSync(join(ROOT, file), 'utf8').matchAll(/(?:from|import)\s*\(?\s*['"]([^'"]+)['"]/g)].map((m) => m[1]);

/** The plugin a repo path belongs to (`modes/warn`), or undefined for kind-level code. */
function pluginOf(path: string): string | undefined {
  const [kind, name, ...rest] = path.split('/');
  if (!KINDS.includes(kind) || rest.length === 0 || name === 'shared') return undefined;
  return `${kind}/${name}`;
}

/** Every relative import of `dir`'s code as [file, spec, repo path it resolves to]. */
function edges(dir: string): [string, string, string][] {
  const out: [string, string, string][] = [];
  for (const f of files(dir))
    for (const spec of specifiers(f)) if (spec.startsWith('.')) out.push([f, spec, normalize(join(dirname(f), spec))]);
  return out;
}

describe('dependency rules', () => {
  it('no plugin imports another plugin (detectors, modes, channels)', () => {
    const bad: string[] = [];
    for (const kind of KINDS)
      for (const [f, spec, target] of edges(kind)) {
        const from = pluginOf(f);
        const to = pluginOf(target);
        if (from && to && from !== to) bad.push(`${f} imports ${spec}`);
      }
    expect(bad).toEqual([]);
  });

  it('the kernel never imports the package by its own name', () => {
    const name = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')).name as string;
    const bad: string[] = [];
    for (const f of files('core'))
      for (const spec of specifiers(f))
        if (spec === name || spec.startsWith(`${name}/`)) bad.push(`${f} imports ${spec}`);
    expect(bad).toEqual([]);
  });

  it('sees a violation when there is one (the check reads real imports)', () => {
    // Guards the two checks above against passing vacuously: the modes do import the
    // kind-level helpers, which resolve outside any plugin.
    const shared = edges('modes').filter(([f, , t]) => pluginOf(f) && !pluginOf(t) && t.startsWith('modes/'));
    expect(shared.length).toBeGreaterThan(0);
    expect(pluginOf('modes/auto-recover/index.ts')).toBe('modes/auto-recover');
    expect(pluginOf('channels/shared/http.ts')).toBeUndefined();
  });
});
