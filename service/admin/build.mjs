#!/usr/bin/env node
// Bundles the admin page (service/admin/ui) with esbuild into service/admin/dist:
// app.js, app.css, index.html, each also gzipped, and manifest.json naming the hash of
// the sources it was built from. The service builds on first request when dist is
// missing or stale (service/admin/assets.ts), so a fresh clone needs no extra step.
//
//   node service/admin/build.mjs [--out DIR]     prints each file's size, raw and gzipped
import { createHash } from 'node:crypto';
import { mkdirSync, readdirSync, readFileSync, realpathSync, renameSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';
import { build as esbuild } from 'esbuild';

const HERE = dirname(fileURLToPath(import.meta.url));
const ROOT = join(HERE, '..', '..');
export const UI = join(HERE, 'ui');
export const DIST = join(HERE, 'dist');
const BUNDLED = ['preact', 'htm', 'uplot', 'esbuild'];

/** Hash of everything the bundle is made from: the ui sources, this script, the bundled packages' versions. */
export function sourceHash() {
  const h = createHash('sha256');
  const walk = (dir) => {
    for (const e of readdirSync(dir, { withFileTypes: true }).sort((a, b) => a.name.localeCompare(b.name))) {
      const p = join(dir, e.name);
      if (e.isDirectory()) walk(p);
      else h.update(`${p.slice(UI.length)}\0`).update(readFileSync(p));
    }
  };
  walk(UI);
  h.update(readFileSync(fileURLToPath(import.meta.url)));
  for (const name of BUNDLED) {
    const pkg = JSON.parse(readFileSync(join(ROOT, 'node_modules', name, 'package.json'), 'utf8'));
    h.update(`${name}@${pkg.version}`);
  }
  return h.digest('hex').slice(0, 16);
}

const TYPES = {
  'app.js': 'text/javascript; charset=utf-8',
  'app.css': 'text/css; charset=utf-8',
  'index.html': 'text/html; charset=utf-8',
};

/**
 * Builds the page in memory; writes dist/ unless `write` is false. Returns
 * {source, files: {name: {body, gz, type}}}.
 */
export async function buildAdmin({ write = true, outdir = DIST } = {}) {
  const source = sourceHash();
  const r = await esbuild({
    entryPoints: { app: join(UI, 'main.ts'), style: join(UI, 'style.css') },
    absWorkingDir: ROOT,
    bundle: true,
    minify: true,
    format: 'iife',
    target: 'es2020',
    platform: 'browser',
    charset: 'ascii',
    legalComments: 'none',
    outdir: join(outdir, '.out'),
    write: false,
    logLevel: 'silent',
  });
  const pick = (ext) => r.outputFiles.find((f) => f.path.endsWith(ext)).contents;
  const js = Buffer.from(pick('.js'));
  const css = Buffer.from(pick('.css'));
  const v = createHash('sha256').update(js).update(css).digest('hex').slice(0, 10);
  const html = Buffer.from(
    '<!doctype html><html lang="en"><head><meta charset="utf-8">' +
      '<meta name="viewport" content="width=device-width,initial-scale=1"><title>Vigil admin</title>' +
      `<link rel="icon" href="data:,"><link rel="stylesheet" href="/admin/assets/app.css?v=${v}">` +
      `</head><body><div id="app"></div><script src="/admin/assets/app.js?v=${v}" defer></script></body></html>\n`,
  );
  const files = {};
  for (const [name, body] of [
    ['app.js', js],
    ['app.css', css],
    ['index.html', html],
  ]) {
    files[name] = { body, gz: gzipSync(body, { level: 9 }), type: TYPES[name] };
  }
  if (write) {
    mkdirSync(outdir, { recursive: true });
    // Each file lands by rename, the manifest last: a concurrent reader sees an old or a whole new build.
    const put = (name, data) => {
      const tmp = join(outdir, `.${name}.${process.pid}.tmp`);
      writeFileSync(tmp, data);
      renameSync(tmp, join(outdir, name));
    };
    for (const [name, f] of Object.entries(files)) {
      put(name, f.body);
      put(`${name}.gz`, f.gz);
    }
    put('manifest.json', `${JSON.stringify({ source, version: v, files: Object.keys(files) })}\n`);
  }
  return { source, version: v, files };
}

if (process.argv[1] && realpathSync(process.argv[1]) === fileURLToPath(import.meta.url)) {
  // --out DIR: where to write (the package build puts the page beside the compiled service).
  const at = process.argv.indexOf('--out');
  const outdir = at > 0 && process.argv[at + 1] ? process.argv[at + 1] : DIST;
  const { files, version } = await buildAdmin({ outdir });
  for (const [name, f] of Object.entries(files)) {
    console.log(`${name.padEnd(11)} ${String(f.body.length).padStart(7)} B  gzip ${String(f.gz.length).padStart(6)} B`);
  }
  console.log(`built ${outdir} (version ${version})`);
}
