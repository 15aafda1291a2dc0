import 'reflect-metadata';
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { InstallContext } from '../core/installer.ts';
import { claudeCodeInstaller } from '../sensors/claude-code/installer.ts';
import { codexInstaller, trustEntries, withTrust } from '../sensors/codex/installer.ts';
import { geminiInstaller } from '../sensors/gemini/installer.ts';
import { type HookGroup, serialise, withHooks } from '../sensors/shared/hooks-file.ts';
import { shq } from '../sensors/shared/installer.ts';
import { freePort, until } from '../test/fixtures/opencode-e2e/procs.ts';
import { AGENTS, agentBin } from '../test/helpers/agents.ts';
import { claudeLab } from '../test/helpers/claude-code.ts';
import { codexLab } from '../test/helpers/codex.ts';
import { geminiLab } from '../test/helpers/gemini.ts';
import { startOpencode } from '../test/helpers/opencode.ts';

// What a user of each agent feels: the real CLI on one file read N times (40) against
// its scripted fake model (an instant model, so only the hooks add time), in four
// setups measured in the same run, rounds interleaved:
//   none   without Vigil's sensor;
//   floor  the cheapest hook of the same kind, reaching a local no-op HTTP server: two
//          `type: "http"` hooks for Claude Code, two `curl` command hooks for Codex and
//          Gemini CLI (before and after each tool call), an empty in-process plugin for
//          opencode;
//   down   Vigil's sensor as `vigil install` writes it, nothing listening (fail open);
//   up     the same with `vigil serve` running (its own process: memory, warn).
// Prints each setup's time, its ratio to `none` of the same round (the range over the
// rounds), and the time each adds per tool call; for Codex and Gemini CLI, Vigil's
// added time over the floor's.
//
// Each setup runs --repeat times per round and keeps its fastest run (the machine's
// noise only ever adds time); the ratios are per round, then their range and median.
//
//   npm run bench:agent-hooks [-- --rounds 3] [-- --repeat 2] [-- --calls 40] [-- --only claude-code,codex,gemini,opencode]

const ROOT = join(import.meta.dirname, '..');
const argv = process.argv.slice(2);
const arg = (f: string) => (argv.includes(f) ? argv[argv.indexOf(f) + 1] : undefined);
const rounds = Number(arg('--rounds') ?? 3);
const calls = Number(arg('--calls') ?? 40);
const repeat = Number(arg('--repeat') ?? 2);
const only = arg('--only')?.split(',');
const SETUPS = ['none', 'floor', 'down', 'up'] as const;
type Setup = (typeof SETUPS)[number];

const work = mkdtempSync(join(tmpdir(), 'vigil-bench-hooks-'));
const secretFile = join(work, 'secret', 'sensor-secret');
const procs: ChildProcess[] = [];
const stopAll = () => {
  for (const p of procs) {
    try {
      process.kill(-(p.pid as number), 'SIGTERM');
    } catch {}
  }
};
process.on('exit', stopAll);

