import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { codexInstaller } from '../../sensors/codex/installer.ts';
import { filesUnder, installCtx, labBase, needsAgent, runCli } from './agent-e2e.ts';
import { AGENTS, agentBin } from './agents.ts';

// The real Codex CLI, offline: `codex exec --json` in a throwaway git project with an
// isolated HOME and CODEX_HOME, whose only model provider is the scripted fake
// Responses API (test/fixtures/codex/fake-responses.mjs; its header documents the
// script format), with Vigil's hooks installed by `vigil install codex` (trusted in
// config.toml: no bypass flag). The shared lab parts: agent-e2e.ts.

export const CODEX_VERSION = AGENTS.codex.version;

export const needsCodex = (suite: string): string | undefined => needsAgent(suite, AGENTS.codex, 'Codex CLI');

export interface CodexRun {
  exit: number | null;
  /** --json lines */
  events: Record<string, any>[];
  threadId: string | undefined;
  stderr: string;
  ms: number;
}

export interface CodexLab {
  dir: string;
  project: string;
  home: string;
  codexHome: string;
  /** One line per model request the fake served (headers, `fresh` = the items Codex added since the last answer). */
  requests(): Record<string, any>[];
  /** Every tool output text the model was sent, by call id. */
  outputs(): { id: string; text: string }[];
  run(prompt: string, o?: { resume?: boolean; env?: Record<string, string>; timeoutMs?: number }): Promise<CodexRun>;
  /** The rollout files under CODEX_HOME/sessions. */
  rollouts(): string[];
  stop(): Promise<void>;
}

export async function codexLab(o: {
  script: unknown;
  vigilUrl: string;
  install?: boolean;
  /** `fake-model`: no bundled metadata, so Codex offers spawn_agent (subagents) and no apply_patch. */
  model?: string;
}): Promise<CodexLab> {
  const bin = agentBin(AGENTS.codex);
  if (!bin) throw new Error('Codex is not installed');
  const lab = await labBase({
    prefix: 'vigil-codex-',
    fixture: 'codex/fake-responses.mjs',
    script: o.script,
    homeDirs: ['.codex'],
  });
  const codexHome = join(lab.home, '.codex');
  writeFileSync(
    join(codexHome, 'config.toml'),
    [
      `model = "${o.model ?? 'gpt-5.5'}"`,
      'model_provider = "fake"',
      'approval_policy = "never"',
      'sandbox_mode = "danger-full-access"',
      'check_for_update_on_startup = false',
      '',
      '[analytics]',
      'enabled = false',
      '',
      '[model_providers.fake]',
      'name = "Fake Responses API"',
      `base_url = "http://127.0.0.1:${lab.port}/v1"`,
      'env_key = "FAKE_API_KEY"',
      'wire_api = "responses"',
      'request_max_retries = 0',
      'stream_max_retries = 0',
      '',
      `[projects.${JSON.stringify(lab.project)}]`,
      'trust_level = "trusted"',
      '',
    ].join('\n'),
  );
  if (o.install !== false)
    await codexInstaller.install({ url: o.vigilUrl }, installCtx(lab.home, { CODEX_HOME: codexHome }));
  const rollouts = () => filesUnder(join(codexHome, 'sessions'), /^rollout-.*\.jsonl$/);

  return {
    dir: lab.dir,
    project: lab.project,
    home: lab.home,
    codexHome,
    requests: lab.requests,
    rollouts,
    stop: lab.stop,
    outputs() {
      const out = new Map<string, { id: string; text: string }>();
      for (const f of rollouts()) {
        for (const l of readFileSync(f, 'utf8').split('\n')) {
          if (!l.includes('_output"')) continue;
          const j = JSON.parse(l);
          const p = j.payload;
          if (j.type === 'response_item' && /function_call_output|custom_tool_call_output/.test(p?.type))
            out.set(p.call_id, { id: p.call_id, text: String(p.output) });
        }
      }
      return [...out.values()];
    },
    async run(prompt, ro = {}) {
      const env = {
        ...lab.env(o.vigilUrl),
        CODEX_HOME: codexHome,
        SHELL: '/bin/bash',
        FAKE_API_KEY: 'sk-fake',
        ...(ro.env ?? {}),
      };
      const args = [
        'exec',
        ...(ro.resume ? ['resume', '--last'] : []),
        '--json',
        '--dangerously-bypass-approvals-and-sandbox',
        ...['plugins', 'remote_plugin', 'apps', 'skill_mcp_dependency_install', 'tool_suggest'].flatMap((f) => [
          '--disable',
          f,
        ]),
        ...(ro.resume ? [] : ['-C', lab.project]),
        prompt,
      ];
      const r = await runCli(bin, args, { cwd: lab.project, env, timeoutMs: ro.timeoutMs ?? 180_000 });
      return {
        exit: r.exit,
        events: r.lines,
        threadId: r.lines.find((e) => e.type === 'thread.started')?.thread_id,
        stderr: r.stderr,
        ms: r.ms,
      };
    },
  };
}
