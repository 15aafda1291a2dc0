import { readFileSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { Webhook } from 'standardwebhooks';
import { afterAll, describe, expect, it } from 'vitest';
import { main } from '../cli/main.ts';
import { normalizeCall } from '../sensors/shared/normalize.ts';
import { eventually, tempDir } from './helpers/index.ts';

// The README's user paths, run verbatim: each marked code block is compared with the
// file this test runs (or is itself what the test runs).

const README = readFileSync(new URL('../README.md', import.meta.url), 'utf8');

/** The fenced block right after `<!-- readme-test: NAME -->`. */
function readmeBlock(name: string): string {
  const at = README.indexOf(`<!-- readme-test: ${name} -->`);
  if (at < 0) throw new Error(`README has no block marked ${name}`);
  const m = /```[a-z]*\n([\s\S]*?)```/.exec(README.slice(at));
  if (!m) throw new Error(`README block ${name} is not fenced`);
  return m[1];
}

const fixture = (f: string) => readFileSync(new URL(`./fixtures/${f}`, import.meta.url), 'utf8');

interface Received {
  headers: IncomingHttpHeaders;
  body: string;
}

/** A local endpoint recording each POST and answering `answer`. */
async function receiver(answer: (r: Received) => { status: number; body: string }) {
  const got: Received[] = [];
  const server: Server = createServer((req, res) => {
    let body = '';
    req.on('data', (d) => (body += d));
    req.on('end', () => {
      const r = { headers: req.headers, body };
      got.push(r);
      const a = answer(r);
      res.writeHead(a.status, { 'content-type': 'application/json' }).end(a.body);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  closers.push(() => new Promise((r) => server.close(r)));
  return { got, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` };
}

const closers: (() => Promise<unknown>)[] = [];
afterAll(async () => {
  for (const c of closers.reverse()) await c();
});

describe('README: embed it in a router', () => {
  it('the README shows the example file verbatim', () => {
    expect(readmeBlock('router')).toBe(fixture('readme-router.ts'));
  });

  it('a looping conversation is refused with a 429 while its sibling goes on; usage, model and cost recorded', async () => {
    const upstream = await receiver(() => ({
      status: 200,
      body: JSON.stringify({
        model: 'up/model',
        choices: [{ index: 0, message: { role: 'assistant', content: 'reading again' }, finish_reason: 'stop' }],
        usage: { prompt_tokens: 120_000, completion_tokens: 20 },
      }),
    }));
    process.env.UPSTREAM_URL = upstream.url;
    process.env.UPSTREAM_KEY = 'upstream-key';
    const { router, vigil } = await import('./fixtures/readme-router.ts');
    closers.push(async () => {
      await router.close();
      await vigil.close();
      delete process.env.UPSTREAM_URL;
      delete process.env.UPSTREAM_KEY;
    });
    const ask = (conversation: string) =>
      router.inject({
        method: 'POST',
        url: '/v1/chat/completions',
        headers: { 'x-router-conversation': conversation, 'x-router-parent': 'ses_root', 'x-router-agent': 'build' },
        payload: { model: 'test/model', messages: [{ role: 'user', content: 'go on' }] },
      });
    const read = normalizeCall('read', { filePath: '/w/src/navbar.js' }, { cwd: '/w' });
    let refused: Awaited<ReturnType<typeof ask>> | undefined;
    for (let i = 0; i < 200 && !refused; i++) {
      const r = await ask('ses_loop');
      if (r.statusCode === 429) refused = r;
      else {
        await vigil.progress({
          session_id: 'ses_loop',
          parent_session_id: 'ses_root',
          tool: 'read',
          call_id: `c${i}`,
          fingerprint: read.fingerprint,
          target: read.target,
          exit: 0,
          landed: false,
          ts: Date.now(),
        });
      }
    }
    expect(refused?.statusCode).toBe(429);
    expect(Number(refused?.headers['retry-after'])).toBeGreaterThan(0);
    expect((await ask('ses_sibling')).statusCode).toBe(200);
    expect(upstream.got.length).toBeGreaterThan(0);
    expect(upstream.got[0].headers.authorization).toBe('Bearer upstream-key');
    // Each answer's usage, priced by the example's costOf: $3 per M prompt tokens, $15 per M completion tokens.
    const row = (await vigil.engine.sessionRow('ses_loop')) as Record<string, unknown> | undefined;
    expect(row?.models).toEqual(['up/model']);
    expect(row?.context_tokens).toBe(120_000);
    expect(row?.usd_since_landed).toBeGreaterThan(0);
    const turns = row?.turns_since_landed as number;
    expect(row?.usd_since_landed).toBeCloseTo((turns * (120_000 * 3 + 20 * 15)) / 1e6, 6);
  });
});

describe('README: add a channel', () => {
  it('the config block adds a signed webhook beside the default desktop channel; check and alert test work', async () => {
    const hook = await receiver(() => ({ status: 204, body: '' }));
    const secret = `whsec_${Buffer.alloc(32, 3).toString('base64')}`;
    const file = join(tempDir(), 'vigil.yaml');
    writeFileSync(file, readmeBlock('channel-config'));
    const env = { OPS_HOOK_URL: `${hook.url}/vigil`, OPS_HOOK_SECRET: secret, PATH: '/nonexistent' };
    let out = '';
    let err = '';
    const io = {
      out: (s: string) => {
        out += s;
      },
      err: (s: string) => {
        err += s;
      },
      env,
    };
    expect(await main(['config', 'check', '--config', file], io)).toBe(0);
    expect(out).toContain('desktop (desktop, from default): NOT READY');
    expect(out).toContain('ops-hook (webhook, from file): ready');
    expect(out).not.toContain(secret);
    out = '';
    expect(await main(['alert', 'test', '--channel', 'ops-hook', '--config', file], io)).toBe(0);
    expect(err).toBe('');
    expect(out).toContain('channel "ops-hook" (webhook): delivered');
    const [req] = hook.got;
    const payload = new Webhook(secret).verify(req.body, req.headers as Record<string, string>) as { type: string };
    expect(payload.type).toBe('alert.trigger');
  });
});

describe('README: write a detector', () => {
  it('the README shows the example file verbatim, about 40 lines', () => {
    const text = fixture('readme-detector.ts');
    expect(readmeBlock('detector')).toBe(text);
    expect(text.split('\n').length).toBeLessThan(55);
  });

  it('three failing bash calls alert through the notifier; a passing one recovers', async () => {
    const slack = await receiver(() => ({ status: 200, body: 'ok' }));
    process.env.SLACK_URL = `${slack.url}/services/T0/B0/x`;
    const { vigil } = await import('./fixtures/readme-detector.ts');
    closers.push(async () => {
      await vigil.close();
      delete process.env.SLACK_URL;
    });
    const bash = normalizeCall('bash', { command: 'npm test' }, { cwd: '/w' });
    const call = (i: number, exit: number) => ({
      session_id: 'ses_fix',
      agent: 'build',
      tool: 'bash',
      call_id: `b${i}`,
      fingerprint: bash.fingerprint,
      target: bash.target,
      exit,
      landed: false,
      ts: Date.now(),
    });
    for (let i = 0; i < 2; i++) expect(await vigil.progress(call(i, 1))).toEqual([]);
    const [t] = await vigil.progress(call(2, 1));
    expect(t).toMatchObject({ detector: 'failing-bash', from: 'ok', to: 'stalling' });
    await eventually(() => slack.got.length === 1);
    expect(JSON.parse(slack.got[0].body).text).toBe(
      'WARNING stalling: build (ses_fix): 3 failed bash calls in a row (last: npm test)',
    );
    await vigil.progress(call(3, 0));
    await eventually(() => slack.got.length === 2);
    expect(JSON.parse(slack.got[1].body).text).toBe('recovered: stalling: build (ses_fix)');
  });
});
