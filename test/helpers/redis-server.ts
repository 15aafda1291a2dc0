import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { createConnection } from 'node:net';
import { join } from 'node:path';
import { freePort, sleep } from '../fixtures/opencode-e2e/procs.ts';
import { tempDir } from './index.ts';

/**
 * A redis-server of a test's own (its own port and data folder), to stop, kill and
 * restart without touching the shared one. `aof` turns on append-only persistence, as a
 * production Redis that must not lose queued alerts would run.
 */
export class TestRedis {
  readonly dir = tempDir('vigil-redis');
  private child: ChildProcess | undefined;

  private constructor(
    readonly port: number,
    private readonly aof: boolean,
    /** requirepass: clients must AUTH with it. */
    private readonly password?: string,
  ) {}

  static async start(o: { aof?: boolean; password?: string } = {}): Promise<TestRedis> {
    const r = new TestRedis(await freePort(), o.aof ?? false, o.password);
    await r.up();
    return r;
  }

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  async up(): Promise<void> {
    const args = ['--port', String(this.port), '--bind', '127.0.0.1', '--dir', this.dir, '--save', ''];
    args.push('--appendonly', this.aof ? 'yes' : 'no', '--appendfsync', 'always');
    if (this.password) args.push('--requirepass', this.password);
    this.child = spawn('redis-server', args, { stdio: 'ignore' });
    for (let i = 0; i < 200; i++) {
      if (await this.answers()) return;
      await sleep(25);
    }
    throw new Error(`redis-server on ${this.port} did not come up`);
  }

  /** Whether it answers PING now. */
  answers(): Promise<boolean> {
    return new Promise((resolve) => {
      const s = createConnection(this.port, '127.0.0.1');
      s.setTimeout(500, () => {
        s.destroy();
        resolve(false);
      });
      s.on('error', () => resolve(false));
      let got = '';
      s.on('data', (d) => {
        got += d;
        // With a password the +OK of AUTH may come first, alone.
        if (got.endsWith('+PONG\r\n') || got.includes('-')) {
          s.destroy();
          resolve(got.endsWith('+PONG\r\n'));
        }
      });
      s.write(this.password ? `AUTH ${this.password}\r\nPING\r\n` : 'PING\r\n');
    });
  }

  /** SHUTDOWN (a clean stop; with AOF the data is kept) or SIGKILL (a crash). */
  async down(how: 'shutdown' | 'kill' = 'shutdown'): Promise<void> {
    const c = this.child;
    if (!c || c.exitCode !== null) return;
    const exited = new Promise((r) => c.once('exit', r));
    c.kill(how === 'kill' ? 'SIGKILL' : 'SIGTERM');
    await exited;
  }
}

// ---------------------------------------------------------------------------
// A Redis Cluster and a Sentinel-managed primary of a test's own, on free loopback
// ports, each process stopped by its PID.

/** redis-cli against a local port; resolves with its output. */
export function redisCli(port: number, ...args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile('redis-cli', ['-h', '127.0.0.1', '-p', String(port), ...args], { timeout: 30_000 }, (err, out, errOut) =>
      err ? reject(new Error(`redis-cli -p ${port} ${args.join(' ')}: ${errOut || err.message}`)) : resolve(out),
    );
  });
}

/** Distinct free ports (the bus port of a cluster node must be free too). */
async function freePorts(n: number): Promise<number[]> {
  const out = new Set<number>();
  while (out.size < n) out.add(await freePort());
  return [...out];
}

class Server {
  readonly dir = tempDir('vigil-redis-node');
  child: ChildProcess | undefined;
  constructor(
    readonly port: number,
    private readonly args: string[],
    /** A config file's text, written into its dir and given first (Sentinel rewrites its file). */
    private readonly conf?: string,
  ) {}

  async up(): Promise<void> {
    const file = join(this.dir, 'redis.conf');
    if (this.conf !== undefined) writeFileSync(file, this.conf);
    const args = [
      ...(this.conf !== undefined ? [file] : []),
      ...['--port', String(this.port), '--bind', '127.0.0.1', '--dir', this.dir, '--save', '', ...this.args],
    ];
    this.child = spawn('redis-server', args, { stdio: 'ignore' });
    for (let i = 0; i < 200; i++) {
      if ((await redisCli(this.port, 'PING').catch(() => '')).startsWith('PONG')) return;
      await sleep(25);
    }
    throw new Error(`redis-server on ${this.port} did not come up`);
  }

  async kill(): Promise<void> {
    const c = this.child;
    if (!c || c.exitCode !== null || c.signalCode !== null) return;
    const exited = new Promise((r) => c.once('exit', r));
    c.kill('SIGKILL');
    await exited;
  }
}

async function until(what: string, fn: () => Promise<boolean>, timeoutMs = 30_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (Date.now() < end) {
    if (await fn().catch(() => false)) return;
    await sleep(100);
  }
  throw new Error(`timed out waiting for ${what}`);
}

