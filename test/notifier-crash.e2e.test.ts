import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { createRegistry } from '../builtins.ts';
import { markerPlugin } from './fixtures/marker-channel.ts';
import { eventually, flushPrefix, tempDir, testPrefix, testVigil } from './helpers/index.ts';

const children: ChildProcess[] = [];
const prefix = testPrefix();
afterAll(async () => {
  for (const c of children) c.kill('SIGKILL');
  await flushPrefix(prefix);
});

function startWorker(file: string, mode: 'hang' | 'ok'): Promise<ChildProcess> {
  const c = spawn(process.execPath, ['bin/run-ts.mjs', 'test/fixtures/crash-worker.ts', prefix, file, mode], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  children.push(c);
  return new Promise((resolve, reject) => {
    c.stdout!.on('data', (d) => String(d).includes('ready') && resolve(c));
    c.once('exit', (code) => reject(new Error(`worker exited early (${code})`)));
  });
}

const lines = (file: string) => (existsSync(file) ? readFileSync(file, 'utf8').trim().split('\n').filter(Boolean) : []);

describe('with Redis, a worker killed mid-delivery', () => {
  it('loses nothing: the next worker delivers the alert and the log shows it; a duplicate enqueue is not delivered twice', async () => {
    const file = join(tempDir('crash'), 'marks.log');
    // The producer: accepts alerts into the Redis queue, runs no worker of its own.
    const producer = await testVigil({
      backend: 'redis',
      prefix,
      worker: false,
      registry: createRegistry().register(markerPlugin),
      channels: [{ name: 'mark', type: 'marker', file, min_severity: 'info' }],
    });
    try {
      const a = await startWorker(file, 'hang');
      const r = await producer.notifier.notify({
        dedup_key: 'ses_root',
        severity: 'critical',
        title: 'looping',
        summary: 'read navbar.js x61',
        source: 'no-progress',
      });
      expect(r.channels[0].outcome).toBe('queued');
      await eventually(() => lines(file).some((l) => l.startsWith('start ses_root trigger')));
      a.kill('SIGKILL');
      await new Promise((res) => a.once('exit', res));
      expect(lines(file).some((l) => l.startsWith('delivered'))).toBe(false);

      const b = await startWorker(file, 'ok');
      await eventually(() => lines(file).some((l) => l.startsWith('delivered ses_root trigger')), 30_000);
      const row = await eventually(async () =>
        (await producer.deliveryLog.recent()).find((x) => x.outcome === 'delivered'),
      );
      expect(row).toMatchObject({ channel: 'mark', dedup_key: 'ses_root', state: 'trigger', outcome: 'delivered' });
      expect(row!.attempts).toBeGreaterThanOrEqual(2); // the killed start counts

      // The same transition again: the lifecycle sees no change, and a raw re-enqueue of
      // the job id is refused by the queue.
      const again = await producer.notifier.notify({
        dedup_key: 'ses_root',
        severity: 'critical',
        title: 'looping',
        summary: 'read navbar.js x61',
        source: 'no-progress',
      });
      expect(again.fired).toBeUndefined();
      expect(await producer.queue.enqueue({ id: r.channels[0].job_id!, channel: 'mark', alert: {} as never })).toBe(
        false,
      );
      await new Promise((res) => setTimeout(res, 1500));
      expect(lines(file).filter((l) => l.startsWith('delivered'))).toHaveLength(1);
      b.kill('SIGTERM');
    } finally {
      await producer.close();
    }
  });
});
