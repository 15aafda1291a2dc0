#!/usr/bin/env node
// Bundles the Claude Code hook bridge into one self-contained ESM file (no imports but
// node: built-ins), so each hook call starts one plain `node` process and nothing else.
//
//   node sensors/claude-code/hook/build.mjs [--out FILE]
//
// The version is `<package.json version>+<first 8 hex of the bundle's sha256>`, sent in
// x-vigil-plugin, so a stale install shows in GET /health.
import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, realpathSync, writeFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build as esbuild } from 'esbuild';

const HERE = dirname(fileURLToPath(import.meta.url));
const ROOT = join(HERE, '..', '..', '..');
export const DIST = join(HERE, 'dist', 'vigil-claude-code-hook.mjs');
const PLACEHOLDER = '@@VIGIL_BUILD_HASH@@';
export const BANNER_PREFIX = '// vigil-claude-code ';

/** Builds the hook bundle; returns its path and version. */
export async function buildHook({ out = DIST } = {}) {
  const base = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')).version;
  const r = await esbuild({
    entryPoints: [join(HERE, 'main.ts')],
    absWorkingDir: ROOT,
    bundle: true,
    format: 'esm',
    platform: 'node',
    target: 'node20',
    minify: true,
    write: false,
    metafile: true,
    legalComments: 'none',
    charset: 'ascii',
    define: { __VIGIL_HOOK_VERSION__: JSON.stringify(`${base}+${PLACEHOLDER}`) },
    // zod re-exports every locale as a namespace (not tree-shaken); the hook's messages
    // are never shown to anyone, so the namespace is an empty module here.
    plugins: [
      {
        name: 'no-zod-locales',
        setup(b) {
          b.onResolve({ filter: /\/locales\/index\.js$/ }, (a) =>
            a.importer.includes(`${'node_modules'}/zod/`) ? { path: 'zod-locales', namespace: 'stub' } : undefined,
          );
          b.onLoad({ filter: /.*/, namespace: 'stub' }, () => ({ contents: 'export {};', loader: 'js' }));
        },
      },
    ],
    logLevel: 'silent',
  });
  const bare = Object.values(r.metafile.outputs)
    .flatMap((o) => o.imports)
    .filter((i) => i.external && !i.path.startsWith('node:'));
  if (bare.length) throw new Error(`bundle is not self-contained: imports ${bare.map((i) => i.path).join(', ')}`);
  const text = r.outputFiles[0].text;
  const hash = createHash('sha256').update(text).digest('hex').slice(0, 8);
  const version = `${base}+${hash}`;
  const banner = `${BANNER_PREFIX}${version}: the Vigil Claude Code hook, bundled by sensors/claude-code/hook/build.mjs. Do not edit.\n`;
  mkdirSync(dirname(out), { recursive: true });
  writeFileSync(out, banner + text.replaceAll(PLACEHOLDER, hash));
  return { path: out, version };
}

if (process.argv[1] && realpathSync(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const i = process.argv.indexOf('--out');
  const { path, version } = await buildHook(i > 0 && process.argv[i + 1] ? { out: process.argv[i + 1] } : {});
  console.log(`built ${relative(process.cwd(), path) || path} (vigil-claude-code/${version})`);
}
