#!/usr/bin/env node
// Bundles the opencode plugin into one self-contained ESM file, dist/vigil.js:
// src/plugin.ts plus the shared converter from sensors/opencode/convert.ts, no imports left but
// node: built-ins (opencode loads the file as is; it installs nothing for it).
//
//   node sensors/opencode/plugin/build.mjs [--out FILE]   (npm run plugin:build)
//
// The version is `<package.json version>+<first 8 hex of the bundle's sha256>`, so two
// different builds never report the same X-Vigil-Plugin value and a stale install shows
// in GET /health on the service.
import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, realpathSync, writeFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build as esbuild } from 'esbuild';

const HERE = dirname(fileURLToPath(import.meta.url));
const ROOT = join(HERE, '..', '..', '..');
export const DIST = join(HERE, 'dist', 'vigil.js');
const PLACEHOLDER = '@@VIGIL_BUILD_HASH@@';

/** Builds dist/vigil.js; returns its path and version. */
export async function buildPlugin({ out = DIST } = {}) {
  const base = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')).version;
  const r = await esbuild({
    entryPoints: [join(HERE, 'src', 'plugin.ts')],
    absWorkingDir: ROOT, // the path comments in the bundle, hence its hash, do not depend on the caller's cwd
    bundle: true,
    format: 'esm',
    platform: 'node',
    target: 'es2022',
    write: false,
    metafile: true,
    legalComments: 'none',
    charset: 'ascii',
    define: { __VIGIL_PLUGIN_VERSION__: JSON.stringify(`${base}+${PLACEHOLDER}`) },
    logLevel: 'silent',
  });
  const bare = Object.values(r.metafile.outputs)
    .flatMap((o) => o.imports)
    .filter((i) => i.external && !i.path.startsWith('node:'));
  if (bare.length) throw new Error(`bundle is not self-contained: imports ${bare.map((i) => i.path).join(', ')}`);
  const text = r.outputFiles[0].text;
  const hash = createHash('sha256').update(text).digest('hex').slice(0, 8);
  const version = `${base}+${hash}`;
  const banner = `// vigil-opencode ${version}: the Vigil opencode plugin, bundled by sensors/opencode/plugin/build.mjs. Do not edit.\n`;
  mkdirSync(dirname(out), { recursive: true });
  writeFileSync(out, banner + text.replaceAll(PLACEHOLDER, hash));
  return { path: out, version };
}

if (process.argv[1] && realpathSync(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const i = process.argv.indexOf('--out');
  const { path, version } = await buildPlugin(i > 0 && process.argv[i + 1] ? { out: process.argv[i + 1] } : {});
  console.log(`built ${relative(process.cwd(), path) || path} (vigil-opencode/${version})`);
}
