// What the benches that run `vigil serve` share: a free port, the service started as an
// operator starts it (the bin, a config file, its own process), and the bench keys
// deleted from Redis afterwards.
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';

const ROOT = join(import.meta.dirname, '..');
const children: ChildProcess[] = [];
process.on('exit', () => {
  for (const c of children) c.kill('SIGKILL');
});

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const p = (s.address() as { port: number }).port;
      s.close(() => resolve(p));
    });
  });
}

/**
 * A redis-server of the bench's own (a free port, no persistence, nothing else in it),
 * so `used_memory` measures only what the bench wrote; resolves once it answers.
 */
export async function ownRedis(): Promise<{ url: string; client: Redis; used(): Promise<number> }> {
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'vigil-redis-mem-'));
  track(
    spawn(
      'redis-server',
      ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--appendonly', 'no'],
      {
        stdio: 'ignore',
      },
    ),
  );
  const url = `redis://127.0.0.1:${port}`;
  for (let i = 0; ; i++) {
    const probe = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
    probe.on('error', () => {});
    const up = await probe.connect().then(
      () => probe.ping().then(() => true),
      () => false,
    );
    probe.disconnect();
    if (up) break;
    if (i > 100) throw new Error('redis-server did not start');
    await new Promise((res) => setTimeout(res, 50));
  }
  const client = new Redis(url);
  return { url, client, used: async () => Number(/used_memory:(\d+)/.exec(await client.info('memory'))?.[1]) };
}

/** A child process this bench started (killed when the bench exits). */
export function track(child: ChildProcess): ChildProcess {
  children.push(child);
  return child;
}

/**
 * `vigil serve` with `config` as its config file and its default log level (the log is
 * drained and dropped, as a pipe to a collector would take it); resolves once /health answers.
 */
export async function vigilServe(
  config: Record<string, unknown>,
  env: NodeJS.ProcessEnv = {},
): Promise<{ url: string; child: ChildProcess }> {
  const port = await freePort();
  const file = join(mkdtempSync(join(tmpdir(), 'vigil-bench-')), 'vigil.yaml');
  writeFileSync(file, JSON.stringify(config)); // JSON is YAML
  const child = track(
    spawn(
      process.execPath,
      [
        // VIGIL_BENCH_PROF=<dir>: a CPU profile of each service, written when it stops.
        ...(process.env.VIGIL_BENCH_PROF ? ['--cpu-prof', `--cpu-prof-dir=${process.env.VIGIL_BENCH_PROF}`] : []),
        join(ROOT, 'bin/vigil.mjs'),
        'serve',
        '--config',
        file,
        '--host',
        '127.0.0.1',
        '--port',
        String(port),
      ],
      { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, VIGIL_LOG_LEVEL: undefined, ...env } },
    ),
  );
  child.stdout!.resume();
  child.stderr!.resume();
  const url = `http://127.0.0.1:${port}`;
  for (let i = 0; ; i++) {
    if (child.exitCode !== null) throw new Error(`vigil serve exited ${child.exitCode}`);
    if (
      await fetch(`${url}/health`).then(
        (r) => r.ok,
        () => false,
      )
    )
      return { url, child };
    if (i > 400) throw new Error(`${url} never became healthy`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Deletes every key under the given prefixes. */
export async function deleteKeys(url: string, prefixes: readonly string[]): Promise<void> {
  if (!prefixes.length) return;
  const r = new Redis(url, { maxRetriesPerRequest: 1 });
  try {
    for (const p of prefixes) {
      let cursor = '0';
      do {
        const [next, keys] = await r.scan(cursor, 'MATCH', `${p}*`, 'COUNT', 1000);
        cursor = next;
        if (keys.length) await r.del(...keys);
      } while (cursor !== '0');
    }
  } finally {
    await r.quit();
  }
}
