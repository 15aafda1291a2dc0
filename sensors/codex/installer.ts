import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import type { InstallContext } from '../../core/installer.ts';
import type { HookEntry, HooksFile } from '../shared/hooks-file.ts';
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

// `vigil install codex`: Vigil's command hooks merged into a Codex hooks.json, beside
// the user's own (docs/codex.md):
//   --user (default)   $CODEX_HOME/hooks.json (CODEX_HOME defaults to ~/.codex)
//   --project DIR      DIR/.codex/hooks.json
// Each is one `curl` that posts the payload to the local hook endpoint
// (<url>/hooks/codex) and prints the answer, failing open at once when nothing
// listens. Only the hooks Vigil acts from hold Codex (UserPromptSubmit, PreToolUse,
// Stop); SubagentStop only reports, so it runs `async` (Codex 0.169 does not wait for
// it). The calls themselves are read from the rollout (bridge.ts): no PostToolUse hook.
// Codex skips hooks it does not
// trust, silently; so install also writes their trust into $CODEX_HOME/config.toml, in
// a block of its own that uninstall removes. A trust entry is keyed by the hooks file,
// the event and the hook's position in it, and holds a hash of the hook's definition:
// the user's adding a hook group before Vigil's moves it and voids its trust, which
// `vigil status` reports (install again to renew it).

/** The events the bridge reads (bridge.ts). */
export const HOOK_EVENTS = ['UserPromptSubmit', 'PreToolUse', 'Stop', 'SubagentStop'] as const;
/** Events whose answer Vigil never uses: Codex runs them without waiting. */
const OBSERVE_ONLY = new Set<string>(['SubagentStop']);
/** Seconds Codex waits for the hook; curl gives up sooner (4 s, fail open). */
const TIMEOUT_S = 5;
const BEGIN = '# vigil-codex: trust for Vigil hooks (vigil uninstall codex removes this block)';
const END = '# vigil-codex: end';

const codexHome = (ctx: InstallContext) => resolve(ctx.env.CODEX_HOME || join(ctx.home, '.codex'));

const configToml = (ctx: InstallContext) => join(codexHome(ctx), 'config.toml');

const mine = curlHookOf(SENSOR_NAME);

const snake = (s: string) => s.replace(/([a-z])([A-Z])/g, '$1_$2').toLowerCase();

/** JSON with sorted keys and no spaces: what Codex hashes a hook definition over. */
function canonical(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonical).join(',')}]`;
  if (v && typeof v === 'object') {
    const o = v as Record<string, unknown>;
    return `{${Object.keys(o)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonical(o[k])}`)
      .join(',')}}`;
  }
  return JSON.stringify(v);
}

/**
 * Codex 0.169's trust entries for Vigil's hooks in `s` (written at `path`): the key
 * `<hooks file>:<event in snake_case>:<group index>:<hook index>` and
 * `sha256:<hex>` over the canonical JSON of the event name, the hook (async, command,
 * timeout, type) and the group's matcher when it has one.
 */
export function trustEntries(
  s: HooksFile,
  path: string,
  pick: (h: HookEntry) => boolean = mine,
): { key: string; hash: string }[] {
  const out: { key: string; hash: string }[] = [];
  for (const [event, groups] of Object.entries(s.hooks ?? {})) {
    groups.forEach((g, gi) => {
      (g.hooks ?? []).forEach((h, hi) => {
        if (!pick(h)) return;
        const x = h as { async?: unknown; timeout?: unknown };
        const id: Record<string, unknown> = {
          event_name: snake(event),
          hooks: [{ async: x.async ?? false, command: h.command, timeout: x.timeout ?? 600, type: 'command' }],
        };
        if (g.matcher !== undefined) id.matcher = g.matcher;
        out.push({
          key: `${path}:${snake(event)}:${gi}:${hi}`,
          hash: `sha256:${createHash('sha256').update(canonical(id)).digest('hex')}`,
        });
      });
    });
  }
  return out;
}

const BLOCK = new RegExp(`\\n?${BEGIN.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}\\n[\\s\\S]*?${END}\\n?`);

/** config.toml without Vigil's trust block. */
export const withoutTrust = (toml: string): string => toml.replace(BLOCK, '');

const tomlKey = (k: string) => JSON.stringify(k);

/** The trusted hashes config.toml holds, by key (only `[hooks.state."<key>"]` tables are read). */
export function trustedHashes(toml: string): Map<string, string> {
  const out = new Map<string, string>();
  const re = /^\[hooks\.state\.("(?:[^"\\]|\\.)*")\][ \t]*\r?\n((?:(?!\[)[^\n]*\n?)*)/gm;
  for (let m = re.exec(toml); m !== null; m = re.exec(toml)) {
    let key: string;
    try {
      key = JSON.parse(m[1]);
    } catch {
      continue;
    }
    const h = /^trusted_hash\s*=\s*"([^"]*)"/m.exec(m[2]);
    if (h) out.set(key, h[1]);
  }
  return out;
}

/** config.toml with Vigil's trust block (renewed); keys the user's own tables already hold are left to them. */
export function withTrust(toml: string, entries: readonly { key: string; hash: string }[]): string {
  const base = withoutTrust(toml);
  const theirs = trustedHashes(base);
  const lines = entries
    .filter((e) => !theirs.has(e.key))
    .map((e) => `[hooks.state.${tomlKey(e.key)}]\ntrusted_hash = "${e.hash}"\n`);
  if (!lines.length) return base;
  const sep = base === '' ? '' : base.endsWith('\n') ? '\n' : '\n\n';
  return `${base}${sep}${BEGIN}\n${lines.join('')}${END}\n`;
}

const readText = (p: string) => (existsSync(p) ? readFileSync(p, 'utf8') : undefined);

export const codexInstaller = hookInstaller({
  sensor: SENSOR_NAME,
  title: 'Codex',
  summary: "Vigil's hooks in a Codex hooks.json, merged with the user's own and trusted in config.toml",
  flags: SCOPE_FLAGS('$CODEX_HOME/hooks.json (default ~/.codex)', 'DIR/.codex/hooks.json'),
  notes: [
    'Codex reads its hooks at start: new sessions are watched',
    'the hooks are trusted in config.toml; adding a hook group before them voids that: run this again (vigil status says so)',
  ],
  file: (o: ScopeOptions, ctx) => join(scopeDir(o, '.codex', codexHome(ctx)), 'hooks.json'),
  groups: (e) =>
    groupsOf(HOOK_EVENTS, (ev) => ({
      type: 'command',
      command: curlCommand(e),
      timeout: TIMEOUT_S,
      ...(OBSERVE_ONLY.has(ev) ? { async: true } : {}),
    })),
  mine,
  companion: {
    path: configToml,
    with: (toml, merged, file) => withTrust(toml, trustEntries(merged, file)),
    without: withoutTrust,
  },
  problem(file: HooksFile, path, ctx) {
    const entries = trustEntries(file, path);
    const config = configToml(ctx);
    const trusted = trustedHashes(readText(config) ?? '');
    const untrusted = entries.filter((e) => trusted.get(e.key) !== e.hash).length;
    return entries.length && untrusted
      ? `${untrusted} of its ${entries.length} hooks are not trusted in ${config}: Codex skips them silently (run vigil install codex again)`
      : undefined;
  },
});
