import 'reflect-metadata';
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildHook } from '../sensors/claude-code/hook/build.mjs';
import { buildServer } from '../service/server.ts';
import { AGENTS, agentBin } from '../test/helpers/agents.ts';
import { claudeLab } from '../test/helpers/claude-code.ts';
import { testVigil } from '../test/helpers/index.ts';

// What Vigil's Claude Code hook adds to each tool call (PreToolUse + PostToolUse), with
// the service up and with it down. Two measurements, each against its own baseline
// taken in the same run:
// 1. the hook bundle alone: one PreToolUse + one PostToolUse process, against two
//    `node` processes running an empty script (what any command hook costs);
// 2. the real Claude Code (when installed, as the e2e tier does): the same 40-call
//    script without hooks, with them and Vigil up, with them and Vigil down.
//
//   npm run bench:hook [-- --rounds 20] [-- --no-agent]

const argv = process.argv.slice(2);
const rounds = Number(argv[argv.indexOf('--rounds') + 1]) || 20;
const withAgent = !argv.includes('--no-agent');

const dir = mkdtempSync(join(tmpdir(), 'vigil-bench-hook-'));
const hook = (await buildHook({ out: join(dir, 'hook.mjs') })).path;
const empty = join(dir, 'empty.mjs');
writeFileSync(empty, '');

const payload = (event: string, i: number) =>
  JSON.stringify({
    session_id: 'bench-session',
    transcript_path: join(dir, 'none.jsonl'),
    cwd: dir,
    hook_event_name: event,
    tool_name: 'Read',
    tool_input: { file_path: join(dir, `f${i % 7}.txt`) },
    tool_use_id: `toolu_${i}_${event}`,
    ...(event === 'PostToolUse' ? { tool_response: { type: 'text', file: { content: 'x' } } } : {}),
  });

function run(script: string, args: string[], input: string, env: NodeJS.ProcessEnv): Promise<number> {
  const t0 = performance.now();
  return new Promise((resolve, reject) => {
    const p = spawn(process.execPath, [script, ...args], { env, stdio: ['pipe', 'ignore', 'ignore'] });
    p.on('error', reject);
    p.on('close', () => resolve(performance.now() - t0));
    p.stdin.end(input);
  });
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

async function perCall(script: string, env: NodeJS.ProcessEnv): Promise<number> {
  const xs: number[] = [];
  for (let i = 0; i < rounds; i++) {
    const pre = await run(script, ['PreToolUse'], payload('PreToolUse', i), env);
    const post = await run(script, ['PostToolUse'], payload('PostToolUse', i), env);
    xs.push(pre + post);
  }
  return median(xs);
}

const vigil = await testVigil({ backend: 'memory', overlay: { modes: { mode: 'warn' } } });
const app = await buildServer(vigil);
await app.listen({ port: 0, host: '127.0.0.1' });
const upUrl = `http://127.0.0.1:${(app.server.address() as { port: number }).port}`;
const probe = createServer();
await new Promise<void>((r) => probe.listen(0, '127.0.0.1', r));
const downUrl = `http://127.0.0.1:${(probe.address() as { port: number }).port}`;
await new Promise((r) => probe.close(r));

const env = (url: string) => ({ PATH: process.env.PATH, VIGIL_URL: url, VIGIL_HOOK_STATE_DIR: join(dir, 'state') });
const base = await perCall(empty, env(upUrl));
const up = await perCall(hook, env(upUrl));
const down = await perCall(hook, env(downUrl));
console.log(`hook processes per tool call (PreToolUse + PostToolUse), median of ${rounds}:`);
console.log(`  two empty node processes (baseline)  ${base.toFixed(0)} ms`);
console.log(`  Vigil up                             ${up.toFixed(0)} ms  (${(up / base).toFixed(2)}x baseline)`);
console.log(`  Vigil down                           ${down.toFixed(0)} ms  (${(down / base).toFixed(2)}x baseline)`);

if (withAgent && agentBin(AGENTS.claudeCode)) {
  const calls = 40;
  const script = {
    steps: [{ tool: 'Read', input: { file_path: '{{cwd}}/src/app.js' }, repeat: calls }, { text: 'ok' }],
  };
  const timed = async (install: boolean, url: string) => {
    const lab = await claudeLab({ vigilUrl: url, script, install });
    try {
      const r = await lab.run('read it');
      if (r.result?.subtype !== 'success') throw new Error(`claude did not finish: ${r.stderr.slice(0, 300)}`);
      return r.ms;
    } finally {
      await lab.stop();
    }
  };
  const none = await timed(false, upUrl);
  const cUp = await timed(true, upUrl);
  const cDown = await timed(true, downUrl);
  console.log(`\nreal Claude Code ${AGENTS.claudeCode.version}, ${calls} tool calls (one run each):`);
  console.log(`  no hooks        ${(none / 1000).toFixed(1)} s`);
  console.log(
    `  Vigil up        ${(cUp / 1000).toFixed(1)} s  (+${((cUp - none) / calls).toFixed(0)} ms per call, ${(cUp / none).toFixed(2)}x)`,
  );
  console.log(
    `  Vigil down      ${(cDown / 1000).toFixed(1)} s  (+${((cDown - none) / calls).toFixed(0)} ms per call, ${(cDown / none).toFixed(2)}x)`,
  );
} else if (withAgent) {
  console.log('\n(real Claude Code not installed: run the e2e tier once to install it)');
}
await app.close();
await vigil.close();
