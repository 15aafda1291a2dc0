import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Webhook } from 'standardwebhooks';
import { afterEach, describe, expect, it } from 'vitest';
import { createRegistry } from '../../builtins.ts';
import type { Alert, AlertInput } from '../../core/alert.ts';
import { ConfigError, loadConfig } from '../../core/config.ts';
import type { Vigil } from '../../core/vigil.ts';
import { createVigil } from '../../index.ts';
import { eventually, tempDir } from '../../test/helpers/index.ts';
import {
  captureLogger,
  closedPort,
  NTFY,
  SLACK,
  type WireReply,
  type WireRequest,
  type WireServer,
} from '../../test/helpers/wire-servers.ts';
import { ChannelKit, channelContract } from '../testing/index.ts';
import { ntfySequenceId, slackPayload, webhookId } from './webhook.formats.ts';

const kit = new ChannelKit(createRegistry());
const running: Vigil[] = [];
afterEach(async () => {
  for (const v of running.splice(0)) await v.close();
  await kit.close();
});

const incident: AlertInput = {
  dedup_key: 'ses_root',
  severity: 'critical',
  title: 'looping: build (ses_child)',
  summary: '423 calls, 0 landed, read navbar.js x61',
  details: 'tree ses_root: 3 agents\nread navbar.js x61 <no edits>',
  source: 'no-progress',
};

const newSecret = () => `whsec_${randomBytes(24).toString('base64')}`;

const server = (fallback: WireReply | ((r: WireRequest) => WireReply)) => kit.server(fallback);
const rows = (v: Vigil, n: number, o?: { retried?: boolean }) => kit.rows(v, n, o);
const vigil = (channel: Record<string, unknown>, env: Record<string, string> = {}, logger = captureLogger().logger) =>
  kit.vigil({ name: 'hook', type: 'webhook', ...channel }, { env, logger });

const SECRET = newSecret();
channelContract(
  {
    type: 'webhook',
    registry: createRegistry(),
    entry: (origin) => ({ name: 'hook', type: 'webhook', url: `${origin}/h`, secret_env: 'HOOK_SECRET' }),
    env: { HOOK_SECRET: SECRET },
    success: { status: 204 },
    retryable: { status: 503, body: 'busy' },
    permanent: { status: 400, body: 'bad request' },
    secrets: [SECRET],
  },
  { describe, it, expect, afterEach },
);

function problems(fn: () => unknown): string[] {
  try {
    fn();
  } catch (e) {
    if (e instanceof ConfigError) return e.problems;
    throw e;
  }
  throw new Error('expected the config to be rejected');
}

const load = (channel: Record<string, unknown>, env: NodeJS.ProcessEnv = {}) =>
  loadConfig({
    registry: createRegistry(),
    env,
    noDefaults: true,
    overlay: { notifications: { channels: [{ name: 'hook', type: 'webhook', ...channel }] } },
  });

