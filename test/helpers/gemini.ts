import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { geminiInstaller } from '../../sensors/gemini/installer.ts';
import { installCtx, labBase, needsAgent, runCli } from './agent-e2e.ts';
import { AGENTS, agentBin } from './agents.ts';

// The real Gemini CLI, offline: `gemini -p --output-format stream-json --approval-mode
// yolo` in a throwaway git project with an isolated HOME, against the scripted fake
// Gemini API (test/fixtures/gemini/fake-gemini.mjs; its header documents the script
// format), with Vigil's hooks installed by `vigil install gemini` into that HOME. The
// CLI's own loop detection is off unless asked for, so the runs test Vigil's judge.
// The shared lab parts: agent-e2e.ts.

export const GEMINI_VERSION = AGENTS.gemini.version;

export const needsGemini = (suite: string): string | undefined => needsAgent(suite, AGENTS.gemini, 'Gemini CLI');

export interface GeminiRun {
  exit: number | null;
  stream: Record<string, any>[];
  sessionId: string | undefined;
  stderr: string;
  ms: number;
}

export interface GeminiLab {
  dir: string;
  project: string;
  home: string;
  requests(): Record<string, any>[];
  /** stream-json tool_result lines of every run so far. */
  results(): Record<string, any>[];
  run(prompt: string, o?: { env?: Record<string, string>; timeoutMs?: number; resume?: string }): Promise<GeminiRun>;
  stop(): Promise<void>;
}

export async function geminiLab(o: {
  script: unknown;
  vigilUrl: string;
  install?: boolean;
  loopDetection?: boolean;
}): Promise<GeminiLab> {
  const bin = agentBin(AGENTS.gemini);
  if (!bin) throw new Error('Gemini CLI is not installed');
  const lab = await labBase({
    prefix: 'vigil-gemini-',
    fixture: 'gemini/fake-gemini.mjs',
    script: o.script,
    homeDirs: ['.gemini'],
  });
  writeFileSync(
    join(lab.home, '.gemini', 'settings.json'),
    `${JSON.stringify(
      {
        security: { auth: { selectedType: 'gemini-api-key' } },
        privacy: { usageStatisticsEnabled: false },
        general: { enableAutoUpdate: false, enableAutoUpdateNotification: false },
        ...(o.loopDetection ? {} : { model: { disableLoopDetection: true } }),
      },
      null,
      2,
    )}\n`,
  );
  if (o.install !== false) await geminiInstaller.install({ url: o.vigilUrl }, installCtx(lab.home));
  const results: Record<string, any>[] = [];

  return {
    dir: lab.dir,
    project: lab.project,
    home: lab.home,
    requests: lab.requests,
    results: () => results,
    stop: lab.stop,
    async run(prompt, ro = {}) {
      const env = {
        ...lab.env(o.vigilUrl),
        NO_COLOR: '1',
        GEMINI_API_KEY: 'fake',
        GOOGLE_GEMINI_BASE_URL: `http://127.0.0.1:${lab.port}`,
        GEMINI_CLI_TRUST_WORKSPACE: 'true',
        ...(ro.env ?? {}),
      };
      const args = [
        '-p',
        prompt,
        '--approval-mode',
        'yolo',
        '--output-format',
        'stream-json',
        ...(ro.resume ? ['--resume', ro.resume] : []),
      ];
      const r = await runCli(bin, args, { cwd: lab.project, env, timeoutMs: ro.timeoutMs ?? 240_000 });
      results.push(...r.lines.filter((l) => l.type === 'tool_result'));
      return {
        exit: r.exit,
        stream: r.lines,
        sessionId: r.lines.find((l) => l.type === 'init')?.session_id,
        stderr: r.stderr,
        ms: r.ms,
      };
    },
  };
}
