import { afterAll, describe, expect, it } from 'vitest';
import type { SessionRow } from '../core/engine.ts';
import type { DeliveryRecord } from '../core/notifier/delivery-log.ts';
import { http, sleep, until } from './fixtures/opencode-e2e/procs.ts';
import { needsRedisServer } from './helpers/external.ts';
import { loopingScript } from './helpers/progress.ts';
import { TestRedis } from './helpers/redis-server.ts';
import { crash, postUntilAccepted, type Served, vigilServe } from './helpers/serve.ts';
import { WebhookReceiver, webhookChannel, webhookSecret } from './helpers/webhook-receiver.ts';

// A crash of `vigil serve` while its Redis is away, with inputs in flight: Redis (append
// only, so its data survives) is stopped under several clients posting looping sessions,
// the clients keep resending what got a 503, the service is killed (SIGKILL: whatever it
// held only in memory is gone), Redis comes back, the service is started again on the
// same port, and the clients' retries go through.
//
// How this shows "0 lost": a reference session runs the same script first, with no
// fault, and what it gets is the expectation: its verdict in the readout and the
// transitions the webhook receiver gets for its incident (state/seq/level: the stalling
// trigger, then the looping one). Every session of the chaos run must end with exactly
// that set at the receiver (a transition the service decided and then lost would be
// missing from it, and no retry could bring it back: the session's verdict no longer
// changes) and that verdict in the readout. Duplicates are deliveries of a transition
// already received; each must carry the same webhook-id (receivers dedupe on it), and
// there may be at most one per fault (the outage, the kill). And every session's readout
// counts the reference's calls: an input is judged once, retried or not.

const OWN_REDIS = needsRedisServer(import.meta.filename);
const SECRET = webhookSecret();
const CLIENTS = 6;
const SESSIONS = 8; // per client, one after another

const cleanups: (() => Promise<unknown>)[] = [];
afterAll(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
});

const rows = async (s: Served) => (await http<SessionRow[]>('GET', `${s.url}/sessions?limit=10000`)).data;