describe('webhook channel, format generic (Standard Webhooks)', () => {
  it('POSTs the alert as JSON, signed over the exact bytes; the standardwebhooks library verifies it', async () => {
    const secret = newSecret();
    const s = await server({ status: 204 });
    const v = await vigil(
      { url: `${s.origin}/hooks/vigil?x=1`, secret_env: 'HOOK_SECRET', headers: { 'X-Team': 'infra' } },
      { HOOK_SECRET: secret },
    );
    await v.notifier.notify(incident);
    const [row] = await rows(v, 1);
    expect(row).toMatchObject({ channel: 'hook', type: 'webhook', outcome: 'delivered', attempts: 1 });
    expect(s.requests).toHaveLength(1);
    const req = s.requests[0];
    expect(req.method).toBe('POST');
    expect(req.url).toBe('/hooks/vigil?x=1');
    expect(req.headers['content-type']).toBe('application/json');
    expect(req.headers['x-team']).toBe('infra');
    expect(Number(req.headers['content-length'])).toBe(req.body.length);
    const at = (JSON.parse(req.text) as { data: { at: number } }).data.at;
    expect(req.text).toBe(
      JSON.stringify({
        type: 'alert.trigger',
        timestamp: new Date(at).toISOString(),
        data: {
          dedup_key: 'ses_root',
          state: 'trigger',
          severity: 'critical',
          title: 'looping: build (ses_child)',
          summary: '423 calls, 0 landed, read navbar.js x61',
          details: 'tree ses_root: 3 agents\nread navbar.js x61 <no edits>',
          source: 'no-progress',
          at,
          seq: 1,
        },
      }),
    );
    const id = req.headers['webhook-id'] as string;
    expect(id).toBe(webhookId({ dedup_key: 'ses_root', state: 'trigger', seq: 1 }));
    expect(id).toMatch(/^msg_[0-9a-f]{32}$/);
    expect(req.headers['webhook-timestamp']).toMatch(/^\d{10}$/);
    expect(req.headers['webhook-signature']).toMatch(/^v1,[A-Za-z0-9+/]{43}=$/);
    // The receiver's side: the reference library, on the raw body.
    const verified = new Webhook(secret).verify(req.body, req.headers as Record<string, string>);
    expect(verified).toEqual(JSON.parse(req.text));
    // A different secret or a re-serialised body does not verify.
    expect(() => new Webhook(newSecret()).verify(req.body, req.headers as Record<string, string>)).toThrow();
    expect(() =>
      new Webhook(secret).verify(JSON.stringify(JSON.parse(req.text), null, 1), req.headers as Record<string, string>),
    ).toThrow();
  });

  it('a 500 is retried once with the same webhook-id and body, and delivers on the retry', async () => {
    const secret = newSecret();
    const s = await server({ status: 200, body: 'thanks' });
    s.script({ status: 500, body: 'boom' });
    const v = await vigil({ url: `${s.origin}/h`, secret_env: 'HOOK_SECRET' }, { HOOK_SECRET: secret });
    await v.notifier.notify(incident);
    const [row] = await rows(v, 1);
    expect(row).toMatchObject({ outcome: 'delivered', attempts: 2 });
    expect(s.requests).toHaveLength(2);
    const [a, b] = s.requests;
    expect(b.headers['webhook-id']).toBe(a.headers['webhook-id']);
    expect(b.text).toBe(a.text);
    for (const r of s.requests) new Webhook(secret).verify(r.body, r.headers as Record<string, string>);
    // The next transition of the incident is another event: another id.
    await v.notifier.notify({ ...incident, state: 'resolve' });
    await rows(v, 2);
    expect(s.requests[2].headers['webhook-id']).not.toBe(a.headers['webhook-id']);
    expect(JSON.parse(s.requests[2].text)).toMatchObject({ type: 'alert.resolve', data: { state: 'resolve', seq: 2 } });
  });

  it('429 is retryable; 410 and other 4xx are permanent (tried once); a redirect is not followed', async () => {
    const secret = newSecret();
    const cases: { reply: WireReply; requests: number; reason: string }[] = [
      {
        reply: { status: 429, headers: { 'retry-after': '1' } },
        requests: 2,
        reason: 'webhook answered 429 (retry after 1 s)',
      },
      { reply: { status: 503 }, requests: 2, reason: 'webhook answered 503' },
      { reply: { status: 410 }, requests: 1, reason: 'webhook answered 410 (gone: the channel is disabled)' },
      { reply: { status: 400, body: 'bad' }, requests: 1, reason: 'webhook answered 400' },
      { reply: { status: 401 }, requests: 1, reason: 'webhook answered 401' },
      {
        reply: { status: 302, headers: { location: '/elsewhere' } },
        requests: 1,
        reason: 'webhook answered 302 (redirects are not followed)',
      },
    ];
    for (const c of cases) {
      const s = await server(c.reply);
      const v = await vigil({ url: `${s.origin}/h`, secret_env: 'HOOK_SECRET' }, { HOOK_SECRET: secret });
      await v.notifier.notify(incident);
      const [row] = await rows(v, 1);
      expect(row).toMatchObject({ outcome: 'failed', attempts: c.requests, reason: c.reason });
      expect(s.requests.map((r) => r.url)).toEqual(Array(c.requests).fill('/h'));
      // 410: the endpoint is gone, so the channel is switched off.
      expect(v.notifier.channels()[0].enabled).toBe(c.reply.status !== 410);
    }
  });

  it("a 429's Retry-After is honoured: the retry waits at least that long", async () => {
    const s = await server({ status: 204 });
    s.script({ status: 429, headers: { 'retry-after': '1' } });
    const v = await vigil({ url: `${s.origin}/h`, secret_env: 'HOOK_SECRET' }, { HOOK_SECRET: newSecret() });
    await v.notifier.notify(incident);
    const [row] = await rows(v, 1);
    expect(row).toMatchObject({ outcome: 'delivered', attempts: 2 });
    const [retried] = await rows(v, 1, { retried: true });
    expect(retried).toMatchObject({ outcome: 'retried', retry_in_ms: 1000 });
    // A lower bound only: the retry cannot come sooner than the provider asked.
    expect(s.requests[1].at - s.requests[0].at).toBeGreaterThanOrEqual(1000);
  });

  it('a refused connection and a timeout are retryable and name neither URL nor secret', async () => {
    const secret = newSecret();
    const port = await closedPort();
    const v = await vigil({ url: `http://127.0.0.1:${port}/h`, secret_env: 'HOOK_SECRET' }, { HOOK_SECRET: secret });
    await v.notifier.notify(incident);
    const [row] = await rows(v, 1);
    expect(row).toMatchObject({ outcome: 'failed', attempts: 2, reason: 'webhook request failed (ECONNREFUSED)' });

    const s = await server({ status: 200, hang: true });
    const v2 = await vigil(
      { url: `${s.origin}/h`, secret_env: 'HOOK_SECRET', timeout_ms: 100 },
      { HOOK_SECRET: secret },
    );
    await v2.notifier.notify(incident);
    const [row2] = await rows(v2, 1);
    expect(row2).toMatchObject({ outcome: 'failed', attempts: 2, reason: 'webhook timed out after 100 ms' });
    expect(s.requests).toHaveLength(2);
  });

  it('the secret appears in no failure reason and no log line', async () => {
    const secret = newSecret();
    const cap = captureLogger();
    // A receiver that echoes what it got, secret-bearing header included.
    const s = await server((r) => ({ status: 400, body: `bad signature ${r.headers['webhook-signature']} ${secret}` }));
    const v = await vigil(
      { url: `${s.origin}/h`, secret_env: 'HOOK_SECRET', headers_env: { Authorization: 'HOOK_AUTH' } },
      { HOOK_SECRET: secret, HOOK_AUTH: 'Bearer tk_sup3rs3cr3t' },
      cap.logger,
    );
    await v.notifier.notify(incident);
    const [row] = await rows(v, 1);
    expect(row.reason).toBe('webhook answered 400');
    expect(s.requests[0].headers.authorization).toBe('Bearer tk_sup3rs3cr3t');
    await eventually(() => cap.text().includes('alert delivery failed'));
    const everything = `${JSON.stringify(await v.deliveryLog.recent())}${cap.text()}`;
    for (const leak of [secret, secret.slice(6), 'tk_sup3rs3cr3t']) expect(everything).not.toContain(leak);
  });
});

