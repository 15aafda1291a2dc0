import { execFileSync, spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { freePort, http, startProc, stopProc, until } from './fixtures/opencode-e2e/procs.ts';
import { tempDir } from './helpers/index.ts';
import { needsOpencode, startOpencode } from './helpers/opencode.ts';

const HAVE_OPENCODE = needsOpencode(import.meta.filename);

// Vigil as an embedder meets it: `npm pack` (which builds dist/ with tsc), then
// `npm install <tarball>` into a fresh project outside the repository, then plain
// JavaScript on Node 20 with no TypeScript loader: a fastify router registers
// `vigilGate` from 'vigil/router' and refuses a looping conversation while its sibling
// passes. The watchdog's optional dependencies are left out, as a router would. Then
// `npx vigil install opencode` from that project puts the shipped plugin where the real
// opencode 1.18.33 loads it, and the plugin reports to the packaged `vigil serve`.

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
    const router = spawnSync(
      process.execPath,
      [
        '-e',
        "import('vigil/router').then((m) => console.log(typeof m.vigilGate, typeof m.vigilIngest, typeof m.capBody))",
      ],
      { cwd: app, encoding: 'utf8' },
    );
    expect(router.stdout.trim()).toBe('function function function');
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

  it.runIf(HAVE_OPENCODE)(
    'npx vigil install opencode: the shipped plugin loads in the real opencode and reports to vigil serve',
    async () => {
      const cli = join(app, 'node_modules/vigil/bin/vigil.mjs');
      const shipped = join(app, 'node_modules/vigil/dist/sensors/opencode/plugin/vigil.js');
      expect(existsSync(shipped)).toBe(true);
      const version = /^\/\/ vigil-opencode (\S+):/.exec(readFileSync(shipped, 'utf8'))?.[1];
      expect(version).toMatch(/^\d+\.\d+\.\d+\+[0-9a-f]{8}$/);
      const port = await freePort();
      const logs = tempDir('vigil-packaged-oc-log');
      const serve = startProc('packaged-serve-oc', process.execPath, [cli, 'serve', '--port', String(port)], {
        cwd: app,
        env: { PATH: process.env.PATH, VIGIL_LOG_LEVEL: 'warn' },
        logDir: logs,
      });
      const vigilUrl = `http://127.0.0.1:${port}`;
      let installed = '';
      const lab = await startOpencode({
        script: {
          steps: [{ tool: 'read', args: { filePath: '{{workdir}}/src/app.js' } }, { text: 'Read it.' }],
        },
        files: { 'src/app.js': 'export const x = 1;\n' },
        beforeStart(dirs) {
          const env = {
            PATH: process.env.PATH,
            HOME: dirs.tmp,
            XDG_CONFIG_HOME: join(dirs.xdg, 'config'),
            npm_config_update_notifier: 'false',
          };
          const npx = (args: string[]) =>
            execFileSync('npx', args, {
              cwd: app,
              env,
              encoding: 'utf8',
              stdio: ['ignore', 'pipe', 'pipe'],
              timeout: 60_000,
            });
          installed = npx(['vigil', 'install', 'opencode']);
          // Idempotent: the second run changes nothing.
          expect(npx(['vigil', 'install', 'opencode']).split('\n')[0]).toMatch(/\(unchanged\)$/);
        },
        env: () => ({ VIGIL_URL: vigilUrl }),
      });
      try {
        expect(installed.split('\n')[0]).toBe(
          `installed vigil-opencode/${version} -> ${join(lab.tmp, 'xdg', 'config', 'opencode', 'plugin', 'vigil.js')}`,
        );
        await until(
          'vigil serve /health',
          async () => (await http('GET', `${vigilUrl}/health`, undefined, 2_000)).status === 200,
          {
            detail: () => serve.output(),
          },
        );
        const id = await lab.runSession('packaged', 'read the app');
        // The shipped plugin ran inside opencode: the session's tool call reached the service, with its version.
        const row = await until(
          'the session reported by the plugin',
          async () => {
            const rows = (
              await http<{ session: string; calls: number; plugin_version: string }[]>('GET', `${vigilUrl}/sessions`)
            ).data;
            return rows.find((r) => r.session === id && r.calls === 1);
          },
          { detail: () => `${lab.detail()}\n--- serve ---\n${serve.output()}` },
        );
        expect(row.plugin_version).toBe(`vigil-opencode/${version}`);
        const health = (await http<{ plugins: { version: string }[] }>('GET', `${vigilUrl}/health`)).data;
        expect(health.plugins.map((p) => p.version)).toContain(`vigil-opencode/${version}`);
      } finally {
        await lab.stop();
        await stopProc(serve);
      }
      // And it comes out again.
      const gone = spawnSync(process.execPath, [cli, 'uninstall', 'opencode', '--dest', join(app, 'nowhere')], {
        cwd: app,
        encoding: 'utf8',
      });
      expect(gone.stdout).toContain('nothing to remove');
    },
    300_000,
  );
});
