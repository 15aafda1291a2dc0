import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { main } from '../../../cli/main.ts';
import { tempDir } from '../../../test/helpers/index.ts';

// `vigil install opencode` / `vigil uninstall opencode` as a user runs them (the CLI in
// this process, a home of its own): where the bundle goes, that a second run changes
// nothing, that an older build is replaced and named, and that uninstall removes only
// Vigil's file.

async function vigil(args: string[], env: NodeJS.ProcessEnv) {
  let out = '';
  let err = '';
  const code = await main(args, {
    out: (s) => {
      out += s;
    },
    err: (s) => {
      err += s;
    },
    env,
  });
  return { code, out, err };
}

describe('vigil install opencode', () => {
  it('writes the bundle where opencode loads global plugins; a second run is unchanged; uninstall removes it', async () => {
    const home = tempDir('vigil-install-home');
    const env = { HOME: home, XDG_CONFIG_HOME: join(home, 'xdg') };
    const file = join(home, 'xdg', 'opencode', 'plugin', 'vigil.js');
    const first = await vigil(['install', 'opencode'], env);
    expect(first.err).toBe('');
    expect(first.code).toBe(0);
    const version = /^installed (vigil-opencode\/\d+\.\d+\.\d+\+[0-9a-f]{8}) -> (\S+)\n/.exec(first.out);
    expect(version?.[2]).toBe(file);
    const text = readFileSync(file, 'utf8');
    expect(text.startsWith(`// ${version?.[1].replace('/', ' ')}:`)).toBe(true);
    expect(first.out).toContain('restart opencode to load it');

    const again = await vigil(['install', 'opencode'], env);
    expect(again.out.split('\n')[0]).toBe(`installed ${version?.[1]} -> ${file} (unchanged)`);
    expect(readFileSync(file, 'utf8')).toBe(text);

    // An older build is replaced, and named.
    writeFileSync(
      file,
      '// vigil-opencode 0.0.1+deadbeef: an older build\nexport const VigilPlugin = async () => ({});\n',
    );
    const upgraded = await vigil(['install', 'opencode'], env);
    expect(upgraded.out.split('\n')[0]).toBe(
      `installed ${version?.[1]} -> ${file} (replaced vigil-opencode/0.0.1+deadbeef)`,
    );

    const removed = await vigil(['uninstall', 'opencode'], env);
    expect(removed.out.split('\n')[0]).toBe(`removed ${version?.[1]} from ${file}`);
    expect(existsSync(file)).toBe(false);
    const none = await vigil(['uninstall', 'opencode'], env);
    expect(none.code).toBe(0);
    expect(none.out).toBe(`nothing to remove: ${file} does not exist\n`);
  });

  it('--project and --dest; without XDG_CONFIG_HOME the home config', async () => {
    const home = tempDir('vigil-install-home');
    const proj = join(home, 'app');
    mkdirSync(proj);
    expect((await vigil(['install', 'opencode', '--project', proj], { HOME: home })).code).toBe(0);
    expect(existsSync(join(proj, '.opencode', 'plugin', 'vigil.js'))).toBe(true);
    expect((await vigil(['install', 'opencode', '--dest', join(home, 'd')], { HOME: home })).code).toBe(0);
    expect(existsSync(join(home, 'd', 'vigil.js'))).toBe(true);
    expect((await vigil(['install', 'opencode'], { HOME: home })).code).toBe(0);
    expect(existsSync(join(home, '.config', 'opencode', 'plugin', 'vigil.js'))).toBe(true);
  });

  it('validates its arguments and leaves a file that is not Vigil alone', async () => {
    const home = tempDir('vigil-install-home');
    const both = await vigil(['install', 'opencode', '--project', home, '--dest', home], { HOME: home });
    expect(both.code).toBe(2);
    expect(both.err).toContain('--dest: give --project or --dest, not both');
    const empty = await vigil(['install', 'opencode', '--dest', ''], { HOME: home });
    expect(empty.code).toBe(2);
    expect(empty.err).toContain('--dest:');
    expect((await vigil(['install', 'opencode', '--bogus'], { HOME: home })).code).not.toBe(0);
    expect((await vigil(['install', 'nosuchagent'], { HOME: home })).code).not.toBe(0);
    const mine = join(home, 'mine');
    mkdirSync(mine);
    writeFileSync(join(mine, 'vigil.js'), 'export const Mine = async () => ({});\n');
    const refused = await vigil(['uninstall', 'opencode', '--dest', mine], { HOME: home });
    expect(refused.code).toBe(1);
    expect(refused.err).toContain('is not the Vigil plugin (no vigil-opencode banner): left alone');
    expect(existsSync(join(mine, 'vigil.js'))).toBe(true);
  });
});
