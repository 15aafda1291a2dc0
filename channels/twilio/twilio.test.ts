import { afterEach, describe, expect, it } from 'vitest';
import { createRegistry } from '../../builtins.ts';
import type { Alert, AlertInput } from '../../core/alert.ts';
import { ConfigError, loadConfig } from '../../core/config.ts';
import type { Vigil } from '../../core/vigil.ts';
import { eventually } from '../../test/helpers/index.ts';
import {
  captureLogger,
  closedPort,
  TWILIO,
  type WireReply,
  type WireRequest,
  type WireServer,
} from '../../test/helpers/wire-servers.ts';
import { ChannelKit, channelContract } from '../testing/index.ts';
import { maskNumber, septets, smsBody } from './twilio.sms.ts';

const kit = new ChannelKit(createRegistry());
afterEach(() => kit.close());

const SID = 'AC0123456789abcdef0123456789abcdef';
const TOKEN = 'f00dfeedf00dfeedf00dfeedf00dfeed';
const ENV = { TWILIO_ACCOUNT_SID: SID, TWILIO_AUTH_TOKEN: TOKEN };
const ALICE = '+14155550123';
const BOB = '+447700900456';

const incident: AlertInput = {
  dedup_key: 'ses_root',
  severity: 'critical',
  title: 'looping: build (ses_child)',
  summary: '423 calls, 0 landed, read navbar.js x61',
  details: 'a long incident report that SMS leaves out',
  source: 'no-progress',
};

const server = (fallback: WireReply | ((r: WireRequest) => WireReply)) => kit.server(fallback);
const rows = (v: Vigil, n: number, o?: { retried?: boolean }) => kit.rows(v, n, o);

const entry = (origin: string, channel: Record<string, unknown> = {}) => ({
  name: 'sms',
  type: 'twilio',
  account_sid_env: 'TWILIO_ACCOUNT_SID',
  auth_token_env: 'TWILIO_AUTH_TOKEN',
  from: '+15005550006',
  to: [ALICE],
  url: origin,
  ...channel,
});

const vigil = (s: WireServer, channel: Record<string, unknown> = {}, logger = captureLogger().logger) =>
  kit.vigil(entry(s.origin, channel), { env: ENV, logger });

channelContract(
  {
    type: 'twilio',
    registry: createRegistry(),
    entry: (origin) => entry(origin),
    env: ENV,
    success: TWILIO.created,
    retryable: TWILIO.tooManyRequests(),
    permanent: TWILIO.invalidTo('+14155550123'),
    secrets: [TOKEN],
  },
  { describe, it, expect, afterEach },
);

const fields = (q: WireRequest) => [...new URLSearchParams(q.text).entries()].sort();
const to = (q: WireRequest) => new URLSearchParams(q.text).get('To');

