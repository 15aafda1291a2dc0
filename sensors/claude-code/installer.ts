import { join } from 'node:path';
import { commandGroups, hookFileName, hookInstaller, type ScopeOptions, scopeDir } from '../shared/installer.ts';

// `vigil install claude-code`: Vigil's command hooks merged into a Claude Code settings
// file, beside the user's own (docs/claude-code.md):
//   --user (default)   ~/.claude/settings.json
//   --project DIR      DIR/.claude/settings.json
// The hook bundle (one self-contained file, hook/build.mjs) goes beside it, in
// .claude/vigil/. Vigil's entries are the hooks whose command runs that file: install
// replaces them (idempotent), uninstall removes exactly them and what became empty
// because of it, and leaves every other key and hook as it was (sensors/shared/installer.ts).

export const HOOK_FILE = hookFileName('claude-code');
/** The events the bridge reads (bridge.ts). http hooks are not used: they would post raw tool arguments and outputs. */
export const HOOK_EVENTS = [
  'UserPromptSubmit',
  'PreToolUse',
  'PostToolUse',
  'PostToolUseFailure',
  'Stop',
  'SubagentStart',
  'SubagentStop',
] as const;
/** Seconds Claude Code waits for the hook; the bridge itself gives up sooner (fail open). */
const TIMEOUT_S = 10;

export const claudeCodeInstaller = hookInstaller({
  sensor: 'claude-code',
  title: 'Claude Code',
  summary: "Vigil's hooks in a Claude Code settings file, merged with the user's own",
  flags: [
    { name: 'user', description: 'for every project: ~/.claude/settings.json (the default)' },
    { name: 'project', value: 'dir', description: 'for one project: DIR/.claude/settings.json' },
  ],
  notes: ['Claude Code reads its hooks at start: new sessions are watched'],
  where(o: ScopeOptions, ctx) {
    const dir = scopeDir(o, '.claude', join(ctx.home, '.claude'));
    return { file: join(dir, 'settings.json'), hook: join(dir, 'vigil', HOOK_FILE) };
  },
  groups: (hookPath) =>
    commandGroups(HOOK_EVENTS, (e) => ({ command: `node ${JSON.stringify(hookPath)} ${e}`, timeout: TIMEOUT_S })),
});
