import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Built } from './build.mjs';

const HERE = dirname(fileURLToPath(import.meta.url));
const DIST = join(HERE, 'dist');
/** An installed package ships the built page and not its sources: serve it as built. */
const PACKAGED = !existsSync(join(HERE, 'ui'));

const NAMES = ['app.js', 'app.css', 'index.html'] as const;
export type AssetName = (typeof NAMES)[number];
const TYPES: Record<AssetName, string> = {
  'app.js': 'text/javascript; charset=utf-8',
  'app.css': 'text/css; charset=utf-8',
  'index.html': 'text/html; charset=utf-8',
};

/** The built page from dist/ when it matches the sources (any build when packaged), else null. */
function readDist(source: string | undefined): Built | null {
  try {
    const m = JSON.parse(readFileSync(join(DIST, 'manifest.json'), 'utf8'));
    if (
      (source !== undefined && m.source !== source) ||
      !NAMES.every((n) => existsSync(join(DIST, n)) && existsSync(join(DIST, `${n}.gz`)))
    ) {
      return null;
    }
    const files: Built['files'] = {};
    for (const n of NAMES) {
      files[n] = { body: readFileSync(join(DIST, n)), gz: readFileSync(join(DIST, `${n}.gz`)), type: TYPES[n] };
    }
    return { source: m.source, version: m.version, files };
  } catch {
    return null;
  }
}

let pending: Promise<Built> | undefined;

/** The page, built once per process when dist/ is missing or stale, then served from memory. */
export function ensureBuilt(): Promise<Built> {
  pending ??= (async () => {
    if (PACKAGED) {
      const built = readDist(undefined);
      if (!built) throw new Error('the admin page is not built (package without service/admin/dist)');
      return built;
    }
    // From the sources: rebuild when they changed (esbuild is only needed here).
    const { buildAdmin, sourceHash } = await import('./build.mjs');
    return readDist(sourceHash()) ?? (await buildAdmin());
  })();
  // A failed build is retried by the next request rather than cached.
  pending.catch(() => {
    pending = undefined;
  });
  return pending;
}

const CSP = [
  "default-src 'none'",
  "script-src 'self'",
  // uPlot and preact set element styles from script.
  "style-src 'self' 'unsafe-inline'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join('; ');

export async function sendAsset(req: FastifyRequest, reply: FastifyReply, name: AssetName): Promise<FastifyReply> {
  const f = (await ensureBuilt()).files[name];
  const gzip = /\bgzip\b/.test(String(req.headers['accept-encoding'] ?? ''));
  reply
    .type(f.type)
    .header('vary', 'accept-encoding')
    .header('x-content-type-options', 'nosniff')
    .header('referrer-policy', 'no-referrer')
    // index.html names the assets by content hash, so only it must be revalidated.
    .header('cache-control', name === 'index.html' ? 'no-cache' : 'public, max-age=31536000, immutable');
  if (name === 'index.html') reply.header('content-security-policy', CSP);
  if (gzip) reply.header('content-encoding', 'gzip');
  return reply.send(gzip ? f.gz : f.body);
}
