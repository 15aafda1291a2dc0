import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { z } from 'zod';

// The hooks file the command-hook agents share the shape of (Codex hooks.json, Gemini CLI
// settings.json): `{ "hooks": { "<Event>": [ { "matcher"?, "hooks": [ { "type":
// "command", "command", "timeout" } ] } ] } }`. Vigil's entries are the hooks whose
// command runs its bundled hook file; merging puts them after the user's own on each
// event, removing takes out exactly them (and what became empty because of it), every
// other key keeping its place. Also the bundle itself (sensors/claude-code/hook/build.mjs).

export const HookEntry = z.looseObject({ type: z.string().optional(), command: z.string().optional() });
export const Group = z.looseObject({ matcher: z.string().optional(), hooks: z.array(HookEntry).optional() });
export const HooksFile = z.looseObject({ hooks: z.record(z.string(), z.array(Group)).optional() });
export type HooksFile = z.output<typeof HooksFile>;
export type HookGroup = z.output<typeof Group>;

/** The file parsed and validated; `{}` when it does not exist. Throws naming the field; changes nothing. */
export function readHooksFile(path: string): { file: HooksFile; text?: string } {
  if (!existsSync(path)) return { file: {} };
  const text = readFileSync(path, 'utf8');
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (e) {
    throw new Error(`${path}: not valid JSON (${(e as Error).message}); fix it first, nothing was changed`);
  }
  const r = HooksFile.safeParse(raw);
  if (!r.success) {
    const i = r.error.issues[0];
    throw new Error(`${path}: ${i.path.join('.') || '(root)'}: ${i.message}; nothing was changed`);
  }
  // validated, but the file's own object: a parse puts the known keys first, and the
  // user's key order is kept
  return { file: raw as HooksFile, text };
}

export const ownedBy = (hookFile: string) => (h: z.output<typeof HookEntry>) =>
  typeof h.command === 'string' && h.command.includes(hookFile);

/** The file without the hooks `mine` picks; groups and events left empty by that are dropped too. */
export function withoutHooks(s: HooksFile, mine: (h: z.output<typeof HookEntry>) => boolean): HooksFile {
  if (!s.hooks) return s;
  const hooks: Record<string, HookGroup[]> = {};
  for (const [event, groups] of Object.entries(s.hooks)) {
    const kept = groups.flatMap((g) => {
      if (!g.hooks?.some(mine)) return [g];
      const rest = g.hooks.filter((h) => !mine(h));
      return rest.length ? [{ ...g, hooks: rest }] : [];
    });
    if (kept.length || !groups.length) hooks[event] = kept;
  }
  const keep = Object.keys(hooks).length > 0 || Object.keys(s.hooks).length === 0;
  return Object.fromEntries(
    Object.entries(s).flatMap(([k, v]) => (k !== 'hooks' ? [[k, v]] : keep ? [[k, hooks]] : [])),
  ) as HooksFile;
}

/** The file with one group per event (after the user's), any older ones of `mine` replaced. */
export function withHooks(
  s: HooksFile,
  mine: (h: z.output<typeof HookEntry>) => boolean,
  groups: Record<string, HookGroup>,
): HooksFile {
  const base = withoutHooks(s, mine);
  const hooks = { ...(base.hooks ?? {}) };
  for (const [e, g] of Object.entries(groups)) hooks[e] = [...(hooks[e] ?? []), g];
  return 'hooks' in base
    ? (Object.fromEntries(Object.entries(base).map(([k, v]) => [k, k === 'hooks' ? hooks : v])) as HooksFile)
    : { ...base, hooks };
}

export const serialise = (s: unknown): string => `${JSON.stringify(s, null, 2)}\n`;

export function writeAtomic(path: string, text: string): void {
  mkdirSync(dirname(path), { recursive: true });
  const tmp = join(dirname(path), `.${process.pid}.${Date.now()}.tmp`);
  writeFileSync(tmp, text);
  renameSync(tmp, path);
}

/** The version in a bundle's banner line (`// vigil-<sensor> <version>: ...`). */
export const bundleVersion = (sensor: string, text: string): string | undefined =>
  new RegExp(`^// vigil-${sensor} (\\S+):`).exec(text.slice(0, 300))?.[1];

/** The hook bundle of `sensor`: the shipped build, else a fresh build of the sources (a clone). */
export async function hookBundle(sensor: string): Promise<string> {
  const shipped = fileURLToPath(new URL(`../${sensor}/hook/vigil-${sensor}-hook.mjs`, import.meta.url));
  if (existsSync(shipped)) return readFileSync(shipped, 'utf8');
  const builder = fileURLToPath(new URL('../claude-code/hook/build.mjs', import.meta.url));
  if (!existsSync(builder)) throw new Error(`the ${sensor} hook bundle is missing (${shipped}): reinstall vigil`);
  const { buildHook } = (await import(pathToFileURL(builder).href)) as {
    buildHook: (o: { sensor: string }) => Promise<{ path: string }>;
  };
  return readFileSync((await buildHook({ sensor })).path, 'utf8');
}
