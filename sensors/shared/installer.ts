import { existsSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { z } from 'zod';
import type {
  AgentInstaller,
  InstallContext,
  InstallerFlag,
  InstallResult,
  InstallStatus,
} from '../../core/installer.ts';
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
} from './hooks-file.ts';

// `vigil install <agent>` for the command-hook agents (Claude Code, Codex CLI, Gemini
// CLI): the bundled bridge written beside the agent's hooks file, Vigil's groups merged
// into it after the user's own on each event (hooks-file.ts), a second run unchanged,
// uninstall taking out exactly what install put in. What differs per agent is data:
// the file's place, the groups, and for Codex a companion file (its trust entries).

/** --user (the default) or --project DIR. */
export const ScopeOptions = z
  .strictObject({
    user: z.boolean().optional(),
    project: z.string().min(1).optional(),
  })
  .refine((o) => !(o.user && o.project), { message: 'give --user or --project, not both', path: ['project'] });
export type ScopeOptions = z.output<typeof ScopeOptions>;

export interface HookInstallerSpec {
  /** The sensor's name: `vigil-<sensor>-hook.mjs`, `vigil-<sensor>/<version>`. */
  sensor: string;
  /** The agent's name for people. */
  title: string;
  summary: string;
  flags: readonly InstallerFlag[];
  /** What install prints (where the hooks report is added). */
  notes: readonly string[];
  /** The hooks file and the bundle's path for these options. */
  where(o: ScopeOptions, ctx: InstallContext): { file: string; hook: string };
  /** Vigil's group per event, each running the bundle at `hookPath`. */
  groups(hookPath: string): Record<string, HookGroup>;
  /** A file kept in step with the hooks file (Codex's trust entries in config.toml). */
  companion?: {
    path(ctx: InstallContext): string;
    /** Its text with Vigil's part for `merged` (the hooks file as written at `file`). */
    with(text: string, merged: HooksFile, file: string): string;
    /** Its text without Vigil's part. */
    without(text: string): string;
  };
  /** What keeps the installed hooks from running, for `vigil status`. */
  problem?(file: HooksFile, where: { file: string; hook: string }, ctx: InstallContext): string | undefined;
}

export const hookFileName = (sensor: string): string => `vigil-${sensor}-hook.mjs`;

/** One group per event holding one command hook, `entry(event)` its command and the rest. */
export const commandGroups = (
  events: readonly string[],
  entry: (event: string) => { command: string } & Record<string, unknown>,
): Record<string, HookGroup> =>
  Object.fromEntries(events.map((e) => [e, { hooks: [{ type: 'command', ...entry(e) }] }]));

/** The agent's config folder: DIR/<dot> with --project DIR, else `user`. */
export const scopeDir = (o: ScopeOptions, dot: string, user: string): string =>
  o.project ? join(resolve(o.project), dot) : user;

const REPORTS_TO =
  'the hooks report to VIGIL_URL (default http://127.0.0.1:7411, vigil serve); VIGIL_INGEST_TOKEN when the service has one';

const readText = (p: string) => (existsSync(p) ? readFileSync(p, 'utf8') : undefined);

export function hookInstaller(spec: HookInstallerSpec): AgentInstaller<ScopeOptions> {
  const mine = ownedBy(hookFileName(spec.sensor));
  const tag = (v: string) => `vigil-${spec.sensor}/${v}`;
  const versionOf = (code: string | undefined) => (code === undefined ? undefined : bundleVersion(spec.sensor, code));

  return {
    agent: spec.sensor,
    summary: spec.summary,
    flags: spec.flags,
    options: ScopeOptions,

    async install(o, ctx): Promise<InstallResult> {
      const where = spec.where(o, ctx);
      const { file, text: before } = readHooksFile(where.file);
      const code = await hookBundle(spec.sensor);
      const version = versionOf(code);
      if (!version) throw new Error(`the ${spec.title} hook bundle has no version banner`);
      const oldCode = readText(where.hook);
      const merged = withHooks(file, mine, spec.groups(where.hook));
      const next = serialise(merged);
      const side = spec.companion?.path(ctx);
      const sideText = side === undefined ? undefined : (readText(side) ?? '');
      const nextSide = side === undefined ? undefined : spec.companion?.with(sideText ?? '', merged, where.file);
      const had = JSON.stringify(withoutHooks(file, mine)) !== JSON.stringify(file);
      const notes = [...spec.notes, REPORTS_TO];
      if (next === before && oldCode === code && nextSide === sideText)
        return { action: 'unchanged', path: where.file, version: tag(version), notes };
      if (oldCode !== code) writeAtomic(where.hook, code);
      if (next !== before) writeAtomic(where.file, next);
      if (side !== undefined && nextSide !== undefined && nextSide !== sideText) writeAtomic(side, nextSide);
      const previous = versionOf(oldCode);
      return {
        action: had || oldCode !== undefined ? 'replaced' : 'installed',
        path: where.file,
        version: tag(version),
        ...(previous && oldCode !== code ? { previous: tag(previous) } : {}),
        notes,
      };
    },

    async uninstall(o, ctx): Promise<InstallResult> {
      const where = spec.where(o, ctx);
      const oldCode = readText(where.hook);
      const version = versionOf(oldCode);
      if (oldCode !== undefined) {
        rmSync(where.hook, { force: true });
        // its directory too, when nothing else is in it
        if (readdirSync(dirname(where.hook)).length === 0) rmSync(dirname(where.hook), { recursive: true });
      }
      const { file, text } = readHooksFile(where.file);
      const next = withoutHooks(file, mine);
      const changed = text !== undefined && JSON.stringify(next) !== JSON.stringify(file);
      if (changed) writeAtomic(where.file, serialise(next));
      const side = spec.companion?.path(ctx);
      const sideText = side === undefined ? undefined : readText(side);
      const sideNext = sideText === undefined ? undefined : spec.companion?.without(sideText);
      const sideChanged = side !== undefined && sideNext !== undefined && sideNext !== sideText;
      if (sideChanged) writeAtomic(side, sideNext);
      if (!changed && !sideChanged && oldCode === undefined) return { action: 'absent', path: where.file };
      return { action: 'removed', path: where.file, ...(version ? { version: tag(version) } : {}) };
    },

    async status(o, ctx): Promise<InstallStatus> {
      const where = spec.where(o, ctx);
      const { file } = readHooksFile(where.file);
      const version = versionOf(readText(where.hook));
      const wired = Object.values(file.hooks ?? {}).some((gs) => gs.some((g) => g.hooks?.some(mine)));
      const problem = spec.problem?.(file, where, ctx);
      return {
        wired: wired && version !== undefined,
        path: where.file,
        ...(version ? { version: tag(version) } : {}),
        ...(problem ? { problem } : {}),
      };
    },
  };
}