describe('webhook config', () => {
  it('a missing or empty signing secret variable fails the load naming the variable', () => {
    const ch = { url: 'http://127.0.0.1:1/h', secret_env: 'HOOK_SECRET' };
    const msg = 'notifications.channels[0].secret_env: environment variable HOOK_SECRET is not set (channel "hook")';
    expect(problems(() => load(ch, {}))).toEqual([msg]);
    expect(problems(() => load(ch, { HOOK_SECRET: '' }))).toEqual([msg]);
    expect(() => load(ch, { HOOK_SECRET: newSecret() })).not.toThrow();
  });

  it('a generic webhook without secret_env fails the load naming secret_env', () => {
    expect(problems(() => load({ url: 'http://127.0.0.1:1/h' }))).toEqual([
      'notifications.channels[0].secret_env: required for format generic: the env var holding the whsec_ signing secret',
    ]);
  });

  it('url and url_env: exactly one; typos, misplaced options and reserved headers fail with their path', () => {
    const s = { HOOK_SECRET: newSecret() };
    expect(problems(() => load({ secret_env: 'HOOK_SECRET' }, s))).toEqual([
      'notifications.channels[0].url: set exactly one of url, url_env',
    ]);
    expect(
      problems(() => load({ url: 'http://127.0.0.1:1/h', url_env: 'HOOK_URL', secret_env: 'HOOK_SECRET' }, s)),
    ).toEqual(['notifications.channels[0].url: set exactly one of url, url_env']);
    expect(problems(() => load({ url: 'http://127.0.0.1:1/h', secret_env: 'HOOK_SECRET', timeout: 5 }, s))).toEqual([
      'notifications.channels[0].timeout: unknown key',
    ]);
    expect(problems(() => load({ url: 'ftp://x/h', secret_env: 'HOOK_SECRET' }, s))[0]).toMatch(
      /^notifications\.channels\[0\]\.url: /,
    );
    expect(problems(() => load({ url: 'https://ntfy.sh/mytopic', format: 'ntfy', topic: 'mytopic' }))).toEqual([
      'notifications.channels[0].url: format ntfy publishes JSON to the server root (https://ntfy.sh/): put the topic in topic',
    ]);
    expect(problems(() => load({ url: 'http://127.0.0.1:1/', format: 'ntfy' }))).toEqual([
      'notifications.channels[0].topic: format ntfy needs exactly one of topic, topic_env',
    ]);
    expect(problems(() => load({ url_env: 'SLACK_URL', format: 'slack', secret_env: 'X', topic: 't' }))).toEqual([
      'notifications.channels[0].secret_env: only for format generic (not slack)',
      'notifications.channels[0].topic: only for format ntfy',
    ]);
    expect(
      problems(() =>
        load({ url: 'http://127.0.0.1:1/h', secret_env: 'HOOK_SECRET', headers: { 'Webhook-Signature': 'x' } }, s),
      ),
    ).toEqual(['notifications.channels[0].headers.Webhook-Signature: set by the channel itself']);
    expect(problems(() => load({ url_env: 'SLACK_URL', format: 'slack' }))).toEqual([
      'notifications.channels[0].url_env: environment variable SLACK_URL is not set (channel "hook")',
    ]);
    expect(
      problems(() =>
        load({ url: 'http://127.0.0.1:1/', format: 'ntfy', topic: 't', headers_env: { Authorization: 'NTFY_AUTH' } }),
      ),
    ).toEqual(['notifications.channels[0].secrets: environment variable NTFY_AUTH is not set (channel "hook")']);
  });

  it('a secret that is not base64 fails at start, naming the variable and not the value', async () => {
    await expect(
      createVigil({
        env: { HOOK_SECRET: 'whsec_not base64!' },
        overlay: {
          store: { backend: 'memory' },
          notifications: {
            channels: [{ name: 'hook', type: 'webhook', url: 'http://127.0.0.1:1/h', secret_env: 'HOOK_SECRET' }],
          },
        },
      }),
    ).rejects.toThrow('notifications.channels "hook": secret_env: HOOK_SECRET is not a whsec_ base64 secret');
  });
});

