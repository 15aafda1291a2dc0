import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Vigil } from '../core/vigil.ts';
import { buildServer } from '../service/server.ts';
import { readState } from '../watchdog/state.ts';
import { type Proc, startProc, stopProc, until } from './fixtures/opencode-e2e/procs.ts';
import { tempDir, testVigil } from './helpers/index.ts';
import { type FakeServer, fakeOpencode, ocMessages, ocSession } from './helpers/opencode.ts';

// `vigil watchdog tick` as the timer runs it: two processes started together on one
// lock file. The fake opencode holds GET /global/health until the test lets go, so the
// tick that took the lock is still running when the other one looks: exactly one
// skips (exit 0), the other finishes its tick (exit 0).

const ROOT = join(import.meta.dirname, '..');
let dir = '';
let vigil: Vigil;
let serviceUrl = '';
let closeService: (() => Promise<void>) | undefined;
let oc: FakeServer;
let open!: () => void;
const procs: Proc[] = [];

beforeAll(async () => {
  dir = tempDir('vigil-wd-cli');
  vigil = await testVigil({ backend: 'memory' });
  const app = await buildServer(vigil);
  serviceUrl = await app.listen({ host: '127.0.0.1', port: 0 });
  closeService = async () => {
    await app.close();
    await vigil.close();
  };
  const now = Date.now();
  const sid = 'ses_cli000000000000000000001';
  oc = await fakeOpencode({
    health: { healthy: true, version: '1.18.33' },
    sessions: [ocSession(sid, now)],
    messages: { [sid]: ocMessages(sid, now - 10_000, [{ tool: 'read', input: { filePath: '/work/project/a.js' } }]) },
    gate: new Promise<void>((r) => {
      open = r;
    }),
  });
});

afterAll(async () => {
  open?.();
  for (const p of procs) await stopProc(p);
  await oc?.close();
  await closeService?.();
  if (dir) rmSync(dir, { recursive: true, force: true });
}, 60_000);

describe('vigil watchdog tick (two processes)', () => {
  it('two ticks started together: one runs, one skips; both exit 0', async () => {
    const cfg = join(dir, 'vigil.yaml');
    writeFileSync(
      cfg,
      [
        'notifications:',
        '  channels: []',
        'watchdog:',
        `  servers: [${oc.url}]`,
        `  service_url: ${serviceUrl}`,
        '  probe_timeout: 120s',
        `  state_file: ${join(dir, 'state.json')}`,
        `  lock_file: ${join(dir, 'watchdog.lock')}`,
        `  opencode_db: ${join(dir, 'none.db')}`,
        `  rc_servers_file: ${join(dir, 'rc.json')}`,
        '  transcripts: false',
        '',
      ].join('\n'),
    );
    const env = { ...process.env, VIGIL_CONFIG: '' };
    for (const name of ['tick-a', 'tick-b']) {
      procs.push(
        startProc(name, process.execPath, ['bin/vigil.mjs', 'watchdog', 'tick', '--config', cfg], {
          cwd: ROOT,
          env,
          logDir: join(dir, 'logs'),
        }),
      );
    }
    const detail = () => procs.map((p) => `--- ${p.name} ---\n${p.output()}`).join('\n');
    // the one that found the lock taken exits first (the other waits on the gated probe)
    const skipper = await Promise.race(procs.map((p) => p.exited.then(() => p)));
    expect(await skipper.exited, detail()).toBe(0);
    expect(skipper.output()).toMatch(/^watchdog tick: skipped .*\(previous tick still running \(pid \d+\)\)$/m);
    const runner = procs.find((p) => p !== skipper)!;
    expect(runner.child.exitCode).toBeNull();
    // the skip reached the service as a heartbeat
    await until('the skipped heartbeat', async () => {
      const h = (await (await fetch(`${serviceUrl}/health`)).json()) as {
        watchdog: { result: { status: string } } | null;
      };
      return h.watchdog?.result.status === 'skipped';
    });

    open();
    expect(await runner.exited, detail()).toBe(0);
    expect(runner.output()).toMatch(/^watchdog tick: ok servers=1 sessions=1 flagged=0 model_calls=0 service=up$/m);
    expect(readState(join(dir, 'state.json'))).toMatchObject({ result: { status: 'ok', servers: 1, sessions: 1 } });
    const h = (await (await fetch(`${serviceUrl}/health`)).json()) as { watchdog: { result: { status: string } } };
    expect(h.watchdog.result.status).toBe('ok');
  }, 120_000);
});
