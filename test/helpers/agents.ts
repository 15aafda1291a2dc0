import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

// The agent CLIs the end-to-end tier drives are no dependency of the repo (a plain
// `npm install` stays small): each is npm-installed at its pinned version into a cache
// the first time the tier runs (test/agents.setup.ts, the e2e project's global setup)
// and reused after. An agent here is a package, a version and the bin it provides.

export interface AgentCli {
  /** npm package */
  pkg: string;
  /** pinned: the shapes the sensors rely on were checked on this version */
  version: string;
  /** the executable the package puts in node_modules/.bin */
  bin: string;
}

/** Every agent CLI the e2e tier drives. */
export const AGENTS = {
  opencode: { pkg: 'opencode-ai', version: '1.18.33', bin: 'opencode' },
  claudeCode: { pkg: '@anthropic-ai/claude-code', version: '2.1.328', bin: 'claude' },
} as const satisfies Record<string, AgentCli>;

/** `$VIGIL_AGENT_CACHE`, else vigil-agents/ in the OS temp dir. */
export const agentCache = (): string => process.env.VIGIL_AGENT_CACHE || join(tmpdir(), 'vigil-agents');

const dirOf = (a: AgentCli) => join(agentCache(), `${a.pkg.replace(/[@/]/g, '_')}@${a.version}`);

/** The installed binary of `a` at its pinned version, or undefined when it is not in the cache. */
export function agentBin(a: AgentCli): string | undefined {
  const dir = dirOf(a);
  const bin = join(dir, 'node_modules', '.bin', a.bin);
  try {
    const v = JSON.parse(readFileSync(join(dir, 'node_modules', a.pkg, 'package.json'), 'utf8')).version;
    return v === a.version && existsSync(bin) ? bin : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Install `a` into the cache unless it is there: npm install into a dir of its own,
 * then a rename, so two runs at once (or a run killed mid-install) never leave a half
 * install behind. Returns the binary, or the reason it could not be installed.
 */
export function ensureAgent(a: AgentCli, log: (line: string) => void = () => {}): { bin?: string; error?: string } {
  const have = agentBin(a);
  if (have) return { bin: have };
  const dir = dirOf(a);
  const tmp = `${dir}.${process.pid}.tmp`;
  const t0 = Date.now();
  log(`installing ${a.pkg}@${a.version} into ${dir} (once; later runs reuse it)`);
  try {
    rmSync(tmp, { recursive: true, force: true });
    mkdirSync(tmp, { recursive: true });
    writeFileSync(join(tmp, 'package.json'), JSON.stringify({ private: true }));
    execFileSync(
      'npm',
      ['install', '--no-audit', '--no-fund', '--no-save', '--loglevel=error', `${a.pkg}@${a.version}`],
      {
        cwd: tmp,
        stdio: ['ignore', 'pipe', 'pipe'],
        timeout: 600_000,
        env: { ...process.env, npm_config_update_notifier: 'false' },
      },
    );
    try {
      renameSync(tmp, dir);
    } catch {
      // another run finished first: keep its install; a broken one left behind goes
      if (!agentBin(a)) {
        rmSync(dir, { recursive: true, force: true });
        renameSync(tmp, dir);
      }
    }
  } catch (e) {
    const err = e as { stderr?: Buffer; message: string };
    const why =
      String(err.stderr ?? '')
        .trim()
        .split('\n')
        .filter(Boolean)
        .pop() ?? err.message;
    return { error: `npm install ${a.pkg}@${a.version} failed: ${why.slice(0, 200)}` };
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
  const bin = agentBin(a);
  if (!bin) return { error: `${a.pkg}@${a.version} installed, but no ${a.bin} in its node_modules/.bin` };
  log(`installed ${a.pkg}@${a.version} in ${Math.round((Date.now() - t0) / 1000)} s`);
  return { bin };
}
