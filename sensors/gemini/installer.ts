import { join } from 'node:path';
import type { HooksFile } from '../shared/hooks-file.ts';
import {
  curlCommand,
  curlHookOf,
  groupsOf,
  hookInstaller,
  SCOPE_FLAGS,
  type ScopeOptions,
  scopeDir,
} from '../shared/installer.ts';
import { SENSOR_NAME } from './descriptor.ts';

// `vigil install gemini`: Vigil's command hooks merged into a Gemini CLI settings file,
// beside the user's own hooks and settings (docs/gemini.md):
//   --user (default)   ~/.gemini/settings.json
//   --project DIR      DIR/.gemini/settings.json (Gemini runs project hooks only in a
//                      folder it trusts)
// Each is one `curl` that posts the payload to the local hook endpoint
// (<url>/hooks/gemini) and prints the answer, failing open at once when nothing
// listens (Gemini runs it with bash -c). `hooksConfig.enabled: false` turns every hook
// off; install leaves the user's setting alone and `vigil status` says so.

/** The events the bridge reads (bridge.ts). */
export const HOOK_EVENTS = ['BeforeAgent', 'BeforeTool', 'AfterTool', 'AfterAgent', 'SessionEnd'] as const;
/** Milliseconds Gemini waits for the hook; curl gives up sooner (4 s, fail open). */
const TIMEOUT_MS = 5_000;

const mine = curlHookOf(SENSOR_NAME);

export const geminiInstaller = hookInstaller({
  sensor: SENSOR_NAME,
  title: 'Gemini CLI',
  summary: "Vigil's hooks in a Gemini CLI settings file, merged with the user's own",
  flags: SCOPE_FLAGS('~/.gemini/settings.json', 'DIR/.gemini/settings.json (a folder Gemini trusts)'),
  notes: ['Gemini CLI reads its settings at start: new sessions are watched'],
  file: (o: ScopeOptions, ctx) => join(scopeDir(o, '.gemini', join(ctx.home, '.gemini')), 'settings.json'),
  groups: (e) =>
    groupsOf(HOOK_EVENTS, (ev) => ({
      type: 'command',
      command: curlCommand(e),
      name: `vigil-${ev}`,
      timeout: TIMEOUT_MS,
    })),
  mine,
  problem: (file: HooksFile) =>
    (file as { hooksConfig?: { enabled?: unknown } }).hooksConfig?.enabled === false
      ? 'hooksConfig.enabled is false there: Gemini CLI runs no hooks'
      : undefined,
});
