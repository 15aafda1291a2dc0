// `vigil/testing`: the channel test kit. A channel type's tests build a Vigil with that
// one channel against a local server speaking the provider's wire format, send alerts
// through the real pipeline (lifecycle, routing, queue, worker, delivery log), and read
// what arrived. channelContract() runs the rules every channel must keep. The built-in
// channels' tests use it; a third party's can too (any vitest- or jest-style runner).
import 'reflect-metadata';
import type { AlertInput } from '../../core/alert.ts';
import type { Logger } from '../../core/logger.ts';
import type { DeliveryRecord } from '../../core/notifier/delivery-log.ts';
import type { Registry } from '../../core/registry.ts';
import { createKernel, type Vigil } from '../../core/vigil.ts';
import { captureLogger, closedPort, type WireReply, type WireRequest, type WireServer, wireServer } from './wire.ts';

export { captureLogger, closedPort, type WireReply, type WireRequest, type WireServer, wireServer };

export interface KitVigilOptions {
  /** What exists; default: the registry the kit was made with. */
  registry?: Registry;
  /** Environment the channel reads its secrets from (`*_env` options). */
  env?: Record<string, string>;
  logger?: Logger;
  /** Extra notifications settings (delivery_timeout, retry_delay, ...). */
  notifications?: Record<string, unknown>;
}

/** Polls until `fn` returns something truthy; a generous ceiling, never a timing assertion. */
export async function eventually<T>(fn: () => Promise<T> | T, timeoutMs = 20_000, stepMs = 25): Promise<T> {
  const until = Date.now() + timeoutMs;
  let last: unknown;
  while (Date.now() < until) {
    try {
      const v = await fn();
      if (v) return v;
    } catch (e) {
      last = e;
    }
    await new Promise((r) => setTimeout(r, stepMs));
  }
  throw new Error(`condition not met within ${timeoutMs} ms${last ? `: ${(last as Error).message}` : ''}`);
}

/** A trigger as a detector would raise it. */
export const sampleIncident: AlertInput = {
  dedup_key: 'vigil:kit:ses_root',
  severity: 'warning',
  title: 'looping: build (ses_child)',
  summary: '423 calls, 0 landed, read navbar.js x61',
  details: 'tree ses_root: 3 agents\nread navbar.js x61',
  source: 'no-progress',
};

/**
 * Servers and Vigil instances of one test file, closed together by close() (call it
 * from afterEach). Instances run in memory with fast timings: a 500 ms delivery
 * timeout, a 50 ms retry delay, two attempts at most.
 */
export class ChannelKit {
  private readonly vigils: Vigil[] = [];
  private readonly servers: WireServer[] = [];

  constructor(private readonly registry: Registry) {}

  /** A local endpoint answering `fallback` (or what the test scripts). */
  async server(fallback: WireReply | ((r: WireRequest) => WireReply)): Promise<WireServer> {
    const s = await wireServer(fallback);
    this.servers.push(s);
    return s;
  }

  /** A started Vigil whose only channel is `entry` (min_severity info, no quiet window unless given). */
  async vigil(entry: Record<string, unknown>, o: KitVigilOptions = {}): Promise<Vigil> {
    const v = await createKernel({
      registry: o.registry ?? this.registry,
      env: o.env ?? {},
      ...(o.logger ? { logger: o.logger } : {}),
      overlay: {
        store: { backend: 'memory' },
        detection: { tick_interval: 0 },
        notifications: {
          delivery_timeout: 500,
          retry_delay: 50,
          // Exactly one retry unless the test asks otherwise: attempts are then countable.
          max_attempts: 2,
          ...(o.notifications ?? {}),
          channels: [{ name: 'ch', min_severity: 'info', quiet_window: 0, ...entry }],
        },
      },
    });
    this.vigils.push(v);
    return v;
  }

  /**
   * The delivery log once it holds `n` final rows (delivered, failed, suppressed),
   * oldest first; `retried` rows (one per failed attempt that is retried) are left out
   * unless asked for.
   */
  async rows(v: Vigil, n: number, o: { retried?: boolean } = {}): Promise<DeliveryRecord[]> {
    const r = await eventually(async () => {
      const all = (await v.deliveryLog.recent()).filter((x) => o.retried || x.outcome !== 'retried');
      return all.length >= n ? all : undefined;
    });
    return [...(r ?? [])].reverse();
  }

  async close(): Promise<void> {
    for (const v of this.vigils.splice(0)) await v.close();
    for (const s of this.servers.splice(0)) await s.close();
  }
}

