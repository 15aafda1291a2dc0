import { createHash } from 'node:crypto';
import { readdirSync, rmSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { z } from 'zod';
import type {
  AgentInstaller,
  InstallContext,
  InstallerFlag,
  InstallResult,
  InstallStatus,
} from '../../core/installer.ts';
import { VERSION } from '../../core/paths.ts';
import { HOOK_KEY_HEADER, hookKey, loadSensorSecret, sensorSecretFile } from '../../core/session-key.ts';
import {
  type HookEntry,
  type HookGroup,
  type HooksFile,
  modeOf,
  readHooksFile,
  readText,
  serialise,
  withHooks,
  withoutHooks,
  writeAtomic,
} from './hooks-file.ts';

// `vigil install <agent>` for the hook agents (Claude Code, Codex CLI, Gemini CLI):
// Vigil's hooks merged into the agent's hooks file after the user's own on each event,
// each one posting its payload to the local hook endpoint (POST <url>/hooks/<sensor>,
// service/routes/hooks.ts) with this user's hook key: Claude Code as `type: "http"`
// hooks, the others as a `curl` command. A second run changes nothing; a run over an
// older install (the command hooks that ran a bundled bridge) replaces it. Uninstall
// puts back the file as it was before the first install, byte for byte, when nobody
// changed it since (install keeps that text in a manifest beside it); otherwise it takes
// out exactly Vigil's entries. What differs per agent is data: the file's place, the
// groups, and for Codex a companion file (its trust entries).

/** Where the local hook endpoint listens unless told: `vigil serve`'s default address. */
export const DEFAULT_ENDPOINT = 'http://127.0.0.1:7411';

const loopbackUrl = z
  .url({ protocol: /^http$/, error: 'an http:// URL' })
  .refine(
    (u) => ['127.0.0.1', 'localhost', '[::1]'].includes(new URL(u).hostname) || /^127\./.test(new URL(u).hostname),
    {
      message: 'the hook endpoint must be on this machine (127.0.0.1, ::1 or localhost): hooks post raw payloads to it',
    },
  );

/** --user (the default) or --project DIR; --url the local endpoint's base URL. */
export const ScopeOptions = z
  .strictObject({
    user: z.boolean().optional(),
    project: z.string().min(1).optional(),
    url: loopbackUrl.optional(),
  })
  .refine((o) => !(o.user && o.project), { message: 'give --user or --project, not both', path: ['project'] });
export type ScopeOptions = z.output<typeof ScopeOptions>;

/** The flags every hook installer takes. */
export const SCOPE_FLAGS = (user: string, project: string): InstallerFlag[] => [
  { name: 'user', description: `for every project: ${user} (the default)` },
  { name: 'project', value: 'dir', description: `for one project: ${project}` },
  {
    name: 'url',
    value: 'url',
    description: `the local hook endpoint (default ${DEFAULT_ENDPOINT}, vigil serve; or vigil relay's address)`,
  },
];

/** Where the hooks post: the full URL, the key, and a file holding the key as a header line (for curl). */
export interface Endpoint {
  url: string;
  key: string;
  keyFile: string;
}

export interface HookInstallerSpec {
  /** The sensor's name: the endpoint's path /hooks/<sensor>, `vigil-<sensor>/<version>`. */
  sensor: string;
  /** The agent's name for people. */
  title: string;
  summary: string;
  flags: readonly InstallerFlag[];
  /** What install prints. */
  notes: readonly string[];
  /** The hooks file for these options. */
  file(o: ScopeOptions, ctx: InstallContext): string;
  /** Vigil's group per event. */
  groups(e: Endpoint): Record<string, HookGroup>;
  /** Whether a hook entry is Vigil's (this install's or an older one's). */
  mine(h: HookEntry): boolean;
  /** The file holds the hook key itself (an http hook's header): readable by the user alone. */
  secretInFile?: boolean;
  /** A file kept in step with the hooks file (Codex's trust entries in config.toml). */
  companion?: {
    path(ctx: InstallContext): string;
    /** Its text with Vigil's part for `merged` (the hooks file as written at `file`). */
    with(text: string, merged: HooksFile, file: string): string;
    /** Its text without Vigil's part. */
    without(text: string): string;
  };
  /** What keeps the installed hooks from running, for `vigil status`. */
  problem?(file: HooksFile, path: string, ctx: InstallContext): string | undefined;
}

/** The bundled bridge file of the installs before the hook endpoint (removed by install and uninstall). */
export const legacyHookFile = (sensor: string): string => `vigil-${sensor}-hook.mjs`;

/** A command hook that ran the bundled bridge of an older install. */
export const legacyHook = (sensor: string) => (h: HookEntry) =>
  typeof h.command === 'string' && h.command.includes(legacyHookFile(sensor));

/** The agent's config folder: DIR/<dot> with --project DIR, else `user`. */
export const scopeDir = (o: ScopeOptions, dot: string, user: string): string =>
  o.project ? join(resolve(o.project), dot) : user;

/** `s` quoted for a POSIX shell. */
export const shq = (s: string): string => `'${s.replace(/'/g, `'\\''`)}'`;

/**
 * The command hook that posts its payload (stdin) to `e` and prints the answer: one
 * `curl`, failing open at once (nothing listening, a refusal, a timeout: no output, exit 0).
 */
export const curlCommand = (e: Endpoint): string =>
  `curl -sf --connect-timeout 1 -m 4 -H @${shq(e.keyFile)} -H Expect: --data-binary @- ${shq(e.url)} 2>/dev/null || true`;

/** Vigil's command hooks for `sensor`: its curl to the endpoint (curlCommand), or an older install's bundled bridge. */
export const curlHookOf =
  (sensor: string) =>
  (h: HookEntry): boolean =>
    (typeof h.command === 'string' && h.command.includes(`/hooks/${sensor}'`) && h.command.includes('hook-key')) ||
    legacyHook(sensor)(h);

/** One group per event holding one hook, `entry(event)` its fields. */
export const groupsOf = (events: readonly string[], entry: (event: string) => HookEntry): Record<string, HookGroup> =>
  Object.fromEntries(events.map((e) => [e, { hooks: [entry(e)] }]));

/** The base URL of the local endpoint: --url, else VIGIL_URL when it is local, else vigil serve's default. */
function baseUrl(o: ScopeOptions, env: NodeJS.ProcessEnv): string {
  const fromEnv = env.VIGIL_URL && loopbackUrl.safeParse(env.VIGIL_URL).success ? env.VIGIL_URL : undefined;
  return (o.url ?? fromEnv ?? DEFAULT_ENDPOINT).replace(/\/+$/, '');
}

/** This user's hook key and its header file (beside the sensor secret, made when absent). */
export function endpointOf(sensor: string, base: string, env: NodeJS.ProcessEnv): Endpoint {
  const secretFile = sensorSecretFile(env);
  const key = hookKey(loadSensorSecret(secretFile, { create: true }));
  const keyFile = join(dirname(secretFile), 'hook-key.header');
  const line = `${HOOK_KEY_HEADER}: ${key}\n`;
  if (readText(keyFile) !== line) writeAtomic(keyFile, line, 0o600);
  return { url: `${base}/hooks/${sensor}`, key, keyFile };
}

/** What install keeps to undo itself: the files' texts before it and after it. */
const Manifest = z.strictObject({
  version: z.string(),
  files: z.array(
    z.strictObject({
      path: z.string(),
      /** The text before the first install; null: the file did not exist. */
      before: z.string().nullable(),
      /** Its permission bits before (install may have narrowed them). */
      mode: z.number().int().nullable(),
      /** sha256 of the text install wrote last. */
      written: z.string(),
    }),
  ),
});
type Manifest = z.output<typeof Manifest>;

const sha = (t: string) => createHash('sha256').update(t).digest('hex');

function readManifest(path: string): Manifest | undefined {
  const t = readText(path);
  if (t === undefined) return undefined;
  try {
    const r = Manifest.safeParse(JSON.parse(t));
    return r.success ? r.data : undefined;
  } catch {
    return undefined;
  }
}

/** Removes `dir` when nothing is left in it. */
function dropIfEmpty(dir: string): void {
  try {
    if (readdirSync(dir).length === 0) rmSync(dir, { recursive: true });
  } catch {
    // gone already
  }
}

/**
 * Whether the hook endpoint at `url` answers this user's hooks: an empty call with the
 * key (no opinion is its answer), 1 s at most.
 */
async function probe(url: string, env: NodeJS.ProcessEnv): Promise<string> {
  let key: string;
  try {
    key = hookKey(loadSensorSecret(sensorSecretFile(env), { create: false }));
  } catch {
    return `no sensor secret at ${sensorSecretFile(env)}: run vigil install again`;
  }
  try {
    const r = await fetch(url, {
      method: 'POST',
      headers: { [HOOK_KEY_HEADER]: key },
      body: '{}',
      signal: AbortSignal.timeout(1_000),
    });
    await r.body?.cancel();
    if (r.ok) return 'answers';
    if (r.status === 401)
      return "answers, but refuses this user's hook key (another user's service, or an older key: run vigil install again)";
    return `answers ${r.status} (not a Vigil hook endpoint?)`;
  } catch {
    return 'not answering: the hooks have no opinion until vigil serve (or vigil relay) runs there';
  }
}

export function hookInstaller(spec: HookInstallerSpec): AgentInstaller<ScopeOptions> {
  const mine = (h: HookEntry) => spec.mine(h) || legacyHook(spec.sensor)(h);
  const tag = `vigil-${spec.sensor}/${VERSION}`;
  const vigilDir = (file: string) => join(dirname(file), 'vigil');
  const manifestOf = (file: string) => join(vigilDir(file), `install-${spec.sensor}.json`);
  const hasMine = (f: HooksFile) => Object.values(f.hooks ?? {}).some((gs) => gs.some((g) => g.hooks?.some(mine)));
  const removeLegacy = (file: string): boolean => {
    const old = join(vigilDir(file), legacyHookFile(spec.sensor));
    if (readText(old) === undefined) return false;
    rmSync(old, { force: true });
    return true;
  };

  return {
    agent: spec.sensor,
    summary: spec.summary,
    flags: spec.flags,
    options: ScopeOptions,

    async install(o, ctx): Promise<InstallResult> {
      const path = spec.file(o, ctx);
      const { file, text: before } = readHooksFile(path);
      const e = endpointOf(spec.sensor, baseUrl(o, ctx.env), ctx.env);
      const merged = withHooks(file, mine, spec.groups(e));
      const next = serialise(merged);
      const side = spec.companion?.path(ctx);
      const sideText = side === undefined ? undefined : readText(side);
      const nextSide = side === undefined ? undefined : spec.companion?.with(sideText ?? '', merged, path);
      const legacy = removeLegacy(path);
      const notes = [...spec.notes, `the hooks post to ${e.url} (vigil serve, or vigil relay)`];
      const mode = spec.secretInFile ? 0o600 : undefined;
      const manifestPath = manifestOf(path);
      const had = readManifest(manifestPath);
      if (next === before && nextSide === sideText && (mode === undefined || modeOf(path) === mode) && had)
        return { action: 'unchanged', path, version: tag, notes };

      // What to put back at uninstall: the text before the first install, kept while
      // nobody changed the file since; else the file as it is, without Vigil's entries.
      const original = (p: string, now: string | undefined, strip: (t: string) => string) => {
        const kept = had?.files.find((f) => f.path === p);
        if (kept && now !== undefined && sha(now) === kept.written) return { before: kept.before, mode: kept.mode };
        if (now === undefined) return { before: null, mode: null };
        return { before: strip(now), mode: modeOf(p) ?? null };
      };
      const files: Manifest['files'] = [
        {
          path,
          ...original(path, before, (t) => (hasMine(file) ? serialise(withoutHooks(file, mine)) : t)),
          written: sha(next),
        },
      ];
      if (side !== undefined && nextSide !== undefined)
        files.push({
          path: side,
          ...original(side, sideText, (t) => spec.companion?.without(t) ?? t),
          written: sha(nextSide),
        });
      writeAtomic(manifestPath, serialise({ version: VERSION, files } satisfies Manifest), 0o600);
      if (next !== before || mode !== undefined) writeAtomic(path, next, mode);
      if (side !== undefined && nextSide !== undefined && nextSide !== sideText) writeAtomic(side, nextSide);
      const replaced = legacy || hasMine(file);
      return {
        action: replaced ? 'replaced' : 'installed',
        path,
        version: tag,
        ...(replaced
          ? { previous: had ? `vigil-${spec.sensor}/${had.version}` : 'command hooks running a bundled bridge' }
          : {}),
        notes,
      };
    },

    async uninstall(o, ctx): Promise<InstallResult> {
      const path = spec.file(o, ctx);
      const manifestPath = manifestOf(path);
      const m = readManifest(manifestPath);
      const legacy = removeLegacy(path);
      let changed = legacy;
      const restore = (p: string, now: string | undefined, strip: (t: string) => string) => {
        const kept = m?.files.find((f) => f.path === p);
        if (kept && now !== undefined && sha(now) === kept.written) {
          if (kept.before === null) rmSync(p, { force: true });
          else writeAtomic(p, kept.before, kept.mode ?? undefined);
          return true;
        }
        if (now === undefined) return false;
        const next = strip(now);
        if (next === now) return false;
        writeAtomic(p, next);
        return true;
      };
      const { file, text } = readHooksFile(path);
      changed = restore(path, text, () => serialise(withoutHooks(file, mine))) || changed;
      const side = spec.companion?.path(ctx);
      if (side !== undefined)
        changed = restore(side, readText(side), (t) => spec.companion?.without(t) ?? t) || changed;
      if (m) {
        rmSync(manifestPath, { force: true });
        changed = true;
      }
      dropIfEmpty(vigilDir(path));
      if (!changed) return { action: 'absent', path };
      return { action: 'removed', path, version: m ? `vigil-${spec.sensor}/${m.version}` : tag };
    },

    async status(o, ctx): Promise<InstallStatus> {
      const path = spec.file(o, ctx);
      const { file } = readHooksFile(path);
      const hooks = Object.values(file.hooks ?? {}).flatMap((gs) => gs.flatMap((g) => g.hooks ?? []));
      const legacy = hooks.some(legacyHook(spec.sensor));
      const ours = hooks.filter(spec.mine);
      const m = readManifest(manifestOf(path));
      const problem =
        (legacy
          ? `the older command hooks are installed (a node process per call): run vigil install ${spec.sensor} again`
          : undefined) ?? spec.problem?.(file, path, ctx);
      const url = ours.map((h) => h.url ?? /'(http[^']+)'\s+2>/.exec(h.command ?? '')?.[1]).find(Boolean);
      const via = ours.some((h) => h.type === 'http')
        ? 'http hooks'
        : ours.length
          ? 'command hooks (curl)'
          : legacy
            ? 'command hooks (a node bridge per call, older)'
            : undefined;
      const reachable = url ? await probe(url, ctx.env) : undefined;
      return {
        wired: ours.length > 0 || legacy,
        path,
        ...(reachable ? { reachable } : {}),
        ...(m ? { version: `vigil-${spec.sensor}/${m.version}` } : {}),
        ...(via ? { via } : {}),
        ...(url ? { endpoint: url } : {}),
        ...(problem ? { problem } : {}),
      };
    },
  };
}
