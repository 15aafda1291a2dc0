import { spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { fakeNotifySend, tempDir } from '../test/helpers/index.ts';
import { main } from './main.ts';

/** The program in this process (no process start per case): the same parsing and output. */
async function inProcess(args: string[], env: NodeJS.ProcessEnv = {}) {
  let out = '';
  let err = '';
  const code = await main(args, {
    out: (s) => {
      out += s;
    },
    err: (s) => {
      err += s;
    },
    env: { PATH: process.env.PATH, HOME: process.env.HOME, ...env },
  });
  return { code, out, err };
}

function vigil(args: string[], env: NodeJS.ProcessEnv = {}) {
  const r = spawnSync(process.execPath, ['bin/vigil.mjs', ...args], {
    encoding: 'utf8',
    env: { PATH: process.env.PATH, HOME: process.env.HOME, ...env },
    timeout: 60_000,
  });
  return { code: r.status, out: r.stdout, err: r.stderr };
}

describe('vigil CLI', () => {
  it('config check prints the effective config with secrets redacted', async () => {
    const dir = tempDir();
    const f = join(dir, 'c.yaml');
    writeFileSync(f, 'store:\n  backend: memory\n  redis_url: redis://:hunter22secret@127.0.0.1:6379\n');
    const r = await inProcess(['config', 'check', '--config', f]);
    expect(r.code).toBe(0);
    expect(r.out).toContain('config ok');
    expect(r.out).toContain('port: 7411');
    expect(r.out).not.toContain('hunter22secret');
  });

  it('config check names what it read: values not at their default with their source, and each channel', async () => {
    const f = join(tempDir(), 'c.yaml');
    writeFileSync(f, 'server:\n  port: 9000\nprogress:\n  stall_turns: 25\n');
    const r = await inProcess(['config', 'check', '--config', f], { PORT: '9100', PATH: '/nonexistent' });
    expect(r.code).toBe(0);
    expect(r.out).toContain('server.port = 9100  (env; overrides default: 7411, file: 9000)');
    expect(r.out).toContain('progress.stall_turns = 25  (file; overrides default: 20)');
    expect(r.out).toContain('desktop (desktop, from default): NOT READY: notify-send not found on PATH');
  });

  it('config check on a bad file lists every error with its path and exits 1', async () => {
    const dir = tempDir();
    const f = join(dir, 'c.yaml');
    writeFileSync(f, 'server:\n  prot: 1\nnotifications:\n  channels:\n    - name: a\n      type: desktp\n');
    const r = await inProcess(['config', 'check', '--config', f]);
    expect(r.code).toBe(1);
    expect(r.err).toContain('server.prot: unknown key');
    expect(r.err).toContain('notifications.channels[0].type: unknown channel type "desktp" (known: desktop');
  });

  it('alert test reports delivered through a recording notify-send', () => {
    const dir = tempDir();
    const fake = fakeNotifySend(dir);
    const r = vigil(['alert', 'test', '--channel', 'desktop'], { PATH: `${dir}:${process.env.PATH}` });
    expect(r.err).toBe('');
    expect(r.code).toBe(0);
    expect(r.out).toContain('channel "desktop" (desktop): delivered');
    expect(fake.calls()[0]).toContain('TEST: Vigil test alert');
    // TEST once in what the person sees (title and body), not "TEST ... TEST".
    expect(fake.calls()[0].join(' ').match(/TEST/g)).toHaveLength(1);
  });

  it('alert test reports the failure reason and exits 1', () => {
    const r = vigil(['alert', 'test', '--channel', 'desktop'], { PATH: tempDir() });
    expect(r.code).toBe(1);
    expect(r.err).toContain('failed after 1 attempt(s): notify-send not found on PATH');
  });

  it('bad arguments name the argument', async () => {
    const r = await inProcess(['alert', 'test', '--channel', 'desktop', '--timeout', 'soon']);
    expect(r.code).toBe(2);
    expect(r.err).toContain('--timeout: not a duration');
    expect((await inProcess(['alert', 'test', '--channel', 'nope'])).err).toContain('no channel named "nope"');
  });

  it('vigil --version prints the version', () => {
    const r = vigil(['--version']);
    expect(r.code).toBe(0);
    expect(r.out.trim()).toBe(`vigil ${JSON.parse(readFileSync('package.json', 'utf8')).version}`);
  });
});