/** The test functions of the caller's runner (vitest or jest). */
export interface TestApi {
  describe(name: string, fn: () => void): void;
  it(name: string, fn: () => Promise<void>, timeout?: number): void;
  expect: (v: unknown) => any;
  afterEach(fn: () => Promise<void>): void;
}

export interface ChannelContractSpec {
  /** The channel type under test, as registered. */
  type: string;
  registry: Registry;
  /** The channel entry for a server at `origin` (http://127.0.0.1:port). */
  entry(origin: string): Record<string, unknown>;
  env?: Record<string, string>;
  /** The provider's answers. */
  success: WireReply | ((r: WireRequest) => WireReply);
  /** A failure the provider means as "try again" (a 5xx or 429). */
  retryable: WireReply;
  /** A failure that no retry can fix (a 4xx). */
  permanent: WireReply;
  /** Secret values that must never appear in a failure reason or a log line. */
  secrets?: string[];
}

/**
 * The rules every channel keeps, run against its local server: a trigger and a resolve
 * are delivered; a retryable failure is retried exactly once; a permanent one is tried
 * once; a refused connection and a hung endpoint are retryable failures bounded by the
 * delivery timeout; no secret reaches a failure reason or a log line.
 */
export function channelContract(spec: ChannelContractSpec, t: TestApi): void {
  const kit = new ChannelKit(spec.registry);
  t.afterEach(() => kit.close());
  const incident = { ...sampleIncident, dedup_key: `vigil:kit:${spec.type}` };

  t.describe(`${spec.type} channel contract`, () => {
    t.it('delivers a trigger and its resolve', async () => {
      const s = await kit.server(spec.success);
      const v = await kit.vigil(spec.entry(s.origin), { env: spec.env });
      await v.notifier.notify(incident);
      await kit.rows(v, 1);
      await v.notifier.notify({ ...incident, state: 'resolve', summary: 'recovered' });
      const rows = await kit.rows(v, 2);
      t.expect(rows.map((r) => `${r.state}:${r.outcome}`)).toEqual(['trigger:delivered', 'resolve:delivered']);
      t.expect(s.requests.length).toBe(2);
    });

    t.it('retries a retryable failure exactly once, then delivers', async () => {
      const s = await kit.server(spec.success);
      s.script(spec.retryable);
      const v = await kit.vigil(spec.entry(s.origin), { env: spec.env });
      await v.notifier.notify(incident);
      const [row] = await kit.rows(v, 1);
      t.expect({ outcome: row.outcome, attempts: row.attempts }).toEqual({ outcome: 'delivered', attempts: 2 });
      t.expect(s.requests.length).toBe(2);
    });

    t.it('tries a permanent failure once and logs it with a reason', async () => {
      const s = await kit.server(spec.permanent);
      const log = captureLogger();
      const v = await kit.vigil(spec.entry(s.origin), { env: spec.env, logger: log.logger });
      await v.notifier.notify(incident);
      const [row] = await kit.rows(v, 1);
      t.expect({ outcome: row.outcome, attempts: row.attempts }).toEqual({ outcome: 'failed', attempts: 1 });
      t.expect(s.requests.length).toBe(1);
      t.expect(typeof row.reason === 'string' && row.reason.length > 0).toBe(true);
      for (const secret of spec.secrets ?? []) {
        t.expect(row.reason).not.toContain(secret);
        t.expect(log.text()).not.toContain(secret);
      }
    });

    t.it('a refused connection is retryable: two attempts, then failed', async () => {
      const v = await kit.vigil(spec.entry(`http://127.0.0.1:${await closedPort()}`), { env: spec.env });
      await v.notifier.notify(incident);
      const [row] = await kit.rows(v, 1);
      t.expect({ outcome: row.outcome, attempts: row.attempts }).toEqual({ outcome: 'failed', attempts: 2 });
    });

    t.it('an endpoint that never answers is cut by the delivery timeout and retried once', async () => {
      const s = await kit.server({ status: 200, hang: true });
      const v = await kit.vigil(spec.entry(s.origin), { env: spec.env, notifications: { delivery_timeout: 200 } });
      await v.notifier.notify(incident);
      const [row] = await kit.rows(v, 1);
      t.expect({ outcome: row.outcome, attempts: row.attempts }).toEqual({ outcome: 'failed', attempts: 2 });
      t.expect(row.reason).toContain('timed out');
    });
  });
}
