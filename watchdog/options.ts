import { homedir } from 'node:os';
import { join, resolve } from 'node:path';
import { z } from 'zod';
import { duration } from '../core/duration.ts';
import { stateDir, xdgDir } from '../core/paths.ts';

// The `watchdog` config section. Path defaults are null here and resolved at run time
// (XDG_STATE_HOME / XDG_DATA_HOME of the tick's environment), so config/default.yaml
// can equal the schema defaults on every machine.

const path = () => z.string().min(1).max(4096).nullable().default(null);
const httpUrl = () => z.url({ protocol: /^https?$/ });

/** `local_compute`: the master switch for local inference (the watchdog's second opinion). */
export const LocalComputeSchema = z.strictObject({
  enabled: z.boolean().default(false),
});

export const WatchdogSchema = z.strictObject({
  /** Off: `vigil watchdog tick` exits at once without reading anything. */
  enabled: z.boolean().default(true),
  /** The timer's period (deploy/systemd/vigil-watchdog.timer); also "active since" when there is no state file. */
  interval: duration().prefault('5m'),
  /** Ask the local model for a second opinion on flagged sessions (also needs local_compute.enabled). */
  local_llm_enabled: z.boolean().default(true),
  /** Ollama model name for the second opinion. */
  model: z.string().min(1).max(200).default('qwen2.5-coder:14b'),
  ollama_url: httpUrl().default('http://127.0.0.1:11434'),
  /** Extra read-only agents, merged with progress.read_only_agents (null: that list alone). */
  read_only_agents: z.array(z.string().min(1).max(64)).max(100).nullable().default(null),
  /** opencode servers to probe, besides the ones rc-servers.json lists. */
  servers: z.array(httpUrl()).max(32).default(['http://127.0.0.1:4096']),
  /** The Vigil service that receives verdicts and heartbeats. */
  service_url: httpUrl().default('http://127.0.0.1:7411'),
  /** GET /global/health per server; no answer within this = not running. */
  probe_timeout: duration().prefault('2s'),
  /** Every other request to opencode or the service. */
  request_timeout: duration().prefault('10s'),
  /** One local-model call; on timeout the verdict goes out without a second opinion. */
  opinion_timeout: duration().prefault('60s'),
  /** Sessions judged per tick (most recently updated first, their children included). */
  max_sessions: z.number().int().min(1).max(1_000).default(50),
  /** Local-model calls per tick. */
  max_opinions: z.number().int().min(0).max(100).default(5),
  /** null: $XDG_STATE_HOME/vigil/watchdog.json (~/.local/state/vigil/watchdog.json). */
  state_file: path(),
  /** null: $XDG_STATE_HOME/vigil/watchdog.lock. */
  lock_file: path(),
  /** null: $XDG_DATA_HOME/opencode/opencode.db (~/.local/share/opencode/opencode.db). */
  opencode_db: path(),
  /** null: $XDG_DATA_HOME/opencode/rc-servers.json (written by a third-party plugin). */
  rc_servers_file: path(),
  /** Also judge other agents' transcripts on disk (transcripts.ts): no hook needed. */
  transcripts: z.boolean().default(true),
  /** Transcript files read per tick, most recently modified first. */
  transcript_max_files: z.number().int().min(1).max(1_000).default(20),
  /** Bytes read per transcript file: a bigger file gives its first line and its tail. */
  transcript_max_bytes: z.number().int().min(4_096).max(268_435_456).default(4_000_000),
  /** null: $CLAUDE_CONFIG_DIR/projects, else ~/.claude/projects. */
  claude_projects_dir: path(),
  /** null: $CODEX_HOME/sessions, else ~/.codex/sessions. */
  codex_sessions_dir: path(),
  /** null: ~/.gemini/tmp. */
  gemini_tmp_dir: path(),
});
export type WatchdogOptions = z.output<typeof WatchdogSchema>;

export interface WatchdogPaths {
  state: string;
  lock: string;
  db: string;
  rcServers: string;
  /** Transcript folders of the agents the watchdog reads without hooks. */
  claudeProjects: string;
  codexSessions: string;
  geminiTmp: string;
}

function expand(p: string, home: string): string {
  return resolve(p === '~' ? home : p.startsWith('~/') ? join(home, p.slice(2)) : p);
}

/** The files and folders, from config or the XDG defaults of `env` (absolute XDG paths only, per the spec). */
export function resolvePaths(o: WatchdogOptions, env: NodeJS.ProcessEnv): WatchdogPaths {
  const home = env.HOME || homedir();
  const state = stateDir(env);
  const data = join(xdgDir(env, 'XDG_DATA_HOME', '.local/share'), 'opencode');
  return {
    state: o.state_file ? expand(o.state_file, home) : join(state, 'watchdog.json'),
    lock: o.lock_file ? expand(o.lock_file, home) : join(state, 'watchdog.lock'),
    db: o.opencode_db ? expand(o.opencode_db, home) : join(data, 'opencode.db'),
    rcServers: o.rc_servers_file ? expand(o.rc_servers_file, home) : join(data, 'rc-servers.json'),
    claudeProjects: o.claude_projects_dir
      ? expand(o.claude_projects_dir, home)
      : join(env.CLAUDE_CONFIG_DIR ? expand(env.CLAUDE_CONFIG_DIR, home) : join(home, '.claude'), 'projects'),
    codexSessions: o.codex_sessions_dir
      ? expand(o.codex_sessions_dir, home)
      : join(env.CODEX_HOME ? expand(env.CODEX_HOME, home) : join(home, '.codex'), 'sessions'),
    geminiTmp: o.gemini_tmp_dir ? expand(o.gemini_tmp_dir, home) : join(home, '.gemini', 'tmp'),
  };
}
