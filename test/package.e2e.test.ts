import { execFileSync, spawnSync } from 'node:child_process';
import { copyFileSync, readdirSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { freePort, startProc, stopProc, until } from './fixtures/opencode-e2e/procs.ts';
import { tempDir } from './helpers/index.ts';

// Vigil as an embedder meets it: `npm pack` (which builds dist/ with tsc), then
// `npm install <tarball>` into a fresh project outside the repository, then plain
// JavaScript on Node 20 with no TypeScript loader: a fastify router registers
// `vigilGate` from 'vigil/router' and refuses a looping conversation while its sibling
// passes. The watchdog's optional dependencies are left out, as a router would.

const ROOT = resolve(import.meta.dirname, '..');
const npm = (args: string[], cwd: string) =>
  execFileSync('npm', args, { cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], timeout: 180_000 });

describe('the npm package', () => {
  let app = '';

  beforeAll(() => {
    const packs = tempDir('vigil-pack');
    npm(['pack', '--silent', '--pack-destination', packs], ROOT);
    const tarball = join(packs, readdirSync(packs).find((f) => f.endsWith('.tgz'))!);
    app = tempDir('vigil-embed');
    writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'embed', private: true, type: 'module' }));
    const fastify = JSON.parse(npm(['pkg', 'get', 'dependencies.fastify'], ROOT));
    npm(
      [
        'install',
        tarball,
        `fastify@${fastify}`,
        '--omit=optional',
        '--ignore-scripts',
        '--no-audit',
        '--no-fund',
        '--prefer-offline',
      ],
      app,
    );
    copyFileSync(join(ROOT, 'test/fixtures/embed/router.mjs'), join(app, 'router.mjs'));
  }, 300_000);

  it('a plain .mjs fastify router embeds vigil/router: the looping conversation gets 429, its sibling passes', () => {
    const r = spawnSync(process.execPath, ['router.mjs'], { cwd: app, encoding: 'utf8', timeout: 60_000 });
    expect(r.stderr).toBe('');
    const out = JSON.parse(r.stdout);
    expect(out.verdict).toBe('looping');
    expect(out.looping).toMatchObject({ status: 429, retry_after: '30', body: { error: { code: 'vigil_refused' } } });
    expect(out.sibling).toEqual({ status: 200 });
  }, 60_000);

  it('ships JavaScript and type declarations only, and the CLI runs from the build', () => {
    const pkg = join(app, 'node_modules/vigil');
    expect(readdirSync(pkg).sort()).toEqual(['README.md', 'bin', 'config', 'dist', 'package.json']);
    const r = spawnSync(process.execPath, [join(pkg, 'bin/vigil.mjs'), 'config', 'check'], {
      cwd: app,
      encoding: 'utf8',
      timeout: 60_000,
    });
    expect(r.status).toBe(0);
    expect(r.stdout).toContain('config ok');
    const kit = spawnSync(
      process.execPath,
      ['-e', "import('vigil/testing').then((m) => console.log(typeof m.channelContract, typeof m.ChannelKit))"],
      { cwd: app, encoding: 'utf8' },
    );
    expect(kit.stdout.trim()).toBe('function function');
  }, 60_000);

  it('vigil serve from the package serves the built admin page', async () => {
    const port = await freePort();
    const p = startProc(
      'packaged-serve',
      process.execPath,
      [join(app, 'node_modules/vigil/bin/vigil.mjs'), 'serve', '--port', String(port)],
      {
        cwd: app,
        env: { PATH: process.env.PATH, VIGIL_LOG_LEVEL: 'warn' },
        logDir: tempDir('vigil-packaged-log'),
      },
    );
    try {
      const page = await until(
        'the admin page',
        async () => {
          const r = await fetch(`http://127.0.0.1:${port}/`);
          return r.ok ? r.text() : undefined;
        },
        { detail: () => p.output() },
      );
      expect(page).toContain('<div id="app">');
      const js = await fetch(`http://127.0.0.1:${port}/admin/assets/app.js`);
      expect(js.status).toBe(200);
    } finally {
      await stopProc(p);
    }
  }, 60_000);
});
