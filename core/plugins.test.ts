import { writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { createRegistry } from '../builtins.ts';
import { tempDir } from '../test/helpers/index.ts';
import { ConfigError, loadConfigWithPlugins } from './config.ts';

// Plugin modules named under `plugins:` in a config file: loaded before validation,
// so their options are validated like the built-in ones; every failure names the module.

const FIXTURES = resolve(import.meta.dirname, '../test/fixtures/plugins');
const env = { RECEIVER_URL: 'http://127.0.0.1:9/hook' };

function configFile(body: string): string {
  const f = join(tempDir('vigil-plugins'), 'vigil.yaml');
  writeFileSync(f, body);
  return f;
}

async function problems(file: string): Promise<string[]> {
  try {
    await loadConfigWithPlugins({ registry: createRegistry(), file, env });
  } catch (e) {
    if (e instanceof ConfigError) return e.problems;
    throw e;
  }
  return [];
}

describe('plugins from config', () => {
  it('loads a module relative to the config file and validates its options like the built-ins', async () => {
    const registry = createRegistry();
    const cfg = await loadConfigWithPlugins({ registry, file: join(FIXTURES, 'vigil.yaml'), env });
    expect(registry.detectors.has('bash-failures')).toBe(true);
    expect(registry.channels.has('jsonpost')).toBe(true);
    expect(cfg.failures).toEqual({ threshold: 3 });
    expect(cfg.notifications.channels.map((c: { type: string }) => c.type)).toEqual(['jsonpost']);
  });

  it('a bad option of a plugin names its path', async () => {
    const f = configFile(`plugins: [${join(FIXTURES, 'third-party.mjs')}]\nfailures:\n  threshold: many\n`);
    expect(await problems(f)).toEqual([expect.stringMatching(/^failures\.threshold: /)]);
  });

  it('an unknown key in a plugin section fails', async () => {
    const f = configFile(`plugins: [${join(FIXTURES, 'third-party.mjs')}]\nfailures:\n  threshhold: 2\n`);
    expect(await problems(f)).toEqual(['failures.threshhold: unknown key']);
  });

  it('a missing module fails naming it', async () => {
    const f = configFile('plugins: [./no-such-plugin.mjs]\n');
    expect(await problems(f)).toEqual([expect.stringMatching(/^plugins\[0\] "\.\/no-such-plugin\.mjs": cannot load/)]);
  });

  it('a module that exports no plugin fails naming it', async () => {
    const f = configFile(`plugins: [${join(FIXTURES, 'bad/nothing.mjs')}]\n`);
    expect(await problems(f)).toEqual([expect.stringMatching(/plugins\[0\] ".*nothing\.mjs": exports no plugin/)]);
  });

  it('a duplicate type fails naming the module and what holds the type', async () => {
    const f = configFile(`plugins: [${join(FIXTURES, 'bad/duplicate.mjs')}]\n`);
    expect(await problems(f)).toEqual([
      expect.stringMatching(
        /plugins\[0\] ".*duplicate\.mjs": channel type "webhook" is already registered \(by built-in\)/,
      ),
    ]);
  });

  it('a plugins entry that is not a string names its index', async () => {
    const f = configFile('plugins: [42]\n');
    expect(await problems(f)).toEqual([expect.stringMatching(/^plugins\[0\]: /)]);
  });
});