describe('twilio channel (SMS through the official SDK)', () => {
  it('POSTs To/From/Body form-encoded to Messages.json with Basic SID:token; 201 is success; resolve says recovered', async () => {
    const s = await server(TWILIO.created);
    const v = await vigil(s);
    await v.notifier.notify(incident);
    await v.notifier.notify({ ...incident, state: 'resolve' });
    const r = await rows(v, 2);
    expect(r.map((x) => [x.state, x.outcome, x.attempts])).toEqual([
      ['trigger', 'delivered', 1],
      ['resolve', 'delivered', 1],
    ]);
    const [trigger, resolve] = s.requests;
    for (const q of s.requests) {
      expect(q.method).toBe('POST');
      expect(q.url).toBe(`/2010-04-01/Accounts/${SID}/Messages.json`);
      expect(q.headers['content-type']).toBe('application/x-www-form-urlencoded');
      expect(q.headers.authorization).toBe(`Basic ${Buffer.from(`${SID}:${TOKEN}`).toString('base64')}`);
    }
    expect(fields(trigger)).toEqual([
      ['Body', 'CRITICAL looping: build (ses_child): 423 calls, 0 landed, read navbar.js x61'],
      ['From', '+15005550006'],
      ['To', ALICE],
    ]);
    expect(trigger.text).toContain('To=%2B14155550123');
    expect(fields(resolve)).toEqual([
      ['Body', 'recovered: looping: build (ses_child)'],
      ['From', '+15005550006'],
      ['To', ALICE],
    ]);
  });

  it('a messaging service alone sends MessagingServiceSid and no From', async () => {
    const s = await server(TWILIO.created);
    const mg = `MG${'0a'.repeat(16)}`;
    const v = await vigil(s, { from: undefined, messaging_service_sid: mg });
    await v.notifier.notify(incident);
    await rows(v, 1);
    expect(fields(s.requests[0]).map(([k]) => k)).toEqual(['Body', 'MessagingServiceSid', 'To']);
    expect(new URLSearchParams(s.requests[0].text).get('MessagingServiceSid')).toBe(mg);
  });

  it('a 429 (20429) then 201 delivers on the retry; a 5xx is retried too', async () => {
    const s = await server(TWILIO.created);
    s.script(TWILIO.tooManyRequests());
    const v = await vigil(s);
    await v.notifier.notify(incident);
    const [row] = await rows(v, 1);
    expect(row).toMatchObject({ outcome: 'delivered', attempts: 2 });
    expect(s.requests).toHaveLength(2);

    const down = await server(TWILIO.error(503, 20500, 'Service Unavailable'));
    const v2 = await vigil(down);
    await v2.notifier.notify(incident);
    const [row2] = await rows(v2, 1);
    expect(row2).toMatchObject({
      outcome: 'failed',
      attempts: 2,
      reason: `twilio sent 0 of 1; to[0] ${maskNumber(ALICE)}: 503 code 20500`,
    });
    expect(down.requests).toHaveLength(2);
  });

  it("a 429's Retry-After is honoured: the retry waits at least that long", async () => {
    const s = await server(TWILIO.created);
    s.script(TWILIO.tooManyRequests('1'));
    const v = await vigil(s);
    await v.notifier.notify(incident);
    const [row] = await rows(v, 1);
    expect(row).toMatchObject({ outcome: 'delivered', attempts: 2 });
    const [retried] = await rows(v, 1, { retried: true });
    expect(retried).toMatchObject({ outcome: 'retried', retry_in_ms: 1000 });
    // A lower bound only: the retry cannot come sooner than Twilio asked.
    expect(s.requests[1].at - s.requests[0].at).toBeGreaterThanOrEqual(1000);
  });

  it('a refused connection is retryable and names the error code only', async () => {
    const port = await closedPort();
    const s = await server(TWILIO.created);
    const v = await vigil(s, { url: `http://127.0.0.1:${port}` });
    await v.notifier.notify(incident);
    const [row] = await rows(v, 1);
    expect(row).toMatchObject({
      outcome: 'failed',
      attempts: 2,
      reason: 'twilio sent 0 of 1; to[0] +14*******23: request failed (ECONNREFUSED)',
    });
  });

  it('permanent codes (21211, 21610, 21608, 21614, 20003) are tried once', async () => {
    for (const [reply, why] of [
      [TWILIO.invalidTo('4155550123'), '400 code 21211 (invalid To number)'],
      [
        TWILIO.error(400, 21610, 'Attempt to send to unsubscribed recipient'),
        '400 code 21610 (recipient replied STOP)',
      ],
      [TWILIO.error(400, 21608, 'unverified'), '400 code 21608 (number not verified on a trial account)'],
      [TWILIO.error(400, 21614, 'not a mobile number'), '400 code 21614 (not an SMS-capable number)'],
      [TWILIO.error(401, 20003, 'Authenticate'), '401 code 20003 (authentication failed)'],
    ] as const) {
      const s = await server(reply);
      const v = await vigil(s);
      await v.notifier.notify(incident);
      const [row] = await rows(v, 1);
      expect(row).toMatchObject({
        outcome: 'failed',
        attempts: 1,
        reason: `twilio sent 0 of 1; to[0] +14*******23: ${why}`,
      });
      expect(s.requests).toHaveLength(1);
    }
  });

  it('several numbers: a retry texts only the numbers that failed retryably; a bad number fails the delivery by index', async () => {
    const CAROL = '+61491570156';
    const seen = new Map<string, number>();
    // Alice: fine. Bob: rate limited once, then fine. Carol: an invalid number.
    const s = await server((q) => {
      const n = to(q)!;
      seen.set(n, (seen.get(n) ?? 0) + 1);
      if (n === BOB && seen.get(n) === 1) return TWILIO.tooManyRequests();
      if (n === CAROL) return TWILIO.invalidTo('61491570156');
      return TWILIO.created(q);
    });
    const cap = captureLogger();
    const v = await vigil(s, { to: [ALICE, BOB, CAROL] }, cap.logger);
    await v.notifier.notify(incident);
    const [row] = await rows(v, 1);
    // Attempt 1: three requests; the retry only Bob's. Carol's 21211 makes the outcome a failure.
    expect(Object.fromEntries(seen)).toEqual({ [ALICE]: 1, [BOB]: 2, [CAROL]: 1 });
    expect(row).toMatchObject({
      outcome: 'failed',
      attempts: 2,
      reason: 'twilio sent 2 of 3; to[2] +61*******56: 400 code 21211 (invalid To number)',
    });
    // Phone numbers are personal data: never whole in the reason or the log.
    await eventually(() => cap.text().includes('alert delivery failed'));
    const everything = `${JSON.stringify(await v.deliveryLog.recent())}${cap.text()}`;
    for (const n of [ALICE, BOB, CAROL, '61491570156', TOKEN]) expect(everything).not.toContain(n);
  });

  it('only permanent failures among several numbers: no retry at all', async () => {
    const s = await server((q) => (to(q) === BOB ? TWILIO.invalidTo('7700900456') : TWILIO.created(q)));
    const v = await vigil(s, { to: [ALICE, BOB] });
    await v.notifier.notify(incident);
    const [row] = await rows(v, 1);
    expect(row).toMatchObject({
      outcome: 'failed',
      attempts: 1,
      reason: 'twilio sent 1 of 2; to[1] +44********56: 400 code 21211 (invalid To number)',
    });
    expect(s.requests).toHaveLength(2);
  });
});

