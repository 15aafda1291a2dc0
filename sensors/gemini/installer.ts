import { join } from 'node:path';
import type { HooksFile } from '../shared/hooks-file.ts';
import { commandGroups, hookFileName, hookInstaller, type ScopeOptions, scopeDir } from '../shared/installer.ts';
import { SENSOR_NAME } from './descriptor.ts';

// `vigil install gemini`: Vigil's command hooks merged into a Gemini CLI settings file,
// beside the user's own hooks and settings (docs/gemini.md):
//   --user (default)   ~/.gemini/settings.json
//   --project DIR      DIR/.gemini/settings.json (Gemini runs project hooks only in a
//                      folder it trusts)
// The hook bundle goes beside it, in .gemini/vigil/. `hooksConfig.enabled: false`
// turns every hook off; install leaves the user's setting alone and `vigil status`
// says so.

export const HOOK_FILE = hookFileName(SENSOR_NAME);
/** The events the bridge reads (bridge.ts). */
export const HOOK_EVENTS = ['BeforeAgent', 'BeforeTool', 'AfterTool', 'AfterAgent', 'SessionEnd'] as const;
/** Milliseconds Gemini waits for the hook; the bridge itself gives up sooner (fail open). */
const TIMEOUT_MS = 10_000;

export const geminiInstaller = hookInstaller({
  sensor: SENSOR_NAME,
  title: 'Gemini CLI',
  summary: "Vigil's hooks in a Gemini CLI settings file, merged with the user's own",
  flags: [
    { name: 'user', description: 'for every project: ~/.gemini/settings.json (the default)' },
    { name: 'project', value: 'dir', description: 'for one (trusted) project: DIR/.gemini/settings.json' },
  ],
  notes: ['Gemini CLI reads its settings at start: new sessions are watched'],
  where(o: ScopeOptions, ctx) {
    const dir = scopeDir(o, '.gemini', join(ctx.home, '.gemini'));
    return { file: join(dir, 'settings.json'), hook: join(dir, 'vigil', HOOK_FILE) };
  },
  groups: (hookPath) =>
    commandGroups(HOOK_EVENTS, (e) => ({
      command: `node ${JSON.stringify(hookPath)}`,
      name: `vigil-${e}`,
      timeout: TIMEOUT_MS,
    })),
  problem: (file: HooksFile) =>
    (file as { hooksConfig?: { enabled?: unknown } }).hooksConfig?.enabled === false
      ? 'hooksConfig.enabled is false there: Gemini CLI runs no hooks'
      : undefined,
});
