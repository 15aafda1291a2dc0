import { spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { fakeNotifySend, tempDir } from '../test/helpers/index.ts';

function vigil(args: string[], env: NodeJS.ProcessEnv = {}) {
  const r = spawnSync(process.execPath, ['bin/vigil.mjs', ...args], {
    encoding: 'utf8',
    env: { PATH: process.env.PATH, HOME: process.env.HOME, ...env },
    timeout: 60_000,
  });
  return { code: r.status, out: r.stdout, err: r.stderr };
}

describe('vigil CLI', () => {
  it('config check prints the effective config with secrets redacted', () => {
    const dir = tempDir();
    const f = join(dir, 'c.yaml');
    writeFileSync(f, 'store:\n  redis_url: redis://:hunter22secret@127.0.0.1:6379\n');
    const r = vigil(['config', 'check', '--config', f]);
    expect(r.code).toBe(0);
    expect(r.out).toContain('config ok');
    expect(r.out).toContain('port: 7411');
    expect(r.out).not.toContain('hunter22secret');
  });

  it('config check on a bad file lists every error with its path and exits 1', () => {
    const dir = tempDir();
    const f = join(dir, 'c.yaml');
    writeFileSync(f, 'server:\n  prot: 1\nnotifications:\n  channels:\n    - name: a\n      type: desktp\n');
    const r = vigil(['config', 'check', '--config', f]);
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
  });

  it('alert test reports the failure reason and exits 1', () => {
    const r = vigil(['alert', 'test', '--channel', 'desktop'], { PATH: tempDir() });
    expect(r.code).toBe(1);
    expect(r.err).toContain('failed after 1 attempt(s): notify-send not found on PATH');
  });

  it('bad arguments name the argument', () => {
    const r = vigil(['alert', 'test', '--channel', 'desktop', '--timeout', 'soon']);
    expect(r.code).toBe(2);
    expect(r.err).toContain('--timeout: not a duration');
    expect(vigil(['alert', 'test', '--channel', 'nope']).err).toContain('no channel named "nope"');
  });
});
