import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { z } from 'zod';
import type { AgentInstaller, InstallContext } from '../../../core/installer.ts';

// `vigil install opencode`: the plugin bundle into a directory opencode 1.18 loads
// plugins from (docs/opencode.md, Plugin hooks):
//   (default)        $XDG_CONFIG_HOME/opencode/plugin/vigil.js (~/.config/opencode/plugin/)
//   --project DIR    DIR/.opencode/plugin/vigil.js
//   --dest DIR       DIR/vigil.js
// The bundle is the one the package ships (dist/sensors/opencode/plugin/vigil.js, built by
// `npm run build`); in a clone, with no build beside this file, it is built afresh
// from the sources (esbuild, a devDependency).

const FILE = 'vigil.js';
/** The first line of every bundle build.mjs writes: `// vigil-opencode <version>: ...`. */
const BANNER = /^\/\/ vigil-opencode (\S+):/;

const Options = z
  .strictObject({
    project: z.string().min(1).optional(),
    dest: z.string().min(1).optional(),
  })
  .refine((o) => !(o.project && o.dest), { message: 'give --project or --dest, not both', path: ['dest'] });
type Options = z.output<typeof Options>;

function targetDir(o: Options, ctx: InstallContext): string {
  if (o.dest) return resolve(o.dest);
  if (o.project) return join(resolve(o.project), '.opencode', 'plugin');
  return join(ctx.env.XDG_CONFIG_HOME || join(ctx.home, '.config'), 'opencode', 'plugin');
}

const versionOf = (text: string) => BANNER.exec(text.slice(0, 300))?.[1];

/** The bundle's text: the shipped build, else a fresh build of the sources (a clone). */
async function bundle(): Promise<string> {
  const shipped = fileURLToPath(new URL(`./${FILE}`, import.meta.url));
  if (existsSync(shipped)) return readFileSync(shipped, 'utf8');
  const builder = pathToFileURL(join(dirname(fileURLToPath(import.meta.url)), 'build.mjs')).href;
  if (!existsSync(fileURLToPath(builder))) {
    throw new Error(`the opencode plugin bundle is missing (${shipped}): reinstall the vigil package`);
  }
  const { buildPlugin } = (await import(builder)) as { buildPlugin: () => Promise<{ path: string }> };
  return readFileSync((await buildPlugin()).path, 'utf8');
}

const NOTES = [
  'restart opencode to load it',
  'it reports to VIGIL_URL (default http://127.0.0.1:7411, vigil serve); for a router that mounts vigilIngest, e.g. VIGIL_URL=http://127.0.0.1:8080/vigil',
];

export const opencodeInstaller: AgentInstaller<Options> = {
  agent: 'opencode',
  summary: 'the opencode plugin (the sensor and the hands) where opencode 1.18 loads plugins',
  flags: [
    { name: 'project', value: 'dir', description: 'for one project: DIR/.opencode/plugin/vigil.js' },
    { name: 'dest', value: 'dir', description: 'into DIR (DIR/vigil.js)' },
  ],
  options: Options,

  async install(o, ctx) {
    const dir = targetDir(o, ctx);
    const path = join(dir, FILE);
    const text = await bundle();
    const version = versionOf(text);
    if (!version) throw new Error('the opencode plugin bundle has no version banner');
    const before = existsSync(path) ? readFileSync(path, 'utf8') : undefined;
    if (before === text) return { action: 'unchanged', path, version: `vigil-opencode/${version}`, notes: NOTES };
    mkdirSync(dir, { recursive: true });
    // Written beside, then renamed: opencode never loads half a file.
    const tmp = join(dir, `.${FILE}.${process.pid}.tmp`);
    writeFileSync(tmp, text);
    renameSync(tmp, path);
    const previous = before === undefined ? undefined : (versionOf(before) ?? 'a file that is not Vigil');
    return {
      action: before === undefined ? 'installed' : 'replaced',
      path,
      version: `vigil-opencode/${version}`,
      ...(previous ? { previous: previous.startsWith('a file') ? previous : `vigil-opencode/${previous}` } : {}),
      notes: NOTES,
    };
  },

  async uninstall(o, ctx) {
    const path = join(targetDir(o, ctx), FILE);
    if (!existsSync(path)) return { action: 'absent', path };
    const version = versionOf(readFileSync(path, 'utf8'));
    if (!version) throw new Error(`${path} is not the Vigil plugin (no vigil-opencode banner): left alone`);
    rmSync(path);
    return { action: 'removed', path, version: `vigil-opencode/${version}`, notes: ['restart opencode to unload it'] };
  },

  async status(o, ctx) {
    const path = join(targetDir(o, ctx), FILE);
    const version = existsSync(path) ? versionOf(readFileSync(path, 'utf8')) : undefined;
    return { wired: version !== undefined, path, ...(version ? { version: `vigil-opencode/${version}` } : {}) };
  },
};
