import { homedir } from 'node:os';
import { type Command, CommanderError } from 'commander';
import type { AgentInstaller, InstallResult, InstallStatus } from '../core/installer.ts';
import { parseArgs } from './args.ts';

// `vigil install <agent>` and `vigil uninstall <agent>`: one subcommand per installer
// of the list (builtins.ts), its flags declared by the installer and validated by its
// own schema. Nothing here names an agent.

export interface InstallIo {
  out: (s: string) => void;
  err: (s: string) => void;
}

function describe(r: InstallResult): string {
  const v = r.version ? `${r.version} ` : '';
  switch (r.action) {
    case 'installed':
      return `installed ${v}-> ${r.path}`;
    case 'replaced':
      return `installed ${v}-> ${r.path} (replaced ${r.previous ?? 'an older one'})`;
    case 'unchanged':
      return `installed ${v}-> ${r.path} (unchanged)`;
    case 'removed':
      return `removed ${v}from ${r.path}`;
    case 'absent':
      return `nothing to remove: ${r.path} does not exist`;
  }
}

const flagKey = (name: string) => name.replace(/-/g, '_');
/** commander's camelCase attribute of a flag (`--dry-run` -> dryRun). */
const attr = (name: string) => name.replace(/-([a-z])/g, (_, c: string) => c.toUpperCase());

export function installCommands(
  program: Command,
  list: readonly AgentInstaller<any>[],
  io: InstallIo,
  env: NodeJS.ProcessEnv,
): void {
  const agents = list.map((i) => i.agent).join(', ');
  for (const verb of ['install', 'uninstall'] as const) {
    const cmd = program
      .command(verb)
      .description(
        verb === 'install'
          ? `install an agent's sensor where the agent loads it (${agents}); idempotent`
          : `remove what \`vigil install\` put there (${agents}); idempotent`,
      );
    for (const inst of list) {
      const sub = cmd.command(inst.agent).description(inst.summary);
      for (const f of inst.flags) sub.option(`--${f.name}${f.value ? ` <${f.value}>` : ''}`, f.description);
      sub.action(async (raw: Record<string, unknown>) => {
        // commander's camelCase keys back to the installer's option names.
        const opts = Object.fromEntries(
          inst.flags.filter((f) => raw[attr(f.name)] !== undefined).map((f) => [flagKey(f.name), raw[attr(f.name)]]),
        );
        const o = parseArgs(inst.options, opts, `${verb} ${inst.agent}`);
        let r: InstallResult;
        try {
          r = await inst[verb](o, { env, home: env.HOME || homedir() });
        } catch (e) {
          io.err(`vigil ${verb} ${inst.agent}: ${(e as Error).message}\n`);
          throw new CommanderError(1, 'vigil.install', 'install failed');
        }
        io.out(`${describe(r)}\n`);
        for (const n of r.notes ?? []) io.out(`  ${n}\n`);
      });
    }
  }
}

/** A sensor as GET /health lists it. */
export interface SensorLive {
  name: string;
  agent: string;
  last_seen_at: string | null;
  cannot_act: string;
}

/**
 * `vigil status`'s agents: per installer, whether its sensor is wired here (the default
 * location) and, from the service, when that sensor last reported and which of the
 * mode's actions it cannot take itself.
 */
export async function agentsText(
  list: readonly AgentInstaller<any>[],
  live: readonly SensorLive[],
  env: NodeJS.ProcessEnv,
  ago: (iso: string) => string,
): Promise<string> {
  let out = '';
  for (const inst of list) {
    const st: InstallStatus | undefined = await inst
      .status?.({}, { env, home: env.HOME || homedir() })
      .catch((e: Error) => ({ wired: false, path: e.message }));
    const s = live.find((x) => x.name === inst.agent);
    const how = st?.via ? `, ${st.via}` : '';
    const where = st?.endpoint ? `; posts to ${st.endpoint}: ${st.reachable ?? 'not checked'}` : '';
    const wired = st
      ? st.wired
        ? `wired (${st.version ?? '?'}${how}, ${st.path})${st.problem ? ` but ${st.problem}` : ''}${where}`
        : `not wired (${st.path})`
      : 'unknown';
    const seen = s?.last_seen_at ? `live, last report ${ago(s.last_seen_at)} ago` : 'no report yet';
    out += `  ${inst.agent}: ${wired}; ${seen}${s?.cannot_act ? `; cannot: ${s.cannot_act}` : ''}\n`;
  }
  return out;
}
