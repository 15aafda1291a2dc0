import { createServer } from 'node:net';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { createRegistry } from '../../builtins.ts';
import { eventually, fakeNotifySend, finalRow, tempDir } from '../../test/helpers/index.ts';
import { ChannelKit } from '../testing/index.ts';
import { busEnv } from './desktop.channel.ts';

// notify-send is not HTTP: the channel kit builds the instance, a fake binary on PATH records the calls.
const kit = new ChannelKit(createRegistry());
afterEach(() => kit.close());

const desktopVigil = (env: Record<string, string>, channel: Record<string, unknown> = {}) =>
  kit.vigil({ name: 'desk', type: 'desktop', ...channel }, { env });

const incident = {
  dedup_key: 'ses_root',
  severity: 'critical' as const,
  title: 'looping: build (ses_child)',
  summary: '423 calls, 0 landed, read navbar.js x61',
  source: 'no-progress',
};

describe('desktop channel', () => {
  it('calls notify-send with app name, urgency, title and summary; resolve says recovered', async () => {
    const dir = tempDir();
    const fake = fakeNotifySend(dir);
    const v = await desktopVigil({ PATH: `${dir}:${process.env.PATH}`, DBUS_SESSION_BUS_ADDRESS: 'unix:path=/x' });
    await v.notifier.notify(incident);
    await v.notifier.notify({ ...incident, state: 'resolve' });
    await eventually(() => fake.calls().length === 2);
    const [trigger, resolve] = fake.calls();
    expect(trigger).toEqual([
      '--app-name=Vigil',
      '--urgency=critical',
      '--',
      'looping: build (ses_child)',
      'CRITICAL looping: build (ses_child): 423 calls, 0 landed, read navbar.js x61',
    ]);
    expect(resolve.slice(3)).toEqual([
      'Recovered: looping: build (ses_child)',
      'recovered: looping: build (ses_child)',
    ]);
    const rows = await eventually(async () => {
      const r = await v.deliveryLog.recent();
      return r.length === 2 ? r : undefined;
    });
    expect(rows!.map((r) => r.outcome)).toEqual(['delivered', 'delivered']);
  });

  it('warning maps to normal urgency, info to low', async () => {
    const dir = tempDir();
    const fake = fakeNotifySend(dir);
    const v = await desktopVigil({ PATH: `${dir}:${process.env.PATH}` });
    await v.notifier.notify({ ...incident, dedup_key: 'a', severity: 'warning' });
    await v.notifier.notify({ ...incident, dedup_key: 'b', severity: 'info' });
    await eventually(() => fake.calls().length === 2);
    expect(
      fake
        .calls()
        .map((c) => c[1])
        .sort(),
    ).toEqual(['--urgency=low', '--urgency=normal']);
  });

  it('a missing notify-send is a failed delivery in the log, not a crash', async () => {
    const v = await desktopVigil({ PATH: tempDir() }, { command: 'notify-send' });
    await v.notifier.notify(incident);
    const row = await finalRow(v);
    expect(row).toMatchObject({ outcome: 'failed', attempts: 1, reason: 'notify-send not found on PATH' });
  });

  it('a nonzero exit is retried once, then logged as failed with the reason', async () => {
    const dir = tempDir();
    const fake = fakeNotifySend(dir, 1);
    const v = await desktopVigil({ PATH: `${dir}:${process.env.PATH}` });
    await v.notifier.notify(incident);
    const row = await finalRow(v);
    expect(row).toMatchObject({ outcome: 'failed', attempts: 2 });
    expect(row.reason).toMatch(/^notify-send failed/);
    expect(fake.calls()).toHaveLength(2);
  });

  it('finds the session bus socket when DBUS_SESSION_BUS_ADDRESS is unset', async () => {
    const runtime = tempDir();
    const sock = join(runtime, 'bus');
    const server = createServer().listen(sock);
    await new Promise((r) => server.once('listening', r));
    try {
      expect(busEnv({ XDG_RUNTIME_DIR: runtime }).DBUS_SESSION_BUS_ADDRESS).toBe(`unix:path=${sock}`);
      expect(busEnv({ DBUS_SESSION_BUS_ADDRESS: 'unix:path=/given' }).DBUS_SESSION_BUS_ADDRESS).toBe(
        'unix:path=/given',
      );
      // A plain file is not a bus.
      expect(busEnv({ XDG_RUNTIME_DIR: tempDir() }).DBUS_SESSION_BUS_ADDRESS).toBeUndefined();
      const dir = tempDir();
      const fake = fakeNotifySend(dir);
      const v = await desktopVigil({ PATH: `${dir}:${process.env.PATH}`, XDG_RUNTIME_DIR: runtime });
      await v.notifier.notify(incident);
      await eventually(() => fake.calls().length === 1);
      const { readFileSync } = await import('node:fs');
      expect(JSON.parse(readFileSync(fake.log, 'utf8').split('\n')[0]).dbus).toBe(`unix:path=${sock}`);
    } finally {
      server.close();
    }
  });
});