describe('twilio SMS body', () => {
  const alert = (over: Partial<Alert>): Alert => ({ ...incident, state: 'trigger', at: 0, seq: 1, ...over }) as Alert;

  it('fits the segment budget in GSM-7: 160 for one segment, 153 each for more; extension characters count twice', () => {
    const long = alert({ summary: 'word '.repeat(200) });
    expect(smsBody(long, 1).length).toBeLessThanOrEqual(160);
    expect(smsBody(long, 1)).toMatch(/^CRITICAL looping: build \(ses_child\): word .*\.\.\.$/);
    expect(smsBody(long, 2).length).toBeLessThanOrEqual(306);
    expect(smsBody(long, 2).length).toBeGreaterThan(160);
    const braces = smsBody(alert({ summary: '{}'.repeat(200) }), 1);
    expect(septets(braces)).toBeLessThanOrEqual(160);
    expect(braces.length).toBeGreaterThan(70);
  });

  it('stays one ASCII line in the GSM-7 alphabet', () => {
    const b = smsBody(alert({ title: 'caf\u00e9 `rm`', summary: 'line one\nline two \u{1F600}' }), 1);
    expect(b).toBe("CRITICAL caf? 'rm': line one line two ??");
    expect(b).toMatch(/^[\x20-\x7e]*$/);
  });

  it('masks numbers: country prefix and last two digits', () => {
    expect(maskNumber('+14155550123')).toBe('+14*******23');
    expect(maskNumber('+447700900456')).toBe('+44********56');
  });
});

describe('twilio config', () => {
  const load = (ch: Record<string, unknown>, env: NodeJS.ProcessEnv = ENV) =>
    loadConfig({
      registry: createRegistry(),
      env,
      noDefaults: true,
      overlay: {
        notifications: {
          channels: [
            {
              name: 'sms',
              type: 'twilio',
              account_sid_env: 'TWILIO_ACCOUNT_SID',
              auth_token_env: 'TWILIO_AUTH_TOKEN',
              to: [ALICE],
              from: '+15005550006',
              ...ch,
            },
          ],
        },
      },
    });
  const problems = (fn: () => unknown) => {
    try {
      fn();
    } catch (e) {
      if (e instanceof ConfigError) return e.problems;
      throw e;
    }
    return [];
  };

  it('names a missing credential variable; needs a sender; to is a non-empty list of E.164 numbers', () => {
    expect(problems(() => load({}, { TWILIO_ACCOUNT_SID: SID }))).toEqual([
      'notifications.channels[0].auth_token_env: environment variable TWILIO_AUTH_TOKEN is not set (channel "sms")',
    ]);
    expect(problems(() => load({ from: undefined }))).toEqual([
      'notifications.channels[0].from: set from, messaging_service_sid, or both',
    ]);
    expect(problems(() => load({ to: [] }))[0]).toMatch(/^notifications\.channels\[0\]\.to: /);
    expect(problems(() => load({ to: ['4155550123'] }))).toEqual([
      'notifications.channels[0].to[0]: an E.164 number: + and 7 to 15 digits',
    ]);
    expect(problems(() => load({ to: [ALICE, ALICE] }))).toEqual([
      'notifications.channels[0].to: a number is listed twice',
    ]);
    expect(problems(() => load({ max_segment: 2 }))).toEqual(['notifications.channels[0].max_segment: unknown key']);
    expect(problems(() => load({ messaging_service_sid: `MG${'0a'.repeat(16)}` }))).toEqual([]);
  });
});