async function start(name: string, args: string[], env: NodeJS.ProcessEnv, ready: RegExp): Promise<void> {
  const p = spawn(process.execPath, args, { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  procs.push(p);
  let out = '';
  p.stdout?.on('data', (c) => (out += c));
  p.stderr?.on('data', (c) => (out += c));
  await until(name, () => ready.test(out), { timeoutMs: 60_000, detail: () => out.slice(-2000) });
}

// The no-op server of the floors: answers every request 200 with an empty body, in a process of its own.
const noopPort = await freePort();
await start(
  'no-op server',
  [
    '-e',
    `require('http').createServer((q, s) => { q.resume(); q.on('end', () => s.end('')); }).listen(${noopPort}, '127.0.0.1', () => console.log('ready'))`,
  ],
  { PATH: process.env.PATH },
  /ready/,
);
const noop = `http://127.0.0.1:${noopPort}`;
// `vigil serve` as a user runs it: defaults (memory, warn), its own process.
const upPort = await freePort();
await start(
  'vigil serve',
  ['bin/vigil.mjs', 'serve', '--port', String(upPort)],
  {
    PATH: process.env.PATH,
    HOME: join(work, 'svc-home'),
    VIGIL_SENSOR_SECRET_FILE: secretFile,
    VIGIL_HOOK_STATE_DIR: join(work, 'hook-state'),
    VIGIL_LOG_FORMAT: 'json',
  },
  /listening/,
);
const up = `http://127.0.0.1:${upPort}`;
const down = `http://127.0.0.1:${await freePort()}`;
const urlOf = (s: Setup) => (s === 'up' ? up : down);
const ctxOf = (home: string, extra: Record<string, string> = {}): InstallContext => ({
  env: { HOME: home, VIGIL_SENSOR_SECRET_FILE: secretFile, ...extra },
  home,
});

/** The floor's command hook: post stdin to the no-op server, print its answer. */
const floorCurl = `curl -s --data-binary @- ${shq(noop)}`;
/** Writes `groups` into the hooks file at `path` (after what is there). */
function addHooks(path: string, groups: Record<string, HookGroup>): void {
  let base = {};
  try {
    base = JSON.parse(readFileSync(path, 'utf8'));
  } catch {}
  writeFileSync(path, serialise(withHooks(base, () => false, groups)));
}

interface Agent {
  name: string;
  title: string;
  /** One timed run in `setup`: milliseconds, the agent's own work only. */
  run(setup: Setup): Promise<number>;
}

const agents: Agent[] = [];

if (agentBin(AGENTS.claudeCode))
  agents.push({
    name: 'claude-code',
    title: `Claude Code ${AGENTS.claudeCode.version}`,
    async run(setup) {
      const script = {
        steps: [{ tool: 'Read', input: { file_path: '{{cwd}}/src/app.js' }, repeat: calls }, { text: 'ok' }],
      };
      const lab = await claudeLab({ script, vigilUrl: urlOf(setup), install: false });
      try {
        const settings = join(lab.home, '.claude', 'settings.json');
        mkdirSync(join(lab.home, '.claude'), { recursive: true });
        if (setup === 'floor')
          addHooks(
            settings,
            Object.fromEntries(
              ['PreToolUse', 'PostToolUse'].map((e) => [e, { hooks: [{ type: 'http', url: noop, timeout: 5 }] }]),
            ),
          );
        if (setup === 'down' || setup === 'up')
          await claudeCodeInstaller.install({ url: urlOf(setup) }, ctxOf(lab.home));
        const r = await lab.run('read it');
        if (r.result?.subtype !== 'success') throw new Error(`claude ${setup}: ${r.stderr.slice(0, 300)}`);
        return r.ms;
      } finally {
        await lab.stop();
      }
    },
  });

if (agentBin(AGENTS.codex))
  agents.push({
    name: 'codex',
    title: `Codex CLI ${AGENTS.codex.version}`,
    async run(setup) {
      const script = {
        steps: [...Array.from({ length: calls }, () => ({ exec: 'cat src/app.js' })), { text: 'done' }],
      };
      const lab = await codexLab({ script, vigilUrl: urlOf(setup), install: false });
      try {
        if (setup === 'floor') {
          const file = join(lab.codexHome, 'hooks.json');
          addHooks(
            file,
            Object.fromEntries(
              ['PreToolUse', 'PostToolUse'].map((e) => [
                e,
                { hooks: [{ type: 'command', command: floorCurl, timeout: 5 }] },
              ]),
            ),
          );
          const toml = join(lab.codexHome, 'config.toml');
          const hooks = JSON.parse(readFileSync(file, 'utf8'));
          writeFileSync(
            toml,
            withTrust(
              readFileSync(toml, 'utf8'),
              trustEntries(hooks, file, () => true),
            ),
          );
        }
        if (setup === 'down' || setup === 'up')
          await codexInstaller.install({ url: urlOf(setup) }, ctxOf(lab.home, { CODEX_HOME: lab.codexHome }));
        const r = await lab.run('read it');
        if (r.exit !== 0) throw new Error(`codex ${setup}: exit ${r.exit} ${r.stderr.slice(-300)}`);
        return r.ms;
      } finally {
        await lab.stop();
      }
    },
  });

if (agentBin(AGENTS.gemini))
  agents.push({
    name: 'gemini',
    title: `Gemini CLI ${AGENTS.gemini.version}`,
    async run(setup) {
      const script = {
        steps: [
          ...Array.from({ length: calls }, () => ({
            tool: 'read_file',
            args: { file_path: '{{workdir}}/src/app.js' },
          })),
          { text: 'done' },
        ],
      };
      const lab = await geminiLab({ script, vigilUrl: urlOf(setup), install: false });
      try {
        if (setup === 'floor')
          addHooks(
            join(lab.home, '.gemini', 'settings.json'),
            Object.fromEntries(
              ['BeforeTool', 'AfterTool'].map((e) => [
                e,
                { hooks: [{ type: 'command', command: floorCurl, name: `floor-${e}`, timeout: 5000 }] },
              ]),
            ),
          );
        if (setup === 'down' || setup === 'up') await geminiInstaller.install({ url: urlOf(setup) }, ctxOf(lab.home));
        const r = await lab.run('read it');
        if (r.exit !== 0) throw new Error(`gemini ${setup}: exit ${r.exit} ${r.stderr.slice(-300)}`);
        return r.ms;
      } finally {
        await lab.stop();
      }
    },
  });

if (agentBin(AGENTS.opencode))
  agents.push({
    name: 'opencode',
    title: `opencode ${AGENTS.opencode.version}`,
    async run(setup) {
      const script = {
        steps: [{ text: 'nothing scripted' }],
        scripts: [
          {
            match: '^LOOP',
            steps: [{ tool: 'read', args: { filePath: '{{workdir}}/src/app.js' }, repeat: calls }, { text: 'done' }],
          },
        ],
      };
      const lab = await startOpencode({
        script,
        files: { 'src/app.js': 'export function add(a, b) {\n  return a - b;\n}\n' },
        beforeStart(dirs) {
          const plugins = join(dirs.xdg, 'config', 'opencode', 'plugin');
          mkdirSync(plugins, { recursive: true });
          if (setup === 'floor')
            writeFileSync(
              join(plugins, 'noop.js'),
              "export const Noop = async () => ({ 'tool.execute.before': async () => {}, 'tool.execute.after': async () => {} });\n",
            );
          if (setup === 'down' || setup === 'up')
            execFileSync(process.execPath, ['sensors/opencode/plugin/install.mjs', '--dest', plugins], { cwd: ROOT });
        },
        env: () => ({ VIGIL_URL: urlOf(setup), VIGIL_SENSOR_SECRET_FILE: secretFile }),
      });
      try {
        const t0 = performance.now();
        await lab.runSession('bench', 'LOOP read it');
        return performance.now() - t0;
      } finally {
        await lab.stop();
      }
    },
  });

const chosen = agents.filter((a) => !only || only.includes(a.name));
for (const name of only ?? [])
  if (!agents.some((a) => a.name === name))
    console.log(`${name}: not installed, skipped (the e2e tier installs the agent CLIs)`);
const ms: Record<string, Record<Setup, number[]>> = {};
for (const a of chosen) ms[a.name] = { none: [], floor: [], down: [], up: [] };
for (let r = 0; r < rounds; r++) {
  for (const a of chosen) {
    // each round starts with another setup, so a drift of the machine's speed is spread
    const order = SETUPS.map((_, i) => SETUPS[(i + r) % SETUPS.length]);
    for (const s of order) {
      const runs: number[] = [];
      for (let k = 0; k < repeat; k++) runs.push(await a.run(s));
      ms[a.name][s].push(Math.min(...runs));
      process.stderr.write(`round ${r + 1}/${rounds} ${a.name} ${s}: ${runs.map((x) => x.toFixed(0)).join(', ')} ms\n`);
    }
  }
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const range = (xs: number[], digits = 2, unit = '') =>
  `${Math.min(...xs).toFixed(digits)}-${Math.max(...xs).toFixed(digits)}${unit} (median ${median(xs).toFixed(digits)})`;
const perRound = (f: (i: number) => number) => Array.from({ length: rounds }, (_, i) => f(i));
console.log(
  `\n${calls} tool calls (one file read ${calls} times), instant fake model, ${rounds} rounds interleaved (the fastest of ${repeat} runs per setup and round); ranges over the rounds`,
);
for (const a of chosen) {
  const m = ms[a.name];
  console.log(`\n${a.title}`);
  console.log(`  ${'setup'.padEnd(36)} ${'time (s)'.padEnd(26)} ${'vs none'.padEnd(27)} added per tool call`);
  for (const s of SETUPS) {
    const label = {
      none: 'no sensor',
      floor:
        a.name === 'opencode'
          ? 'floor: an empty plugin'
          : a.name === 'claude-code'
            ? 'floor: two http hooks, no-op server'
            : 'floor: two curl hooks, no-op server',
      down: "Vigil's sensor, Vigil down",
      up: "Vigil's sensor, vigil serve up",
    }[s];
    const ratio = perRound((i) => m[s][i] / m.none[i]);
    const added = perRound((i) => (m[s][i] - m.none[i]) / calls);
    console.log(
      `  ${label.padEnd(36)} ${range(m[s].map((x) => x / 1000)).padEnd(26)} ${s === 'none' ? '1.00x'.padEnd(27) : `${range(ratio)}x`.padEnd(27)} ${s === 'none' ? '' : range(added, 1, ' ms')}`,
    );
  }
  if (a.name === 'codex' || a.name === 'gemini')
    for (const s of ['up', 'down'] as const) {
      const over = perRound((i) => (m[s][i] - m.none[i]) / (m.floor[i] - m.none[i]));
      console.log(
        `  Vigil ${s}: added time / the floor's added time: ${range(over)}x (goal <= ${s === 'up' ? '1.5' : '1.2'}x)`,
      );
    }
}
stopAll();
rmSync(work, { recursive: true, force: true });
process.exit(0);