describe('webhook channel, format slack', () => {
  const slackUrl = (s: WireServer) => `${s.origin}/services/T000/B000/XXXXsecretXXXX`;

  it('POSTs {text, blocks} to the secret URL; 200 "ok" is success; resolve is a short text', async () => {
    const s = await server(SLACK.ok);
    const v = await vigil({ url_env: 'SLACK_URL', format: 'slack' }, { SLACK_URL: slackUrl(s) });
    await v.notifier.notify(incident);
    await v.notifier.notify({ ...incident, state: 'resolve' });
    const r = await rows(v, 2);
    expect(r.map((x) => [x.state, x.outcome])).toEqual([
      ['trigger', 'delivered'],
      ['resolve', 'delivered'],
    ]);
    const [trigger, resolve] = s.requests;
    expect(trigger.method).toBe('POST');
    expect(trigger.url).toBe('/services/T000/B000/XXXXsecretXXXX');
    expect(trigger.headers['content-type']).toBe('application/json');
    expect(trigger.headers['webhook-signature']).toBeUndefined();
    expect(trigger.text).toBe(
      JSON.stringify({
        text: 'CRITICAL looping: build (ses_child): 423 calls, 0 landed, read navbar.js x61',
        blocks: [
          {
            type: 'section',
            text: { type: 'mrkdwn', text: '*looping: build (ses_child)*\n423 calls, 0 landed, read navbar.js x61' },
          },
          {
            type: 'section',
            text: { type: 'mrkdwn', text: '```tree ses_root: 3 agents\nread navbar.js x61 &lt;no edits&gt;```' },
          },
          { type: 'context', elements: [{ type: 'mrkdwn', text: 'critical | no-progress | ses_root' }] },
        ],
      }),
    );
    expect(resolve.text).toBe('{"text":"recovered: looping: build (ses_child)"}');
  });

  it('Slack errors: 400 invalid_payload and 410 channel_is_archived once; 429 and 500 retried; 200 not "ok" fails', async () => {
    const cases: { reply: WireReply; attempts: number; reason: string }[] = [
      { reply: SLACK.invalidPayload, attempts: 1, reason: 'slack answered 400 invalid_payload' },
      {
        reply: SLACK.archived,
        attempts: 1,
        reason: 'slack answered 410 channel_is_archived (gone: the channel is disabled)',
      },
      { reply: SLACK.rateLimited, attempts: 2, reason: 'slack answered 429 rate_limited (retry after 1 s)' },
      { reply: SLACK.rollupError, attempts: 2, reason: 'slack answered 500 rollup_error' },
      {
        reply: { status: 200, body: 'no_text' },
        attempts: 1,
        reason: 'slack answered 200 with "no_text" instead of ok',
      },
    ];
    for (const c of cases) {
      const s = await server(c.reply);
      const cap = captureLogger();
      const v = await vigil({ url_env: 'SLACK_URL', format: 'slack' }, { SLACK_URL: slackUrl(s) }, cap.logger);
      await v.notifier.notify(incident);
      const [row] = await rows(v, 1);
      expect(row).toMatchObject({ outcome: 'failed', attempts: c.attempts, reason: c.reason });
      expect(s.requests).toHaveLength(c.attempts);
      await eventually(() => cap.text().includes('alert delivery failed'));
      expect(cap.text()).not.toContain('XXXXsecretXXXX');
    }
  });

  it('a 429 then 200 ok delivers on the retry', async () => {
    const s = await server(SLACK.ok);
    s.script(SLACK.rateLimited);
    const v = await vigil({ url_env: 'SLACK_URL', format: 'slack' }, { SLACK_URL: slackUrl(s) });
    await v.notifier.notify(incident);
    const [row] = await rows(v, 1);
    expect(row).toMatchObject({ outcome: 'delivered', attempts: 2 });
    expect(s.requests).toHaveLength(2);
  });

  it('escapes Slack control characters and keeps every text within 3000 characters', () => {
    const p = slackPayload({
      ...incident,
      state: 'trigger',
      summary: '<'.repeat(1024),
      details: '&'.repeat(16_000),
      at: 0,
      seq: 1,
    } as Alert);
    const sections = p.blocks!.slice(0, 2) as { text: { text: string } }[];
    const texts = [p.text, ...sections.map((b) => b.text.text)];
    for (const t of texts) expect(t.length).toBeLessThanOrEqual(3000);
    expect(sections[1].text.text).toMatch(/^```(&amp;)+\.\.\.```$/);
    expect(JSON.stringify(p)).not.toMatch(/<|&(?!lt;|gt;|amp;)/);
  });
});

