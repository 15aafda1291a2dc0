import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { eventually, tempDir } from './helpers/index.ts';

// The README's "Run it beside opencode" commands, each line run as written from the
// repository root. Only the environment differs: a free PORT (the machine is shared),
// a home of its own for the plugin, and VIGIL_URL pointing `vigil status` at the port.

const ROOT = join(import.meta.dirname, '..');
const README = readFileSync(join(ROOT, 'README.md'), 'utf8');

function commands(name = 'beside-opencode'): string[] {
  const at = README.indexOf(`<!-- readme-test: ${name} -->`);
  const block = /```sh\n([\s\S]*?)```/.exec(README.slice(at))?.[1] ?? '';
  return block
    .split('\n')
    .map((l) => l.replace(/\s+#.*$/, '').trim())
    .filter(Boolean);
}

async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const port = (s.address() as AddressInfo).port;
  await new Promise((r) => s.close(r));
  return port;
}

let service: ChildProcess | undefined;
afterAll(() => {
  // npm start runs node in a process group of its own: stop the group.
  if (service?.pid) process.kill(-service.pid, 'SIGTERM');
});

describe('README: run it beside opencode', () => {
  it('npm start, npx vigil install opencode, npx vigil status', async () => {
    const [start, install, status] = commands();
    expect([start, install, status]).toEqual(['npm start', 'npx vigil install opencode', 'npx vigil status']);
    const port = await freePort();
    const home = tempDir('vigil-home');
    const env = {
      PATH: process.env.PATH,
      HOME: home,
      XDG_CONFIG_HOME: join(home, '.config'),
      PORT: String(port),
      VIGIL_URL: `http://127.0.0.1:${port}`,
      VIGIL_LOG_FORMAT: 'json',
    };
    service = spawn('bash', ['-c', start], { cwd: ROOT, env, detached: true, stdio: 'ignore' });
    await eventually(async () => (await fetch(`http://127.0.0.1:${port}/health`)).ok, 60_000, 250);

    const inst = spawnSync('bash', ['-c', install], { cwd: ROOT, env, encoding: 'utf8', timeout: 120_000 });
    expect(inst.status).toBe(0);
    expect(existsSync(join(home, '.config', 'opencode', 'plugin', 'vigil.js'))).toBe(true);

    const st = spawnSync('bash', ['-c', status], { cwd: ROOT, env, encoding: 'utf8', timeout: 60_000 });
    expect(st.stderr).toBe('');
    expect(st.status).toBe(0);
    expect(st.stdout).toContain(`at http://127.0.0.1:${port}: ok (backend memory`);
    expect(st.stdout).toContain('sessions: 0');
  });
});

describe('README: run it beside Claude Code, Codex CLI or Gemini CLI', () => {
  it('npm start, npx vigil install claude-code, npx vigil status: wired by http hooks, the endpoint answers', async () => {
    const [start, install, status] = commands('beside-hooks');
    expect([start, install, status]).toEqual(['npm start', 'npx vigil install claude-code', 'npx vigil status']);
    const port = await freePort();
    const home = tempDir('vigil-home');
    const env = {
      PATH: process.env.PATH,
      HOME: home,
      XDG_CONFIG_HOME: join(home, '.config'),
      XDG_STATE_HOME: join(home, '.local', 'state'),
      PORT: String(port),
      VIGIL_URL: `http://127.0.0.1:${port}`,
      VIGIL_LOG_FORMAT: 'json',
    };
    const svc = spawn('bash', ['-c', start], { cwd: ROOT, env, detached: true, stdio: 'ignore' });
    try {
      await eventually(async () => (await fetch(`http://127.0.0.1:${port}/health`)).ok, 60_000, 250);
      const inst = spawnSync('bash', ['-c', install], { cwd: ROOT, env, encoding: 'utf8', timeout: 120_000 });
      expect(inst.status, inst.stderr).toBe(0);
      const settings = JSON.parse(readFileSync(join(home, '.claude', 'settings.json'), 'utf8'));
      expect(settings.hooks.PreToolUse[0].hooks[0]).toMatchObject({
        type: 'http',
        url: `http://127.0.0.1:${port}/hooks/claude-code`,
      });
      const st = spawnSync('bash', ['-c', status], { cwd: ROOT, env, encoding: 'utf8', timeout: 60_000 });
      expect(st.stderr).toBe('');
      expect(st.status).toBe(0);
      expect(st.stdout).toMatch(
        new RegExp(
          `claude-code: wired \\(vigil-claude-code/[^,]+, http hooks, .*posts to http://127\\.0\\.0\\.1:${port}/hooks/claude-code: answers`,
        ),
      );
    } finally {
      if (svc.pid) process.kill(-svc.pid, 'SIGTERM');
    }
  });
});
