import { chmodSync, existsSync, mkdirSync, readFileSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { z } from 'zod';

// The hooks file the hook agents share the shape of (Claude Code and Gemini CLI
// settings.json, Codex hooks.json): `{ "hooks": { "<Event>": [ { "matcher"?, "hooks":
// [ { "type": "command" | "http", ... } ] } ] } }`. Merging puts Vigil's entries after
// the user's own on each event, removing takes out exactly them (and what became empty
// because of it), every other key keeping its place.

export const HookEntry = z.looseObject({
  type: z.string().optional(),
  command: z.string().optional(),
  url: z.string().optional(),
});
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

export type HookEntry = z.output<typeof HookEntry>;

/** The file without the hooks `mine` picks; groups and events left empty by that are dropped too. */
export function withoutHooks(s: HooksFile, mine: (h: HookEntry) => boolean): HooksFile {
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
export function withHooks(s: HooksFile, mine: (h: HookEntry) => boolean, groups: Record<string, HookGroup>): HooksFile {
  const base = withoutHooks(s, mine);
  const hooks = { ...(base.hooks ?? {}) };
  for (const [e, g] of Object.entries(groups)) hooks[e] = [...(hooks[e] ?? []), g];
  return 'hooks' in base
    ? (Object.fromEntries(Object.entries(base).map(([k, v]) => [k, k === 'hooks' ? hooks : v])) as HooksFile)
    : { ...base, hooks };
}

export const serialise = (s: unknown): string => `${JSON.stringify(s, null, 2)}\n`;

/** A file's permission bits, or undefined when it does not exist. */
export function modeOf(path: string): number | undefined {
  try {
    return statSync(path).mode & 0o777;
  } catch {
    return undefined;
  }
}

/**
 * Writes `text` to `path` through a temporary file and a rename (never half a file).
 * The file keeps its permission bits, or gets `mode` when given.
 */
export function writeAtomic(path: string, text: string, mode?: number): void {
  mkdirSync(dirname(path), { recursive: true });
  const keep = mode ?? modeOf(path);
  const tmp = join(dirname(path), `.${process.pid}.${Date.now()}.tmp`);
  writeFileSync(tmp, text, keep === undefined ? {} : { mode: 0o600 });
  if (keep !== undefined) chmodSync(tmp, keep);
  renameSync(tmp, path);
}

/** Whether a file exists and its text (undefined when it does not). */
export const readText = (p: string): string | undefined => (existsSync(p) ? readFileSync(p, 'utf8') : undefined);
