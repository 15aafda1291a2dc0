import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, normalize, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';

// The dependency rules (docs/architecture.md "Dependency rules"). A plugin is replaceable
// only if no other plugin reaches into it, and the kernel only if it knows none of them:
// - core/ imports nothing outside core/: not the package by its own name, not
//   ../index or ../builtins, no plugin;
// - a plugin imports only core/, its own files and its kind's shared code (a file
//   directly in detectors/ or modes/, channels/shared/, sensors/shared/): so no detector
//   imports a sensor, no sensor a detector, no plugin another plugin;
// - the plugins: detectors/<name>, modes/<name>, channels/<name>, sensors/<name> (the
//   opencode sensor among them), each in the folder of its kind, with no exception;
// - watchdog/ is a runner, not a plugin: like cli/ it composes sensors' readers, the
//   judge and a channel, and may import them (but no plugin imports it).
// Test files are not checked: a test may drive any code it likes.

const ROOT = resolve(import.meta.dirname, '..');
const KINDS = ['detectors', 'modes', 'channels', 'sensors'];
const SHARED = new Set(['channels/shared', 'sensors/shared']);

type Edge = { from: string; spec: string; to?: string };

/** Where a repo path sits: a plugin, a kind's shared code, the kernel, or the rest (runners, entry points). */
function placeOf(path: string): { layer: 'core' | 'plugin' | 'shared' | 'other'; kind?: string; plugin?: string } {
  const [top, name, ...rest] = path.split('/');
  if (top === 'core') return { layer: 'core' };
  if (!KINDS.includes(top) || name === undefined) return { layer: 'other' };
  if (rest.length === 0 || SHARED.has(`${top}/${name}`)) return { layer: 'shared', kind: top };
  return { layer: 'plugin', kind: top, plugin: `${top}/${name}` };
}

