import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { z } from 'zod';
import type { AgentInstaller, InstallContext, InstallResult } from '../../core/installer.ts';

// `vigil install claude-code`: Vigil's command hooks merged into a Claude Code settings
// file, beside the user's own (docs/claude-code.md):
//   --user (default)   ~/.claude/settings.json
//   --project DIR      DIR/.claude/settings.json
// The hook bundle (one self-contained file, hook/build.mjs) goes beside it, in
// .claude/vigil/. Vigil's entries are the hooks whose command runs that file: install
// replaces them (idempotent), uninstall removes exactly them and what became empty
// because of it, and leaves every other key and hook as it was.

export const HOOK_FILE = 'vigil-claude-code-hook.mjs';
const BANNER = /^\/\/ vigil-claude-code (\S+):/;
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

const Options = z
  .strictObject({
    user: z.boolean().optional(),
    project: z.string().min(1).optional(),
  })
  .refine((o) => !(o.user && o.project), { message: 'give --user or --project, not both', path: ['project'] });
type Options = z.output<typeof Options>;

/** The settings file and the directory of the hook bundle. */
export function locations(o: Options, ctx: InstallContext): { settings: string; hook: string } {
  const dir = o.project ? join(resolve(o.project), '.claude') : join(ctx.home, '.claude');
  return { settings: join(dir, 'settings.json'), hook: join(dir, 'vigil', HOOK_FILE) };
}

const HookEntry = z.looseObject({ type: z.string().optional(), command: z.string().optional() });
const Group = z.looseObject({ hooks: z.array(HookEntry).optional() });
const Settings = z.looseObject({ hooks: z.record(z.string(), z.array(Group)).optional() });
type Settings = z.output<typeof Settings>;

function readSettings(path: string): { settings: Settings; text?: string } {
  if (!existsSync(path)) return { settings: {} };
  const text = readFileSync(path, 'utf8');
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (e) {
    throw new Error(`${path}: not valid JSON (${(e as Error).message}); fix it first, nothing was changed`);
  }
  const r = Settings.safeParse(raw);
  if (!r.success) {
    const i = r.error.issues[0];
    throw new Error(`${path}: ${i.path.join('.') || '(root)'}: ${i.message}; nothing was changed`);
  }
  // Validated, but the user's object as read: zod's output would put `hooks` first.
  return { settings: raw as Settings, text };
}

const isVigil = (h: z.output<typeof HookEntry>) => typeof h.command === 'string' && h.command.includes(HOOK_FILE);

/** The settings without Vigil's hooks; groups and events left empty by that are dropped too. */
export function withoutVigil(s: Settings): Settings {
  if (!s.hooks) return s;
  const hooks: Record<string, z.output<typeof Group>[]> = {};
  for (const [event, groups] of Object.entries(s.hooks)) {
    const kept = groups.flatMap((g) => {
      if (!g.hooks?.some(isVigil)) return [g];
      const rest = g.hooks.filter((h) => !isVigil(h));
      return rest.length ? [{ ...g, hooks: rest }] : [];
    });
    if (kept.length || !groups.length) hooks[event] = kept;
  }
  // Every other key keeps its place, so an uninstall writes back the file it read.
  const keep = Object.keys(hooks).length > 0 || Object.keys(s.hooks).length === 0;
  return Object.fromEntries(
    Object.entries(s).flatMap(([k, v]) => (k !== 'hooks' ? [[k, v]] : keep ? [[k, hooks]] : [])),
  ) as Settings;
}

/** The settings with Vigil's hooks (any older ones replaced), after the user's own on each event. */
export function withVigil(s: Settings, hookPath: string): Settings {
  const base = withoutVigil(s);
  const hooks = { ...(base.hooks ?? {}) };
  for (const e of HOOK_EVENTS) {
    const entry = { type: 'command', command: `node ${JSON.stringify(hookPath)} ${e}`, timeout: TIMEOUT_S };
    hooks[e] = [...(hooks[e] ?? []), { hooks: [entry] }];
  }
  return { ...base, hooks };
}

const serialise = (s: Settings) => `${JSON.stringify(s, null, 2)}\n`;

function writeAtomic(path: string, text: string): void {
  mkdirSync(dirname(path), { recursive: true });
  const tmp = join(dirname(path), `.${process.pid}.${Date.now()}.tmp`);
  writeFileSync(tmp, text);
  renameSync(tmp, path);
}

