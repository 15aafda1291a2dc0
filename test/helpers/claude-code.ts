import { join } from 'node:path';
import { claudeCodeInstaller } from '../../sensors/claude-code/installer.ts';
import { filesUnder, installCtx, labBase, needsAgent, runCli } from './agent-e2e.ts';
import { AGENTS, agentBin } from './agents.ts';

// The real Claude Code CLI, offline: `claude -p` in a throwaway git project with an
// isolated HOME, against the scripted fake Anthropic API (test/fixtures/claude-code/
// fake-anthropic.mjs; its header documents the script format), with Vigil's hooks
// installed by `vigil install claude-code` into that HOME. The shared lab parts:
// agent-e2e.ts.

export const CC_VERSION = AGENTS.claudeCode.version;

export const needsClaudeCode = (suite: string): string | undefined =>
  needsAgent(suite, AGENTS.claudeCode, 'Claude Code');

export interface ClaudeRun {
  exit: number | null;
  /** stream-json lines */
  stream: Record<string, any>[];
  result: Record<string, any> | undefined;
  sessionId: string | undefined;
  stderr: string;
  ms: number;
}

export interface ClaudeLab {
  dir: string;
  project: string;
  home: string;
  /** One line per model request the fake served (headers redacted, `tail` = what is new since the last answer). */
  requests(): Record<string, any>[];
  /** Every tool_result text the model was sent (newest request wins per tool_use_id). */
  toolResults(): { id: string; text: string; is_error: boolean }[];
  run(prompt: string, o?: { resume?: string; env?: Record<string, string>; timeoutMs?: number }): Promise<ClaudeRun>;
  /** The transcripts under HOME (main and subagents). */
  transcripts(): string[];
  stop(): Promise<void>;
}

/** A lab: the project, HOME with the hooks installed (unless `install: false`), the fake API running `script`. */
export async function claudeLab(o: { script: unknown; vigilUrl: string; install?: boolean }): Promise<ClaudeLab> {
  const bin = agentBin(AGENTS.claudeCode);
  if (!bin) throw new Error('Claude Code is not installed');
  const lab = await labBase({
    prefix: 'vigil-cc-',
    fixture: 'claude-code/fake-anthropic.mjs',
    script: o.script,
    fakeArgs: ['--log-bodies', '1'],
  });
  if (o.install !== false) await claudeCodeInstaller.install({ url: o.vigilUrl }, installCtx(lab.home));
  const { dir, requests } = lab;

  return {
    dir,
    project: lab.project,
    home: lab.home,
    requests,
    stop: lab.stop,
    toolResults() {
      const out = new Map<string, { id: string; text: string; is_error: boolean }>();
      for (const r of requests()) {
        for (const m of r.tail ?? []) {
          for (const c of Array.isArray(m.content) ? m.content : []) {
            if (c?.type !== 'tool_result') continue;
            const text = typeof c.content === 'string' ? c.content : JSON.stringify(c.content);
            out.set(c.tool_use_id, { id: c.tool_use_id, text, is_error: c.is_error === true });
          }
        }
      }
      return [...out.values()];
    },
    transcripts: () => filesUnder(join(lab.home, '.claude', 'projects'), /\.jsonl$/),
    async run(prompt, ro = {}) {
      const env = {
        ...lab.env(o.vigilUrl),
        SHELL: '/bin/sh',
        XDG_CONFIG_HOME: join(dir, 'xdg', 'config'),
        XDG_CACHE_HOME: join(dir, 'xdg', 'cache'),
        XDG_DATA_HOME: join(dir, 'xdg', 'data'),
        XDG_STATE_HOME: join(dir, 'xdg', 'state'),
        ANTHROPIC_BASE_URL: `http://127.0.0.1:${lab.port}`,
        ANTHROPIC_API_KEY: 'fake',
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
        DISABLE_AUTOUPDATER: '1',
        DISABLE_TELEMETRY: '1',
        DISABLE_ERROR_REPORTING: '1',
        // bypassPermissions refuses to run as root without it
        ...(process.getuid?.() === 0 ? { IS_SANDBOX: '1' } : {}),
        ...(ro.env ?? {}),
      };
      const args = [
        '-p',
        prompt,
        '--output-format',
        'stream-json',
        '--verbose',
        '--permission-mode',
        'bypassPermissions',
        ...(ro.resume ? ['--resume', ro.resume] : []),
      ];
      const r = await runCli(bin, args, { cwd: lab.project, env, timeoutMs: ro.timeoutMs ?? 180_000 });
      const result = r.lines.filter((l) => l.type === 'result').pop();
      const init = r.lines.find((l) => l.type === 'system' && l.subtype === 'init');
      return {
        exit: r.exit,
        stream: r.lines,
        result,
        sessionId: init?.session_id ?? result?.session_id,
        stderr: r.stderr,
        ms: r.ms,
      };
    },
  };
}