describe('webhook channel, format ntfy', () => {
  it('publishes JSON to the server root: topic, title, message, priority by severity, tags, one sequence id', async () => {
    const s = await server(NTFY.published);
    const v = await vigil(
      { url: `${s.origin}/`, format: 'ntfy', topic_env: 'NTFY_TOPIC', headers_env: { Authorization: 'NTFY_AUTH' } },
      { NTFY_TOPIC: 'vigil-alerts-7f3k', NTFY_AUTH: 'Bearer tk_abcdef123456' },
    );
    await v.notifier.notify({ ...incident, severity: 'warning' });
    await v.notifier.notify(incident); // escalate to critical
    await v.notifier.notify({ ...incident, state: 'resolve' });
    const r = await rows(v, 3);
    expect(r.map((x) => [x.state, x.outcome])).toEqual([
      ['trigger', 'delivered'],
      ['escalate', 'delivered'],
      ['resolve', 'delivered'],
    ]);
    for (const req of s.requests) {
      expect(req.method).toBe('POST');
      expect(req.url).toBe('/');
      expect(req.headers['content-type']).toBe('application/json');
      expect(req.headers.authorization).toBe('Bearer tk_abcdef123456');
    }
    const seq = ntfySequenceId('ses_root');
    expect(seq).toMatch(/^[-_A-Za-z0-9]{1,64}$/);
    const message = '423 calls, 0 landed, read navbar.js x61\n\ntree ses_root: 3 agents\nread navbar.js x61 <no edits>';
    expect(s.requests.map((q) => q.text)).toEqual([
      JSON.stringify({
        topic: 'vigil-alerts-7f3k',
        title: 'looping: build (ses_child)',
        message,
        priority: 4,
        tags: ['warning', 'no-progress'],
        sequence_id: seq,
      }),
      JSON.stringify({
        topic: 'vigil-alerts-7f3k',
        title: 'Escalated: looping: build (ses_child)',
        message,
        priority: 5,
        tags: ['rotating_light', 'no-progress'],
        sequence_id: seq,
      }),
      JSON.stringify({
        topic: 'vigil-alerts-7f3k',
        title: 'Recovered: looping: build (ses_child)',
        message: 'recovered: looping: build (ses_child)',
        priority: 2,
        tags: ['white_check_mark', 'no-progress'],
        sequence_id: seq,
      }),
    ]);
  });

  it("a 429 (42901) is retried once, then failed with ntfy's code and text; the topic is never in the reason", async () => {
    const s = await server(NTFY.tooManyRequests);
    const v = await vigil({ url: s.origin, format: 'ntfy', topic: 'vigil-alerts' });
    await v.notifier.notify(incident);
    const [row] = await rows(v, 1);
    expect(row).toMatchObject({
      outcome: 'failed',
      attempts: 2,
      reason: 'ntfy answered 429 (42901 limit reached: too many requests)',
    });
    expect(s.requests).toHaveLength(2);
  });

  it('adding an ntfy channel is a config change only: a YAML overlay file, then deliver', async () => {
    const s = await server(NTFY.published);
    const dir = tempDir();
    const file = join(dir, 'vigil.yaml');
    writeFileSync(
      file,
      [
        'store:',
        '  backend: memory',
        'notifications:',
        '  retry_delay: 50',
        '  channels:',
        '    - name: phone',
        '      type: webhook',
        '      format: ntfy',
        `      url: ${s.origin}`,
        '      topic_env: NTFY_TOPIC',
        '      min_severity: info',
        '',
      ].join('\n'),
    );
    const env = { NTFY_TOPIC: 'vigil-phone-2b9q' };
    const cfg = loadConfig({ registry: createRegistry(), file, env });
    // A file's channel list merges by name: the default desktop channel stays.
    expect(cfg.notifications.channels.map((c) => [c.name, c.type, c.options.format])).toEqual([
      ['desktop', 'desktop', undefined],
      ['phone', 'webhook', 'ntfy'],
    ]);
    const v = await createVigil({ configFile: file, env });
    running.push(v);
    await v.notifier.notify({ ...incident, severity: 'info' });
    const [row] = await rows(v, 1);
    expect(row).toMatchObject({ channel: 'phone', type: 'webhook', outcome: 'delivered' });
    expect(JSON.parse(s.requests[0].text)).toMatchObject({ topic: 'vigil-phone-2b9q', priority: 3 });
  });
});
