import { existsSync, readFileSync, rmSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { z } from 'zod';
import type { AgentInstaller, InstallContext, InstallResult, InstallStatus } from '../../core/installer.ts';
import {
  bundleVersion,
  type HookGroup,
  type HooksFile,
  hookBundle,
  ownedBy,
  readHooksFile,
  serialise,
  withHooks,
  withoutHooks,
  writeAtomic,
} from '../shared/hooks-file.ts';
import { SENSOR_NAME } from './descriptor.ts';

// `vigil install gemini`: Vigil's command hooks merged into a Gemini CLI settings file,
// beside the user's own hooks and settings (docs/gemini.md):
//   --user (default)   ~/.gemini/settings.json
//   --project DIR      DIR/.gemini/settings.json (Gemini runs project hooks only in a
//                      folder it trusts)
// The hook bundle goes beside it, in .gemini/vigil/. `hooksConfig.enabled: false`
// turns every hook off; install leaves the user's setting alone and `vigil status`
// says so.

export const HOOK_FILE = `vigil-${SENSOR_NAME}-hook.mjs`;
/** The events the bridge reads (bridge.ts). */
export const HOOK_EVENTS = ['BeforeAgent', 'BeforeTool', 'AfterTool', 'AfterAgent'] as const;
/** Milliseconds Gemini waits for the hook; the bridge itself gives up sooner (fail open). */
const TIMEOUT_MS = 10_000;

const Options = z
  .strictObject({
    user: z.boolean().optional(),
    project: z.string().min(1).optional(),
  })
  .refine((o) => !(o.user && o.project), { message: 'give --user or --project, not both', path: ['project'] });
type Options = z.output<typeof Options>;

export function locations(o: Options, ctx: InstallContext): { settings: string; hook: string } {
  const dir = o.project ? join(resolve(o.project), '.gemini') : join(ctx.home, '.gemini');
  return { settings: join(dir, 'settings.json'), hook: join(dir, 'vigil', HOOK_FILE) };
}

const mine = ownedBy(HOOK_FILE);

export function withVigil(s: HooksFile, hookPath: string): HooksFile {
  const groups: Record<string, HookGroup> = {};
  for (const e of HOOK_EVENTS)
    groups[e] = {
      hooks: [
        { type: 'command', command: `node ${JSON.stringify(hookPath)}`, name: `vigil-${e}`, timeout: TIMEOUT_MS },
      ],
    };
  return withHooks(s, mine, groups);
}

export const withoutVigil = (s: HooksFile): HooksFile => withoutHooks(s, mine);

const readText = (p: string) => (existsSync(p) ? readFileSync(p, 'utf8') : undefined);

const NOTES = [
  'Gemini CLI reads its settings at start: new sessions are watched',
  'the hooks report to VIGIL_URL (default http://127.0.0.1:7411, vigil serve); VIGIL_INGEST_TOKEN when the service has one',
];

export const geminiInstaller: AgentInstaller<Options> = {
  agent: SENSOR_NAME,
  summary: "Vigil's hooks in a Gemini CLI settings file, merged with the user's own",
  flags: [
    { name: 'user', description: 'for every project: ~/.gemini/settings.json (the default)' },
    { name: 'project', value: 'dir', description: 'for one (trusted) project: DIR/.gemini/settings.json' },
  ],
  options: Options,

  async install(o, ctx): Promise<InstallResult> {
    const where = locations(o, ctx);
    const { file, text: before } = readHooksFile(where.settings);
    const code = await hookBundle(SENSOR_NAME);
    const version = bundleVersion(SENSOR_NAME, code);
    if (!version) throw new Error('the Gemini CLI hook bundle has no version banner');
    const oldCode = readText(where.hook);
    const next = serialise(withVigil(file, where.hook));
    const had = JSON.stringify(withoutVigil(file)) !== JSON.stringify(file);
    const ver = `vigil-${SENSOR_NAME}/${version}`;
    if (next === before && oldCode === code)
      return { action: 'unchanged', path: where.settings, version: ver, notes: NOTES };
    if (oldCode !== code) writeAtomic(where.hook, code);
    if (next !== before) writeAtomic(where.settings, next);
    const previous = oldCode === undefined ? undefined : bundleVersion(SENSOR_NAME, oldCode);
    return {
      action: had || oldCode !== undefined ? 'replaced' : 'installed',
      path: where.settings,
      version: ver,
      ...(previous && oldCode !== code ? { previous: `vigil-${SENSOR_NAME}/${previous}` } : {}),
      notes: NOTES,
    };
  },

  async uninstall(o, ctx): Promise<InstallResult> {
    const where = locations(o, ctx);
    const oldCode = readText(where.hook);
    const version = oldCode === undefined ? undefined : bundleVersion(SENSOR_NAME, oldCode);
    if (oldCode !== undefined) rmSync(where.hook, { force: true });
    const { file, text } = readHooksFile(where.settings);
    const next = withoutVigil(file);
    const changed = text !== undefined && JSON.stringify(next) !== JSON.stringify(file);
    if (changed) writeAtomic(where.settings, serialise(next));
    if (!changed && oldCode === undefined) return { action: 'absent', path: where.settings };
    return {
      action: 'removed',
      path: where.settings,
      ...(version ? { version: `vigil-${SENSOR_NAME}/${version}` } : {}),
    };
  },

  async status(o, ctx): Promise<InstallStatus> {
    const where = locations(o, ctx);
    const { file } = readHooksFile(where.settings);
    const code = readText(where.hook);
    const version = code === undefined ? undefined : bundleVersion(SENSOR_NAME, code);
    const wired = Object.values(file.hooks ?? {}).some((gs) => gs.some((g) => g.hooks?.some(mine)));
    const off = (file as { hooksConfig?: { enabled?: unknown } }).hooksConfig?.enabled === false;
    return {
      wired: wired && version !== undefined,
      path: where.settings,
      ...(version ? { version: `vigil-${SENSOR_NAME}/${version}` } : {}),
      ...(off ? { problem: 'hooksConfig.enabled is false there: Gemini CLI runs no hooks' } : {}),
    };
  },
};
