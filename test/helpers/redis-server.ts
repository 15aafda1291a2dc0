import { type ChildProcess, spawn } from 'node:child_process';
import { createConnection } from 'node:net';
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