/** The rule an import breaks, or undefined. `pkg`: the package's own name. */
function broken(e: Edge, pkg: string): string | undefined {
  const from = placeOf(e.from);
  const self = e.spec === pkg || e.spec.startsWith(`${pkg}/`);
  if (from.layer === 'core') {
    if (self) return 'core imports the package by its own name';
    if (e.to === undefined) return undefined;
    if (/^(index|builtins)(\.(ts|js|mjs))?$/.test(e.to)) return 'core imports ../index or ../builtins';
    return placeOf(e.to).layer === 'core' ? undefined : 'core imports outside core';
  }
  if (from.layer !== 'plugin' && from.layer !== 'shared') return undefined;
  if (self) return `a ${from.layer === 'plugin' ? 'plugin' : 'kind'} imports the package by its own name`;
  if (e.to === undefined) return undefined;
  const to = placeOf(e.to);
  if (to.layer === 'core') return undefined;
  if (from.kind === 'detectors' && /^(sensors|watchdog)\//.test(e.to)) return 'a detector imports a sensor';
  if (from.kind === 'sensors' && to.kind === 'detectors') return 'a sensor imports a detector';
  if (to.layer === 'plugin' && to.plugin !== from.plugin) return 'a plugin imports another plugin';
  if (to.layer === 'shared' && to.kind === from.kind) return undefined;
  if (to.layer === 'plugin') return undefined; // its own files
  return 'a plugin imports outside core/ and its kind';
}

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

const specifiers = (src: string) => [...src.matchAll(/(?:from|import)\s*\(?\s*['"]([^'"]+)['"]/g)].map((m) => m[1]);

/** Every import of the given file texts, relative ones resolved to repo paths. */
function edgesOf(sources: Record<string, string>): Edge[] {
  const out: Edge[] = [];
  for (const [f, src] of Object.entries(sources))
    for (const spec of specifiers(src))
      out.push({ from: f, spec, ...(spec.startsWith('.') ? { to: normalize(join(dirname(f), spec)) } : {}) });
  return out;
}

const violations = (edges: Edge[], pkg: string) =>
  edges.flatMap((e) => {
    const rule = broken(e, pkg);
    return rule ? [`${e.from} imports ${e.spec}: ${rule}`] : [];
  });

const PKG = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')).name as string;

describe('dependency rules', () => {
  it('the repository keeps them', () => {
    const sources: Record<string, string> = {};
    for (const dir of ['core', ...KINDS]) {
      for (const f of files(dir)) sources[f] = readFileSync(join(ROOT, f), 'utf8');
    }
    const edges = edgesOf(sources);
    // the scan sees the code: each layer's imports are there to judge
    expect(edges.filter((e) => e.from.startsWith('detectors/') && e.to?.startsWith('core/')).length).toBeGreaterThan(0);
    expect(
      edges.filter((e) => e.from.startsWith('sensors/') && e.to?.startsWith('sensors/shared/')).length,
    ).toBeGreaterThan(0);
    expect(violations(edges, PKG)).toEqual([]);
  });

  it('places paths in their layers', () => {
    expect(placeOf('core/replay.ts')).toEqual({ layer: 'core' });
    expect(placeOf('detectors/no-progress/replay/inputs.ts')).toMatchObject({ plugin: 'detectors/no-progress' });
    expect(placeOf('sensors/opencode/replay.ts')).toMatchObject({
      layer: 'plugin',
      kind: 'sensors',
      plugin: 'sensors/opencode',
    });
    expect(placeOf('sensors/opencode/plugin/src/core.ts')).toMatchObject({ plugin: 'sensors/opencode' });
    expect(placeOf('watchdog/tick.ts')).toEqual({ layer: 'other' });
    expect(placeOf('sensors/shared/landed.ts')).toEqual({ layer: 'shared', kind: 'sensors' });
    expect(placeOf('channels/shared/http.ts')).toEqual({ layer: 'shared', kind: 'channels' });
    expect(placeOf('modes/common.ts')).toEqual({ layer: 'shared', kind: 'modes' });
    expect(placeOf('cli/replay.ts')).toEqual({ layer: 'other' });
    expect(placeOf('builtins.ts')).toEqual({ layer: 'other' });
  });

  // Each rule fails on a small graph that breaks it, and passes on its allowed neighbour.
  const graph = (from: string, spec: string) => edgesOf({ [from]: `import { x } from '${spec}';\n` });
  const rule = (from: string, spec: string) => violations(graph(from, spec), 'vigil');
  const cases: [string, string, string | null][] = [
    // a detector importing a sensor (sensors/**), or the watchdog
    ['detectors/no-progress/replay/inputs.ts', '../../../sensors/opencode/convert.ts', 'a detector imports a sensor'],
    ['detectors/no-progress/replay/inputs.ts', '../../../sensors/codex/replay.ts', 'a detector imports a sensor'],
    ['detectors/no-progress/fixtures/inputs.ts', '../../../sensors/shared/normalize.ts', 'a detector imports a sensor'],
    ['detectors/money/ledger.ts', '../../sensors/shared/normalize.ts', 'a detector imports a sensor'],
    ['detectors/report.ts', '../watchdog/tick.ts', 'a detector imports a sensor'],
    ['detectors/no-progress/replay/inputs.ts', '../../../core/replay.ts', null],
    // a sensor importing a detector
    [
      'sensors/claude-code/transcripts.ts',
      '../../detectors/no-progress/replay/inputs.ts',
      'a sensor imports a detector',
    ],
    ['sensors/opencode/replay.ts', '../../detectors/no-progress/judge.ts', 'a sensor imports a detector'],
    ['sensors/shared/landed.ts', '../../detectors/no-progress/knobs.ts', 'a sensor imports a detector'],
    ['sensors/claude-code/transcripts.ts', '../../core/replay.ts', null],
    ['sensors/codex/replay.ts', '../shared/landed.ts', null],
    ['sensors/opencode/convert.ts', '../shared/landed.ts', null],
    // a plugin importing another plugin (any kind)
    ['sensors/codex/bridge.ts', '../claude-code/client.ts', 'a plugin imports another plugin'],
    ['sensors/claude-code/map.ts', '../opencode/convert.ts', 'a plugin imports another plugin'],
    ['sensors/opencode/convert.ts', '../gemini/map.ts', 'a plugin imports another plugin'],
    ['modes/warn/index.ts', '../auto-recover/index.ts', 'a plugin imports another plugin'],
    ['modes/warn/index.ts', '../../channels/desktop/index.ts', 'a plugin imports another plugin'],
    ['detectors/money/ledger.ts', '../no-progress/judge.ts', 'a plugin imports another plugin'],
    ['channels/webhook/webhook.channel.ts', '../twilio/twilio.sms.ts', 'a plugin imports another plugin'],
    ['channels/shared/http.ts', '../webhook/webhook.formats.ts', 'a plugin imports another plugin'],
    ['modes/warn/index.ts', '../common.ts', null],
    ['channels/webhook/webhook.channel.ts', '../shared/http.ts', null],
    ['detectors/no-progress/replay/replay.ts', '../judge.ts', null],
    ['sensors/opencode/plugin/src/core.ts', '../../convert.ts', null],
    // nor anything above the plugins, nor another kind's shared code
    ['modes/warn/index.ts', '../../builtins.ts', 'a plugin imports outside core/ and its kind'],
    ['channels/desktop/index.ts', '../../cli/main.ts', 'a plugin imports outside core/ and its kind'],
    ['sensors/opencode/replay.ts', '../../watchdog/collect.ts', 'a plugin imports outside core/ and its kind'],
    ['modes/warn/index.ts', '../../channels/shared/http.ts', 'a plugin imports outside core/ and its kind'],
    ['detectors/no-progress/index.ts', 'vigil', 'a plugin imports the package by its own name'],
    // the kernel
    ['core/engine.ts', 'vigil', 'core imports the package by its own name'],
    ['core/registry.ts', 'vigil/testing', 'core imports the package by its own name'],
    ['core/vigil.ts', '../index', 'core imports ../index or ../builtins'],
    ['core/vigil.ts', '../index.ts', 'core imports ../index or ../builtins'],
    ['core/plugins.ts', '../builtins.ts', 'core imports ../index or ../builtins'],
    ['core/notifier/notifier.ts', '../../builtins', 'core imports ../index or ../builtins'],
    ['core/wire.ts', '../detectors/no-progress/judge.ts', 'core imports outside core'],
    ['core/wire.ts', '../sensors/shared/normalize.ts', 'core imports outside core'],
    ['core/notifier/notifier.ts', '../store/store.ts', null],
    ['core/wire.ts', 'zod', null],
    // runners and entry points compose everything
    ['watchdog/collect.ts', '../detectors/no-progress/judge.ts', null],
    ['watchdog/transcripts.ts', '../sensors/codex/replay.ts', null],
    ['cli/replay.ts', '../builtins.ts', null],
    ['builtins.ts', './sensors/opencode/replay.ts', null],
  ];

  it.each(cases)('%s importing %s: %s', (from, spec, expected) => {
    expect(rule(from, spec)).toEqual(expected === null ? [] : [`${from} imports ${spec}: ${expected}`]);
  });

  it('reads every import form (static, type-only, re-export, dynamic) and ignores none of them', () => {
    const src = [
      "import type { A } from '../detectors/a/x.ts';",
      "export * from '../detectors/b/y.ts';",
      "const m = await import('../detectors/c/z.ts');",
      "import '../detectors/d/side.ts';",
    ].join('\n');
    expect(violations(edgesOf({ 'sensors/codex/replay.ts': src }), 'vigil')).toHaveLength(4);
  });
});
