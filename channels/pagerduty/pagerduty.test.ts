import { hostname } from 'node:os';
import { afterEach, describe, expect, it } from 'vitest';
import { createRegistry } from '../../builtins.ts';
import type { Alert, AlertInput } from '../../core/alert.ts';
import { ConfigError, loadConfig } from '../../core/config.ts';
import type { Vigil } from '../../core/vigil.ts';
import { eventually } from '../../test/helpers/index.ts';
import {
  captureLogger,
  PD,
  type WireReply,
  type WireRequest,
  type WireServer,
} from '../../test/helpers/wire-servers.ts';
import { ChannelKit, channelContract } from '../testing/index.ts';
import { DETAILS_REMOVED, MAX_EVENT_BYTES, pagerDutyEvent } from './pagerduty.event.ts';

const kit = new ChannelKit(createRegistry());
afterEach(() => kit.close());

/** 32 characters, as PagerDuty integration keys are. */
const ROUTING_KEY = 'R0ut1ngK3yR0ut1ngK3yR0ut1ngK3y32';

const incident: AlertInput = {
  dedup_key: 'vigil:no-progress:ses_root',
  severity: 'warning',
  title: 'looping: build (ses_child)',
  summary: '423 calls, 0 landed, read navbar.js x61',
  details: 'tree ses_root: 3 agents\nread navbar.js x61',
  source: 'no-progress',
};

const server = (fallback: WireReply | ((r: WireRequest) => WireReply)) => kit.server(fallback);
const rows = (v: Vigil, n: number) => kit.rows(v, n);

const entry = (origin: string, extra: Record<string, unknown> = {}) => ({
  name: 'oncall',
  type: 'pagerduty',
  routing_key_env: 'PD_ROUTING_KEY',
  url: `${origin}/v2/enqueue`,
  source: 'vigil@host1',
  ...extra,
});

const vigil = (s: WireServer, logger = captureLogger().logger, extra: Record<string, unknown> = {}) =>
  kit.vigil(entry(s.origin, extra), { env: { PD_ROUTING_KEY: ROUTING_KEY }, logger });

channelContract(
  {
    type: 'pagerduty',
    registry: createRegistry(),
    entry: (origin) => entry(origin),
    env: { PD_ROUTING_KEY: ROUTING_KEY },
    success: PD.accepted('vigil:kit:pagerduty'),
    retryable: PD.serverError,
    permanent: PD.invalid(),
    secrets: [ROUTING_KEY],
  },
  { describe, it, expect, afterEach },
);

/** The trigger event PagerDuty's docs show, field for field, in the order we send it. */
function expectedTrigger(severity: string, summary: string, at: string, state: string, seq: number) {
  return JSON.stringify({
    routing_key: ROUTING_KEY,
    event_action: 'trigger',
    dedup_key: 'vigil:no-progress:ses_root',
    payload: {
      summary,
      source: 'vigil@host1',
      severity,
      timestamp: at,
      component: 'no-progress',
      group: 'vigil',
      class: 'no-progress',
      custom_details: {
        details: 'tree ses_root: 3 agents\nread navbar.js x61',
        title: 'looping: build (ses_child)',
        summary: '423 calls, 0 landed, read navbar.js x61',
        state,
        seq,
      },
    },
    client: 'Vigil',
  });
}