const versionOf = (text: string) => BANNER.exec(text.slice(0, 300))?.[1];

/** The bundle's text: the shipped build beside this file, else a fresh build of the sources (a clone). */
async function bundle(): Promise<string> {
  const shipped = fileURLToPath(new URL(`./hook/${HOOK_FILE}`, import.meta.url));
  if (existsSync(shipped)) return readFileSync(shipped, 'utf8');
  const builder = join(dirname(fileURLToPath(import.meta.url)), 'hook', 'build.mjs');
  if (!existsSync(builder)) throw new Error(`the Claude Code hook bundle is missing (${shipped}): reinstall vigil`);
  const { buildHook } = (await import(pathToFileURL(builder).href)) as {
    buildHook: (o?: { out?: string }) => Promise<{ path: string }>;
  };
  return readFileSync((await buildHook()).path, 'utf8');
}

const NOTES = [
  'Claude Code reads its hooks at start: new sessions are watched',
  'the hooks report to VIGIL_URL (default http://127.0.0.1:7411, vigil serve); VIGIL_INGEST_TOKEN when the service has one',
];

export const claudeCodeInstaller: AgentInstaller<Options> = {
  agent: 'claude-code',
  summary: "Vigil's hooks in a Claude Code settings file, merged with the user's own",
  flags: [
    { name: 'user', description: 'for every project: ~/.claude/settings.json (the default)' },
    { name: 'project', value: 'dir', description: 'for one project: DIR/.claude/settings.json' },
  ],
  options: Options,

  async install(o, ctx): Promise<InstallResult> {
    const where = locations(o, ctx);
    const { settings, text: before } = readSettings(where.settings);
    const code = await bundle();
    const version = versionOf(code);
    if (!version) throw new Error('the Claude Code hook bundle has no version banner');
    const oldCode = existsSync(where.hook) ? readFileSync(where.hook, 'utf8') : undefined;
    if (oldCode !== code) writeAtomic(where.hook, code);
    const next = serialise(withVigil(settings, where.hook));
    const had = JSON.stringify(withoutVigil(settings)) !== JSON.stringify(settings);
    if (next === before && oldCode === code) {
      return { action: 'unchanged', path: where.settings, version: `vigil-claude-code/${version}`, notes: NOTES };
    }
    if (next !== before) writeAtomic(where.settings, next);
    const previous = oldCode === undefined ? undefined : versionOf(oldCode);
    return {
      action: had || oldCode !== undefined ? 'replaced' : 'installed',
      path: where.settings,
      version: `vigil-claude-code/${version}`,
      ...(previous && oldCode !== code ? { previous: `vigil-claude-code/${previous}` } : {}),
      notes: NOTES,
    };
  },

  async uninstall(o, ctx): Promise<InstallResult> {
    const where = locations(o, ctx);
    const hadHook = existsSync(where.hook);
    const version = hadHook ? versionOf(readFileSync(where.hook, 'utf8')) : undefined;
    if (hadHook) {
      rmSync(where.hook, { force: true });
      // its directory too, when nothing else is in it
      if (readdirSync(dirname(where.hook)).length === 0) rmSync(dirname(where.hook), { recursive: true });
    }
    const { settings, text } = readSettings(where.settings);
    const next = withoutVigil(settings);
    const changed = text !== undefined && JSON.stringify(next) !== JSON.stringify(settings);
    if (changed) writeAtomic(where.settings, serialise(next));
    if (!changed && !hadHook) return { action: 'absent', path: where.settings };
    return {
      action: 'removed',
      path: where.settings,
      ...(version ? { version: `vigil-claude-code/${version}` } : {}),
    };
  },

  async status(o, ctx) {
    const where = locations(o, ctx);
    const { settings } = readSettings(where.settings);
    const wired = Object.values(settings.hooks ?? {}).some((gs) => gs.some((g) => g.hooks?.some(isVigil)));
    const version = existsSync(where.hook) ? versionOf(readFileSync(where.hook, 'utf8')) : undefined;
    return {
      wired: wired && version !== undefined,
      path: where.settings,
      ...(version ? { version: `vigil-claude-code/${version}` } : {}),
    };
  },
};
