import type { z } from 'zod';

// The contract a sensor's installer fulfils: `vigil install <agent>` and
// `vigil uninstall <agent>` are built from a list of these (builtins.ts), so a new
// agent's sensor brings its installer and the CLI does not change. Each installer
// owns where its agent loads things from and what it writes there.

export interface InstallContext {
  env: NodeJS.ProcessEnv;
  /** The user's home directory (the default for config locations). */
  home: string;
}

export interface InstallResult {
  /** What happened: written afresh, replaced an older one, already the same, removed, nothing there. */
  action: 'installed' | 'replaced' | 'unchanged' | 'removed' | 'absent';
  /** The file or directory the agent loads. */
  path: string;
  /** What is there now (or was, for a removal), e.g. `vigil-opencode/0.1.0+7a3101ee`. */
  version?: string;
  /** What was there before a replacement. */
  previous?: string;
  /** What to do next (restart the agent, set an env var). */
  notes?: string[];
}

export interface InstallStatus {
  wired: boolean;
  /** Where it looked. */
  path: string;
  version?: string;
  /** How it reports: e.g. `http hooks`, `command hooks (curl)`, `plugin`. */
  via?: string;
  /** Where its hooks post (a local endpoint), when they post anywhere. */
  endpoint?: string;
  /** Whether that endpoint answers now: `answers`, or what is wrong. */
  reachable?: string;
  /** Wired, but the agent will not run it, and why (e.g. hooks the agent does not trust). */
  problem?: string;
}

/** One command-line flag of an installer: `--<name> [<value>]`, its key in the options being `name` with `_`. */
export interface InstallerFlag {
  name: string;
  /** The value's placeholder (`dir`); absent for a switch. */
  value?: string;
  description: string;
}

export interface AgentInstaller<O = Record<string, unknown>> {
  /** The agent as typed on the command line: `vigil install opencode`. */
  readonly agent: string;
  /** One line for `vigil install --help`. */
  readonly summary: string;
  readonly flags: readonly InstallerFlag[];
  /** Strict: the parsed flags are validated here, and a bad one is named. */
  readonly options: z.ZodType<O>;
  /** Idempotent: a second run with the same package changes nothing. */
  install(o: O, ctx: InstallContext): Promise<InstallResult>;
  /** Removes only what it installed; idempotent. */
  uninstall(o: O, ctx: InstallContext): Promise<InstallResult>;
  /** Whether its sensor is wired where `install` with these options puts it (`vigil status`). */
  status?(o: O, ctx: InstallContext): Promise<InstallStatus>;
}
