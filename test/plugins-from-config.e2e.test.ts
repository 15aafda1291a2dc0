import { spawnSync } from 'node:child_process';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort, http, type Proc, startProc, stopProc, until } from './fixtures/opencode-e2e/procs.ts';
import { tempDir } from './helpers/index.ts';
import { type WireServer, wireServer } from './helpers/wire-servers.ts';

// A third party's detector and channel, in a plain JavaScript module outside the source
// folders (test/fixtures/plugins/third-party.mjs), named under `plugins:` in a config
// file: `vigil config check` validates their options; `vigil serve` with that config
// judges events sent over HTTP with the detector, and its alert reaches a local
// receiver through the notifier and the custom channel. No line of Vigil's source
// names either plugin.

const ROOT = resolve(import.meta.dirname, '..');
const CONFIG = join(ROOT, 'test/fixtures/plugins/vigil.yaml');
const vigil = (args: string[], env: NodeJS.ProcessEnv = {}) =>
  spawnSync(process.execPath, [join(ROOT, 'bin/vigil.mjs'), ...args], {
    cwd: tempDir('vigil-cwd'),
    env: { PATH: process.env.PATH, ...env },
    encoding: 'utf8',
    timeout: 60_000,
  });

describe('plugins named in the config file', () => {
  let receiver: WireServer;
  let proc: Proc | undefined;
  let url = '';

  beforeAll(async () => {
    receiver = await wireServer({ status: 200, body: 'ok' });
  });
  afterAll(async () => {
    if (proc) await stopProc(proc);
    await receiver.close();
  });

  it('vigil config check validates the plugins options and prints them', () => {
    const r = vigil(['config', 'check', '--config', CONFIG], { RECEIVER_URL: `${receiver.origin}/hook` });
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    expect(r.stdout).toContain('failures:\n  threshold: 3');
    expect(r.stdout).toContain('type: jsonpost');
    expect(r.stdout).toContain('config ok');
  });

  it('vigil config check refuses the plugin channel when its secret variable is missing', () => {
    const r = vigil(['config', 'check', '--config', CONFIG]);
    expect(r.status).toBe(1);
    expect(r.stderr).toContain('notifications.channels[0].url_env: environment variable RECEIVER_URL is not set');
  });

  it('vigil serve judges with the plugin detector and alerts through the plugin channel', async () => {
    const port = await freePort();
    url = `http://127.0.0.1:${port}`;
    proc = startProc(
      'vigil-plugins',
      process.execPath,
      ['bin/vigil.mjs', 'serve', '--port', String(port), '--config', CONFIG],
      {
        cwd: ROOT,
        env: { PATH: process.env.PATH, RECEIVER_URL: `${receiver.origin}/hook`, VIGIL_LOG_LEVEL: 'warn' },
        logDir: tempDir('vigil-plugins-log'),
      },
    );
    const health = await until('vigil serve /health', async () => (await http('GET', `${url}/health`)).data, {
      detail: () => proc?.output() ?? '',
    });
    expect(Object.keys(health.detectors)).toContain('bash-failures');

    const fail = (i: number) => ({
      session_id: 'ses_plugin',
      agent: 'build',
      tool: 'bash',
      call_id: `c${i}`,
      fingerprint: `${i}`.padStart(64, 'a'),
      target: 'npm test',
      exit: 1,
      landed: false,
      ts: Date.now(),
    });
    const r = await http('POST', `${url}/progress`, [fail(1), fail(2), fail(3)]);
    expect(r.status).toBe(202);
    expect(r.data.verdicts).toEqual([
      { session: 'ses_plugin', detector: 'bash-failures', from: 'ok', to: 'stalling', source: 'bash-failures' },
    ]);

    const got = await until('the alert at the receiver', () => receiver.requests.find((q) => q.url === '/hook'));
    expect(JSON.parse(got.text)).toMatchObject({
      dedup_key: 'bash-failures:ses_plugin',
      state: 'trigger',
      severity: 'warning',
      source: 'bash-failures',
      summary: '3 failed bash calls in a row (last: npm test)',
    });
    const rows = (await http('GET', `${url}/sessions`)).data;
    expect(rows[0]).toMatchObject({ session: 'ses_plugin', verdict: 'stalling', source: 'bash-failures' });
  }, 90_000);
});
