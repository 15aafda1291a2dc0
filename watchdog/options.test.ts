import { describe, expect, it } from 'vitest';
import { createRegistry } from '../builtins.ts';
import { loadConfig } from '../core/config.ts';
import { resolvePaths, WatchdogSchema } from './options.ts';
import { watchdogKnobs } from './tick.ts';

describe('watchdog options', () => {
  it('path defaults follow XDG_STATE_HOME / XDG_DATA_HOME of the environment, else ~/.local', () => {
    const o = WatchdogSchema.parse({});
    expect(resolvePaths(o, { HOME: '/home/u' })).toMatchObject({
      state: '/home/u/.local/state/vigil/watchdog.json',
      lock: '/home/u/.local/state/vigil/watchdog.lock',
      db: '/home/u/.local/share/opencode/opencode.db',
      rcServers: '/home/u/.local/share/opencode/rc-servers.json',
    });
    expect(resolvePaths(o, { HOME: '/home/u', XDG_STATE_HOME: '/xs', XDG_DATA_HOME: '/xd' })).toMatchObject({
      state: '/xs/vigil/watchdog.json',
      lock: '/xs/vigil/watchdog.lock',
      db: '/xd/opencode/opencode.db',
      rcServers: '/xd/opencode/rc-servers.json',
    });
    // a relative XDG path is invalid per the spec and ignored
    expect(resolvePaths(o, { HOME: '/home/u', XDG_STATE_HOME: 'rel' }).state).toBe(
      '/home/u/.local/state/vigil/watchdog.json',
    );
    const set = WatchdogSchema.parse({
      state_file: '~/w/s.json',
      lock_file: '/l',
      opencode_db: '~/db',
      rc_servers_file: '/rc',
    });
    expect(resolvePaths(set, { HOME: '/home/u' })).toMatchObject({
      state: '/home/u/w/s.json',
      lock: '/l',
      db: '/home/u/db',
      rcServers: '/rc',
    });
  });

  it('is a strict config section with defaults; durations parse', () => {
    const cfg = loadConfig({ registry: createRegistry(), env: {}, overlay: { watchdog: { interval: '10m' } } });
    expect(cfg.watchdog).toMatchObject({
      enabled: true,
      interval: 600_000,
      probe_timeout: 2_000,
      servers: ['http://127.0.0.1:4096'],
      service_url: 'http://127.0.0.1:7411',
      state_file: null,
    });
    expect(() =>
      loadConfig({ registry: createRegistry(), env: {}, overlay: { watchdog: { intervall: '5m' } } }),
    ).toThrow(/watchdog\.intervall: unknown key/);
    expect(() =>
      loadConfig({ registry: createRegistry(), env: {}, overlay: { watchdog: { servers: ['ftp://x'] } } }),
    ).toThrow(/watchdog\.servers\[0\]/);
  });

  it('read_only_agents: null uses the progress list; a list is merged into it', () => {
    const base = loadConfig({ registry: createRegistry(), env: {} });
    expect(watchdogKnobs(base).read_only_agents).toEqual(base.progress.read_only_agents);
    const more = loadConfig({
      registry: createRegistry(),
      env: {},
      overlay: { watchdog: { read_only_agents: ['scout', 'explore'] } },
    });
    expect(watchdogKnobs(more).read_only_agents).toEqual([...base.progress.read_only_agents, 'scout']);
  });
});