/** Three masters (no replicas) joined by `redis-cli --cluster create`, every slot covered. */
export class TestRedisCluster {
  private constructor(readonly nodes: Server[]) {}

  static async start(masters = 3): Promise<TestRedisCluster> {
    const ports = await freePorts(masters * 2);
    const nodes = Array.from(
      { length: masters },
      (_, i) =>
        new Server(ports[i], [
          ...['--cluster-enabled', 'yes', '--cluster-port', String(ports[masters + i])],
          ...['--cluster-config-file', 'nodes.conf', '--cluster-node-timeout', '2000', '--appendonly', 'no'],
        ]),
    );
    const c = new TestRedisCluster(nodes);
    try {
      await Promise.all(nodes.map((n) => n.up()));
      await new Promise<void>((resolve, reject) =>
        execFile(
          'redis-cli',
          [
            '--cluster',
            'create',
            ...nodes.map((n) => `127.0.0.1:${n.port}`),
            '--cluster-replicas',
            '0',
            '--cluster-yes',
          ],
          { timeout: 60_000 },
          (err, _out, errOut) =>
            err ? reject(new Error(`redis-cli --cluster create: ${errOut || err.message}`)) : resolve(),
        ),
      );
      // every node must agree before a client's first slot map is right
      await until('cluster_state:ok on every node', async () => {
        const infos = await Promise.all(nodes.map((n) => redisCli(n.port, 'CLUSTER', 'INFO')));
        return infos.every(
          (i) => /cluster_state:ok/.test(i) && /cluster_known_nodes:(\d+)/.exec(i)?.[1] === String(masters),
        );
      });
    } catch (e) {
      await c.stop();
      throw e;
    }
    return c;
  }

  get url(): string {
    return `redis+cluster://${this.nodes.map((n) => `127.0.0.1:${n.port}`).join(',')}`;
  }

  async stop(): Promise<void> {
    await Promise.all(this.nodes.map((n) => n.kill()));
  }
}

/** A primary, one replica and three Sentinels (quorum 2) watching it as `name`. */
export class TestSentinel {
  readonly name = 'vigil-test';

  private constructor(
    readonly primary: Server,
    readonly replica: Server,
    readonly sentinels: Server[],
  ) {}

  static async start(): Promise<TestSentinel> {
    const [p, r, ...s] = await freePorts(5);
    const primary = new Server(p, ['--appendonly', 'no']);
    const replica = new Server(r, ['--appendonly', 'no', '--replicaof', '127.0.0.1', String(p)]);
    const conf = [
      `sentinel monitor vigil-test 127.0.0.1 ${p} 2`,
      'sentinel down-after-milliseconds vigil-test 1000',
      'sentinel failover-timeout vigil-test 10000',
      'sentinel parallel-syncs vigil-test 1',
      '',
    ].join('\n');
    const sentinels = s.map((port) => new Server(port, ['--sentinel'], conf));
    const t = new TestSentinel(primary, replica, sentinels);
    try {
      await primary.up();
      await replica.up();
      await until('the replica in sync', async () =>
        /master_link_status:up/.test(await redisCli(r, 'INFO', 'replication')),
      );
      for (const n of sentinels) await n.up();
      // each Sentinel must know the replica and the other two before a failover can be voted
      await until(
        'every Sentinel seeing the replica and its peers',
        async () => {
          for (const n of sentinels) {
            const m = await redisCli(n.port, 'SENTINEL', 'MASTER', 'vigil-test');
            const f = m.split('\n').map((x) => x.trim());
            const at = (k: string) => f[f.indexOf(k) + 1];
            if (at('num-slaves') !== '1' || at('num-other-sentinels') !== '2') return false;
          }
          return true;
        },
        30_000,
      );
    } catch (e) {
      await t.stop();
      throw e;
    }
    return t;
  }

  get url(): string {
    return `redis+sentinel://${this.sentinels.map((n) => `127.0.0.1:${n.port}`).join(',')}/${this.name}`;
  }

  /** The port the Sentinels give for the primary now. */
  async primaryPort(): Promise<number> {
    const out = await redisCli(this.sentinels[0].port, 'SENTINEL', 'GET-MASTER-ADDR-BY-NAME', this.name);
    return Number(out.trim().split('\n')[1]);
  }

  /** The primary dies (SIGKILL); resolves when the Sentinels have promoted the replica. */
  async killPrimary(): Promise<void> {
    await this.primary.kill();
    await until(
      'the Sentinels promoting the replica',
      async () => (await this.primaryPort()) === this.replica.port,
      30_000,
    );
    await until('the replica taking writes', async () =>
      /role:master/.test(await redisCli(this.replica.port, 'INFO', 'replication')),
    );
  }

  async stop(): Promise<void> {
    await Promise.all([...this.sentinels, this.replica, this.primary].map((n) => n.kill()));
  }
}
