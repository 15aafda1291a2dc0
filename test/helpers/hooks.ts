import { randomBytes } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { HookBridge } from '../../core/sensor.ts';
import type { VigilTransport } from '../../sensors/shared/client.ts';
import { HookHost } from '../../sensors/shared/hook-host.ts';

// A hook host for unit tests of the bridges: the payloads go in as the endpoint hands
// them over, Vigil's side is a function (what each request would answer), and every
// request the host sends on is recorded.

export interface SentRequest {
  method: string;
  path: string;
  headers: Record<string, string>;
  body?: unknown;
}

export function hookHarness(
  bridges: readonly HookBridge[],
  o: {
    answer?: (r: SentRequest) => unknown;
    now?: () => number;
    transport?: VigilTransport;
    deadlineMs?: number;
  } = {},
) {
  const sent: SentRequest[] = [];
  const answer = o.answer ?? (() => ({ directives: [] }));
  const transport: VigilTransport = o.transport ?? {
    async request(method, path, headers, body) {
      const r = { method, path, headers, ...(body !== undefined ? { body } : {}) };
      sent.push(r);
      return answer(r);
    },
  };
  const stateDir = mkdtempSync(join(tmpdir(), 'vigil-hook-state-'));
  const host = new HookHost({
    bridges: new Map(bridges.map((b) => [b.sensor, b])),
    transport,
    secret: randomBytes(32),
    stateDir,
    version: 'test',
    ...(o.now ? { clock: o.now } : {}),
    ...(o.deadlineMs ? { deadlineMs: o.deadlineMs } : {}),
  });
  return {
    host,
    sent,
    stateDir,
    /** The events posted to /progress so far. */
    posted: () => sent.filter((r) => r.path === '/progress').flatMap((r) => r.body as Record<string, unknown>[]),
    /**
     * One hook call as the agent makes it; the parsed answer, or undefined for none.
     * Waits until the call's events are sent (an observe-only call's too, which the host
     * would otherwise send with the next answered call).
     */
    async call(sensor: string, payload: unknown): Promise<Record<string, unknown> | undefined> {
      const r = await host.handle(sensor, JSON.stringify(payload), host.key);
      if (r.status !== 200) throw new Error(`hook answered ${r.status}`);
      await host.close();
      return r.body ? JSON.parse(r.body) : undefined;
    },
  };
}
