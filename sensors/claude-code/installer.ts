import { join } from 'node:path';
import { HOOK_KEY_HEADER } from '../../core/session-key.ts';
import { groupsOf, hookInstaller, SCOPE_FLAGS, type ScopeOptions, scopeDir } from '../shared/installer.ts';
import { SENSOR_NAME } from './descriptor.ts';

// `vigil install claude-code`: Vigil's hooks merged into a Claude Code settings file,
// beside the user's own (docs/claude-code.md):
//   --user (default)   ~/.claude/settings.json
//   --project DIR      DIR/.claude/settings.json
// Each is a `type: "http"` hook posting the payload to the local hook endpoint
// (<url>/hooks/claude-code), where it is reduced in memory and dropped: no process
// starts per call. The settings file then holds this user's hook key (a header), so it
// is made readable by the user alone; uninstall puts its mode back. Claude Code fails
// open on an http hook that is refused, answers an error or times out.

/** The events the bridge reads (bridge.ts); all of them take http hooks (SessionStart would not). */
export const HOOK_EVENTS = [
  'UserPromptSubmit',
  'PreToolUse',
  'PostToolUse',
  'PostToolUseFailure',
  'Stop',
  'SubagentStart',
  'SubagentStop',
] as const;
/** Seconds Claude Code waits for the endpoint; the endpoint answers no opinion sooner (3 s). */
const TIMEOUT_S = 5;

export const claudeCodeInstaller = hookInstaller({
  sensor: SENSOR_NAME,
  title: 'Claude Code',
  summary: "Vigil's http hooks in a Claude Code settings file, merged with the user's own",
  flags: SCOPE_FLAGS('~/.claude/settings.json', 'DIR/.claude/settings.json'),
  notes: ['Claude Code reads its hooks at start: new sessions are watched'],
  file(o: ScopeOptions, ctx) {
    return join(scopeDir(o, '.claude', join(ctx.home, '.claude')), 'settings.json');
  },
  groups: (e) =>
    groupsOf(HOOK_EVENTS, () => ({
      type: 'http',
      url: e.url,
      timeout: TIMEOUT_S,
      headers: { [HOOK_KEY_HEADER]: e.key },
    })),
  mine: (h) => h.type === 'http' && typeof h.url === 'string' && h.url.endsWith(`/hooks/${SENSOR_NAME}`),
  secretInFile: true,
});
