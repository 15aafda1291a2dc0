import { randomUUID } from 'node:crypto';
import { chmodSync, existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { z } from 'zod';
import { createRegistry } from '../../builtins.ts';
import { eventually } from '../../channels/testing/index.ts';
import type { Alert } from '../../core/alert.ts';
import type { Channel, ChannelPlugin } from '../../core/contracts.ts';
import { DeliveryError } from '../../core/errors.ts';
import type { Registry } from '../../core/registry.ts';
import { RedisStore } from '../../core/store/redis.ts';
import type { Vigil } from '../../core/vigil.ts';
import { createVigil, type VigilOptions } from '../../index.ts';

export const REDIS_URL = process.env.VIGIL_TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';

/** The test tier running (vitest.config.ts): unit runs the memory cases, redis the Redis ones. */
const TIER = process.env.VIGIL_TEST_TIER;

/** The backends a shared suite runs in this tier (both when a file is run on its own). */
export function backends(): ('memory' | 'redis')[] {
  return TIER === 'unit' ? ['memory'] : TIER === 'redis' ? ['redis'] : ['memory', 'redis'];
}

/** Whether this tier runs Redis-only cases (describe.runIf(withRedis)). */
export const withRedis = TIER !== 'unit';
/** Whether this tier runs memory-only cases. */
export const withMemory = TIER !== 'redis';

/** A key prefix of its own per test run, deleted after. */
export function testPrefix(): string {
  return `vigil-test-${randomUUID().slice(0, 8)}`;
}

export function tempDir(name = 'vigil'): string {
  return mkdtempSync(join(tmpdir(), `${name}-`));
}

/** Deletes every key under a prefix (store and queue). */
export async function flushPrefix(prefix: string): Promise<void> {
  const s = new RedisStore({ url: REDIS_URL, prefix });
  await s.flushNamespace();
  await s.close();
}

/**
 * A channel type for tests: records what it was asked to deliver, and can be told to
 * fail (retryable or not) or hang. Behaviour is shared per `behaviour` object so a
 * test can change it while the pipeline runs.
 */
export interface Behaviour {
  mode: 'ok' | 'fail' | 'permanent' | 'hang';
  sent: Alert[];
  attempts: number;
}

export function recordingPlugin(b: Behaviour, type = 'recording'): ChannelPlugin<{ note?: string }> {
  return {
    kind: 'channel',
    type,
    options: z.strictObject({ note: z.string().optional() }),
    create(_c, _opts, name): Channel {
      return {
        type,
        name,
        async send(alert: Alert, signal: AbortSignal) {
          b.attempts++;
          if (b.mode === 'hang') {
            await new Promise((_, reject) => signal.addEventListener('abort', () => reject(new Error('aborted'))));
          }
          if (b.mode === 'fail') throw new DeliveryError('recording channel failed (503)', { retryable: true });
          if (b.mode === 'permanent') throw new DeliveryError('recording channel refused (400)', { retryable: false });
          b.sent.push(alert);
        },
      };
    },
  };
}

export function behaviour(mode: Behaviour['mode'] = 'ok'): Behaviour {
  return { mode, sent: [], attempts: 0 };
}

export interface TestVigilOptions extends Partial<VigilOptions> {
  backend: 'memory' | 'redis';
  prefix?: string;
  channels?: unknown[];
  notifications?: Record<string, unknown>;
  registry?: Registry;
}

/** A Vigil on the chosen backend with fast timings and the given channels. */
export async function testVigil(o: TestVigilOptions): Promise<Vigil> {
  const prefix = o.prefix ?? testPrefix();
  const overlay = {
    store:
      o.backend === 'redis' ? { backend: 'redis', redis_url: REDIS_URL, key_prefix: prefix } : { backend: 'memory' },
    notifications: {
      delivery_timeout: 500,
      retry_delay: 50,
      // One retry, as most tests count attempts; the retry tests set their own.
      max_attempts: 2,
      lock_duration: 2000,
      stalled_interval: 1000,
      ...(o.notifications ?? {}),
      channels: o.channels ?? [],
    },
    // No timer: tests tick the engine themselves.
    detection: { tick_interval: 0 },
    ...((o.overlay as object) ?? {}),
  };
  return createVigil({
    registry: o.registry ?? createRegistry(),
    overlay,
    env: o.env ?? {},
    clock: o.clock,
    logger: o.logger,
    worker: o.worker,
  });
}

/**
 * A recording fake `notify-send`: put `dir` first on PATH. Each call appends its
 * argv (one JSON array per line) to `dir/calls.jsonl`; FAKE_NOTIFY_EXIT sets the exit.
 */
export function fakeNotifySend(dir: string, exit = 0): { log: string; calls(): string[][] } {
  const log = join(dir, 'calls.jsonl');
  const script = `#!/usr/bin/env node
const fs = require('fs');
fs.appendFileSync(${JSON.stringify(log)}, JSON.stringify({ argv: process.argv.slice(2), dbus: process.env.DBUS_SESSION_BUS_ADDRESS || null }) + '\\n');
process.exit(Number(process.env.FAKE_NOTIFY_EXIT || ${exit}));
`;
  const p = join(dir, 'notify-send');
  writeFileSync(p, script);
  chmodSync(p, 0o755);
  return {
    log,
    calls: () =>
      existsSync(log)
        ? readFileSync(log, 'utf8')
            .trim()
            .split('\n')
            .filter(Boolean)
            .map((l) => JSON.parse(l).argv as string[])
        : [],
  };
}

// Polls until `fn` returns truthy: the channel kit's, the one implementation.
export { eventually };

/** The newest final delivery-log row (delivered, failed, suppressed) once there is one; retried attempts are skipped. */
export async function finalRow(v: Vigil): Promise<import('../../core/notifier/delivery-log.ts').DeliveryRecord> {
  const row = await eventually(async () => (await v.deliveryLog.recent()).find((r) => r.outcome !== 'retried'));
  return row!;
}

/** Makes `session` loop: `n` identical reads of one file that land nothing (the router tests cap such a session). */
export async function loopSession(vigil: Vigil, session: string, n = 10): Promise<void> {
  for (let i = 0; i < n; i++) {
    await vigil.progress({
      session_id: session,
      tool: 'read',
      call_id: `r${i}`,
      fingerprint: 'f'.repeat(64),
      target: 'src/app.js',
      exit: 0,
      landed: false,
      ts: Date.now(),
    });
  }
}
