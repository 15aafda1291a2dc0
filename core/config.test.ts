import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import { createRegistry } from '../builtins.ts';
import { tempDir } from '../test/helpers/index.ts';
import { ConfigError, DEFAULT_CONFIG_PATH, loadConfig, validateConfig } from './config.ts';
import { rootSchema } from './config-schema.ts';
import type { ChannelPlugin } from './contracts.ts';
import { displayConfig } from './redact.ts';

function problems(fn: () => unknown): string[] {
  try {
    fn();
  } catch (e) {
    if (e instanceof ConfigError) return e.problems;
    throw e;
  }
  throw new Error('expected the config to be rejected');
}

const secretPlugin: ChannelPlugin<{ secret_env: string; url: string }> = {
  kind: 'channel',
  type: 'hooky',
  options: z.strictObject({ url: z.url(), secret_env: z.string() }),
  create: () => ({ type: 'hooky', name: 'x', send: async () => {} }),
};

describe('config', () => {
  it('config/default.yaml holds every knob at its schema default', () => {
    const registry = createRegistry();
    const fromYaml = validateConfig(registry, parseYaml(readFileSync(DEFAULT_CONFIG_PATH, 'utf8')), {});
    const fromSchema = rootSchema(registry).parse({
      notifications: { channels: [{ name: 'desktop', type: 'desktop' }] },
    });
    expect(JSON.parse(JSON.stringify(fromYaml))).toEqual(JSON.parse(JSON.stringify(fromSchema)));
  });

  it('loads the defaults plus an overlay file named by VIGIL_CONFIG', () => {
    const dir = tempDir();
    const f = join(dir, 'vigil.yaml');
    writeFileSync(f, 'server:\n  port: 9999\nnotifications:\n  channels: []\n');
    const cfg = loadConfig({ registry: createRegistry(), env: { VIGIL_CONFIG: f } });
    expect(cfg.server.port).toBe(9999);
    expect(cfg.server.host).toBe('127.0.0.1');
    expect(cfg.notifications.channels).toEqual([]);
    expect(Object.isFrozen(cfg.server)).toBe(true);
  });

  it('an unknown key fails with its path', () => {
    const p = problems(() => loadConfig({ registry: createRegistry(), env: {}, overlay: { server: { prot: 1 } } }));
    expect(p).toContain('server.prot: unknown key');
  });

  it('an unknown channel type names the path and the known types', () => {
    const p = problems(() =>
      loadConfig({
        registry: createRegistry(),
        env: {},
        overlay: {
          notifications: {
            channels: [
              { name: 'a', type: 'desktop' },
              { name: 'b', type: 'desktp' },
            ],
          },
        },
      }),
    );
    expect(p).toEqual([
      'notifications.channels[1].type: unknown channel type "desktp" (known: desktop, webhook, pagerduty, twilio)',
    ]);
  });

  it('an unknown key inside a channel and a wrong value type are named', () => {
    const p = problems(() =>
      loadConfig({
        registry: createRegistry(),
        env: {},
        overlay: {
          notifications: {
            channels: [{ name: 'a', type: 'desktop', min_severity: 'loud', app_nam: 'x', quiet_window: 'soon' }],
          },
          server: { port: 'eighty' },
        },
      }),
    );
    expect(p).toEqual(
      expect.arrayContaining([
        'server.port: Invalid input: expected number, received string',
        expect.stringMatching(/^notifications\.channels\[0\]\.min_severity: /),
        'notifications.channels[0].app_nam: unknown key',
        expect.stringMatching(/^notifications\.channels\[0\]\.quiet_window: not a duration/),
      ]),
    );
  });

  it('a missing secret variable for an enabled channel names the variable; a disabled one is fine', () => {
    const registry = createRegistry().register(secretPlugin);
    const ch = { name: 'hook', type: 'hooky', url: 'http://127.0.0.1:1/x', secret_env: 'HOOK_SECRET' };
    const p = problems(() => loadConfig({ registry, env: {}, overlay: { notifications: { channels: [ch] } } }));
    expect(p).toEqual([
      'notifications.channels[0].secret_env: environment variable HOOK_SECRET is not set (channel "hook")',
    ]);
    expect(() =>
      loadConfig({ registry, env: {}, overlay: { notifications: { channels: [{ ...ch, enabled: false }] } } }),
    ).not.toThrow();
    expect(() =>
      loadConfig({ registry, env: { HOOK_SECRET: 's3cr3t-value' }, overlay: { notifications: { channels: [ch] } } }),
    ).not.toThrow();
  });

  it('rejects duplicate channel names and bad YAML', () => {
    expect(
      problems(() =>
        loadConfig({
          registry: createRegistry(),
          env: {},
          overlay: {
            notifications: {
              channels: [
                { name: 'a', type: 'desktop' },
                { name: 'a', type: 'desktop' },
              ],
            },
          },
        }),
      ),
    ).toEqual(['notifications.channels[1].name: duplicate channel name "a"']);
    const dir = tempDir();
    const f = join(dir, 'bad.yaml');
    writeFileSync(f, 'server: [unclosed\n');
    expect(() => loadConfig({ registry: createRegistry(), file: f, env: {} })).toThrow(/not valid YAML/);
  });

  it('display redacts secret-looking values and URL credentials, keeps env var names', () => {
    const cfg = loadConfig({
      registry: createRegistry(),
      env: {},
      overlay: { store: { redis_url: 'redis://user:hunter22@127.0.0.1:6379' } },
    });
    const shown = JSON.stringify(displayConfig(cfg));
    expect(shown).not.toContain('hunter22');
    expect(shown).toContain('REDIS_URL');
  });
});