describe.runIf(OWN_REDIS)('kill -9 of vigil serve during a Redis outage', () => {
  it('loses no transition: every session flagged as an uninterrupted run is, its triggers received', async () => {
    const redis = await TestRedis.start({ aof: true });
    cleanups.push(() => redis.down('kill'));
    const receiver = new WebhookReceiver();
    await receiver.start();
    cleanups.push(() => receiver.stop());
    const config = {
      store: { backend: 'redis', key_prefix: 'kdo' },
      // The tick is where work left for later is picked up: often, so the test is short.
      detection: { tick_interval: '300ms' },
      server: { rate_limit: { max: 1_000_000, window: '1m' } },
      notifications: {
        max_attempts: 0,
        retry_delay: '200ms',
        retry_max_delay: '2s',
        // A killed worker's job is taken over after its lock expires.
        lock_duration: '2s',
        stalled_interval: '1s',
        channels: [{ name: 'desktop', remove: true }, webhookChannel(receiver.port)],
      },
    };
    const env = { REDIS_URL: redis.url, HOOK_SECRET: SECRET };
    let svc = await vigilServe({ name: 'vigil-kdo', config, env });
    const port = svc.port;
    cleanups.push(() => crash(svc));
    const url = `http://127.0.0.1:${port}`;

    // The reference: the same script, uninterrupted.
    const ref = 'ses_kdo_ref';
    for (const ev of loopingScript(ref)) expect((await http('POST', `${url}/progress`, ev)).status).toBe(202);
    const refVerdict = await until('the reference flagged', async () => {
      const r = (await rows(svc)).find((x) => x.session === ref);
      return r && r.verdict !== 'ok' ? r.verdict : undefined;
    });
    await until('the reference trigger(s)', () => receiver.transitions(ref).some((t) => t.endsWith(`/${refVerdict}`)));
    await sleep(1_000); // anything later for the reference would come now
    const expected = receiver.transitions(ref);
    expect(expected.length).toBeGreaterThan(0);

    // The chaos run.
    const total = CLIENTS * SESSIONS * loopingScript(ref).length;
    let posted = 0;
    let refused = 0; // answers that were not 2xx (503 while Redis is away, no answer while the service is down)
    const onRetry = () => {
      refused++;
    };
    const sessions: string[] = [];
    const client = async (c: number) => {
      for (let j = 0; j < SESSIONS; j++) {
        const s = `ses_kdo_c${c}_${j}`;
        sessions.push(s);
        for (const ev of loopingScript(s)) {
          await postUntilAccepted(`${url}/progress`, ev, { onRetry, timeoutMs: 90_000 });
          posted++;
        }
      }
    };
    const faults = (async () => {
      await until('a third of the stream', () => posted >= total / 3 || undefined, { intervalMs: 5 });
      await redis.down('shutdown'); // SIGTERM: a clean stop, the AOF kept
      const at = refused;
      // The clients are resending (a 503 may take up to store.timeout to come), and the
      // service has had time to try again what it keeps for later.
      await until('the clients refused', () => refused >= at + CLIENTS * 2 || undefined, { timeoutMs: 30_000 });
      await sleep(1_000);
      await crash(svc);
      await redis.up();
      svc = await vigilServe({ name: 'vigil-kdo', config, env, port });
    })();
    await Promise.all([...Array.from({ length: CLIENTS }, (_, c) => client(c)), faults]);

    // A transition whose job was still being retried (its worker killed, its lock not
    // expired yet) when a later transition of its incident went out is dropped, not sent
    // after it (by design: a channel never gets an older state after a newer one). It is
    // accounted for when the delivery log says so and the receiver got a later one.
    let superseded = new Set<string>();
    const readSuperseded = async () => {
      const log = (await http<DeliveryRecord[]>('GET', `${svc.url}/deliveries?limit=1000`)).data;
      superseded = new Set(
        log
          .filter((x) => x.outcome === 'suppressed' && /^superseded/.test(x.reason ?? ''))
          .map((x) => `${x.dedup_key}/${x.state}`),
      );
    };
    const seqOf = (t: string) => Number(t.split('/')[1]);
    const accounted = (s: string) => {
      const got = receiver.transitions(s);
      if (got.some((t) => !expected.includes(t))) return false;
      return expected.every(
        (t) => got.includes(t) || (superseded.has(`${s}/${t.split('/')[0]}`) && got.some((g) => seqOf(g) > seqOf(t))),
      );
    };
    const missing = () => sessions.filter((s) => !accounted(s));
    // On a failure: each incomplete session, what the receiver got and what the readout says.
    let last = '';
    await until(
      'every session transitions at the receiver',
      async () => {
        await readSuperseded().catch(() => {});
        if (missing().length === 0) return true;
        const now = await rows(svc).catch(() => []);
        last = missing()
          .map((s) => {
            const r = now.find((x) => x.session === s);
            return `${s}: received [${receiver.transitions(s)}], readout ${r?.verdict} after ${r?.calls} calls`;
          })
          .join('\n');
      },
      { timeoutMs: 60_000, detail: () => `expected [${expected}] for each\n${last}` },
    );
    await sleep(1_000); // a late duplicate would come now
    const readout = await rows(svc);
    await readSuperseded();
    const dropped = sessions.filter((s) => receiver.transitions(s).join() !== expected.join()).length;
    const refRow = readout.find((r) => r.session === ref);
    const readoutOf = (r: SessionRow | undefined) => `${r?.verdict} after ${r?.calls} calls`;
    // Flagged as the reference, and judged once each: an input retried after its answer
    // was lost is not counted again.
    const unlike = sessions
      .map((s) => ({ s, r: readout.find((x) => x.session === s) }))
      .filter(({ r }) => readoutOf(r) !== readoutOf(refRow))
      .map(({ s, r }) => `${s}: ${readoutOf(r)}`);
    const t = receiver.tally();
    console.log(
      `kill during outage: ${sessions.length} sessions (${total} events, ${refused} refused and resent), expected per session [${expected}], ${sessions.length - missing().length} complete (${dropped} with a transition superseded by a later one delivered), ${t.duplicates} duplicate(s); readout as the reference's (${readoutOf(refRow)}) for ${sessions.length - unlike.length}`,
    );
    expect(missing()).toEqual([]);
    expect(unlike).toEqual([]);
    expect(t.ids).toBe(true);
    expect(t.duplicates).toBeLessThanOrEqual(2);
  }, 180_000);
});