describe('pagerduty channel (Events API v2)', () => {
  it('trigger, escalate (same dedup_key, higher severity) and resolve, byte for byte; 202 is success', async () => {
    const s = await server((r) => PD.accepted(JSON.parse(r.text).dedup_key));
    const v = await vigil(s);
    await v.notifier.notify(incident);
    await v.notifier.notify({ ...incident, severity: 'critical' });
    await v.notifier.notify({ ...incident, state: 'resolve' });
    const r = await rows(v, 3);
    expect(r.map((x) => [x.state, x.outcome, x.attempts])).toEqual([
      ['trigger', 'delivered', 1],
      ['escalate', 'delivered', 1],
      ['resolve', 'delivered', 1],
    ]);
    for (const req of s.requests) {
      expect(req.method).toBe('POST');
      expect(req.url).toBe('/v2/enqueue');
      expect(req.headers['content-type']).toBe('application/json');
      // No auth header: the key travels in the body.
      expect(req.headers.authorization).toBeUndefined();
    }
    const [trigger, escalate, resolve] = s.requests;
    const ts = (q: WireRequest) => JSON.parse(q.text).payload.timestamp as string;
    expect(ts(trigger)).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    expect(trigger.text).toBe(
      expectedTrigger(
        'warning',
        'looping: build (ses_child): 423 calls, 0 landed, read navbar.js x61',
        ts(trigger),
        'trigger',
        1,
      ),
    );
    expect(escalate.text).toBe(
      expectedTrigger(
        'critical',
        'Escalated: looping: build (ses_child): 423 calls, 0 landed, read navbar.js x61',
        ts(escalate),
        'escalate',
        2,
      ),
    );
    expect(resolve.text).toBe(
      `{"routing_key":"${ROUTING_KEY}","dedup_key":"vigil:no-progress:ses_root","event_action":"resolve"}`,
    );
  });

  it('a 500 then 202 delivers on the retry (2 requests); a 400 is tried once', async () => {
    const s = await server((r) => PD.accepted(JSON.parse(r.text).dedup_key));
    s.script(PD.serverError);
    const v = await vigil(s);
    await v.notifier.notify(incident);
    const [row] = await rows(v, 1);
    expect(row).toMatchObject({ outcome: 'delivered', attempts: 2 });
    expect(s.requests).toHaveLength(2);
    expect(s.requests[1].text).toBe(s.requests[0].text);

    const bad = await server(PD.invalid());
    const v2 = await vigil(bad);
    await v2.notifier.notify(incident);
    const [row2] = await rows(v2, 1);
    expect(row2).toMatchObject({
      outcome: 'failed',
      attempts: 1,
      reason: "pagerduty answered 400 (invalid event: Length of 'routing_key' is incorrect (should be 32 characters))",
    });
    expect(bad.requests).toHaveLength(1);
  });

  it('429 (plain text) and 5xx are retried once, then failed', async () => {
    for (const [reply, reason] of [
      [PD.rateLimited, 'pagerduty answered 429'],
      [PD.serverError, 'pagerduty answered 500 (error: Internal Server Error)'],
    ] as const) {
      const s = await server(reply);
      const v = await vigil(s);
      await v.notifier.notify(incident);
      const [row] = await rows(v, 1);
      expect(row).toMatchObject({ outcome: 'failed', attempts: 2, reason });
      expect(s.requests).toHaveLength(2);
    }
  });

  it('the routing key appears in no failure reason and no log line, even when PagerDuty echoes it', async () => {
    const cap = captureLogger();
    const s = await server(PD.invalid([`Routing key ${ROUTING_KEY} is not a known integration`]));
    const v = await vigil(s, cap.logger);
    await v.notifier.notify(incident);
    const [row] = await rows(v, 1);
    expect(row.reason).toBe(
      'pagerduty answered 400 (invalid event: Routing key [REDACTED] is not a known integration)',
    );
    await eventually(() => cap.text().includes('alert delivery failed'));
    expect(`${JSON.stringify(await v.deliveryLog.recent())}${cap.text()}`).not.toContain(ROUTING_KEY);
  });

  it('keeps the event under 512 KB by dropping custom details (as Alertmanager does); summary <= 1024', () => {
    const a: Alert = {
      ...incident,
      state: 'trigger',
      severity: 'critical',
      summary: 'x'.repeat(5000),
      details: 'y'.repeat(600_000),
      at: Date.parse('2026-11-30T10:00:00Z'),
      seq: 1,
    } as Alert;
    const e = pagerDutyEvent(a, ROUTING_KEY, { source: 'vigil@host1', group: 'vigil' });
    if (e.event_action !== 'trigger') throw new Error('expected a trigger');
    expect(e.payload.custom_details).toEqual({ error: DETAILS_REMOVED });
    expect(e.payload.summary.length).toBe(1024);
    expect(Buffer.byteLength(JSON.stringify(e))).toBeLessThan(MAX_EVENT_BYTES);
    expect(e.payload.timestamp).toBe('2026-11-30T10:00:00.000Z');
  });

  it('config: routing_key_env is required and its variable must be set; defaults for url and source', () => {
    const load = (ch: Record<string, unknown>, env: NodeJS.ProcessEnv) =>
      loadConfig({
        registry: createRegistry(),
        env,
        noDefaults: true,
        overlay: { notifications: { channels: [{ name: 'oncall', type: 'pagerduty', ...ch }] } },
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
    expect(problems(() => load({ routing_key_env: 'PD_KEY' }, {}))).toEqual([
      'notifications.channels[0].routing_key_env: environment variable PD_KEY is not set (channel "oncall")',
    ]);
    expect(problems(() => load({}, {}))[0]).toMatch(/^notifications\.channels\[0\]\.routing_key_env: /);
    expect(problems(() => load({ routing_key_env: 'PD_KEY', severity: 'high' }, { PD_KEY: ROUTING_KEY }))).toEqual([
      'notifications.channels[0].severity: unknown key',
    ]);
    const cfg = load({ routing_key_env: 'PD_KEY' }, { PD_KEY: ROUTING_KEY });
    expect(cfg.notifications.channels[0].options).toMatchObject({
      url: 'https://events.pagerduty.com/v2/enqueue',
      source: `vigil@${hostname()}`,
      timeout_ms: 5000,
    });
  });
});
