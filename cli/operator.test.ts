import { execFile, spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { normalizeCall } from '../sensors/shared/normalize.ts';
import { buildServer } from '../service/server.ts';
import { generateCalibration, toJsonl } from '../test/fixtures/calibration.ts';
import { tempDir, testVigil } from '../test/helpers/index.ts';
import { main } from './main.ts';

// The `vigil` command as an operator runs it. Process-level behaviour (exit codes, one
// line on stderr, no stack trace) runs the real bin; the rest calls main() with the
// same arguments, which is the same program without a process start per case.

async function run(args: string[], env: NodeJS.ProcessEnv = {}) {
  let out = '';
  let err = '';
  const code = await main(args, {
    out: (s) => {
      out += s;
    },
    err: (s) => {
      err += s;
    },
    env: { PATH: '/nonexistent', ...env },
  });
  return { code, out, err };
}

function spawn(
  args: string[],
  env: NodeJS.ProcessEnv = {},
): Promise<{ code: number | null; out: string; err: string }> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      ['bin/vigil.mjs', ...args],
      { env: { PATH: process.env.PATH, HOME: process.env.HOME, VIGIL_LOG_FORMAT: 'json', ...env }, timeout: 60_000 },
      (e, out, err) => resolve({ code: e ? ((e as { code?: number }).code ?? 1) : 0, out, err }),
    );
  });
}

const secret = (bytes: number) => `whsec_${Buffer.alloc(bytes, 9).toString('base64')}`;
const hookFile = (extra = '') => {
  const f = join(tempDir(), 'vigil.yaml');
  writeFileSync(
    f,
    `notifications:\n  channels:\n    - name: hook\n      type: webhook\n      url: https://hooks.example.com/v?token=tok3n-in-query\n      secret_env: HOOK_SECRET\n${extra}`,
  );
  return f;
};

describe('vigil config check runs the validation serve runs', () => {
  it('a webhook secret that is not base64, or too short, fails check as it fails serve', async () => {
    const f = hookFile();
    const bad = await run(['config', 'check', '--config', f], { HOOK_SECRET: 'not valid!' });
    expect(bad.code).toBe(1);
    expect(bad.err).toContain('secret_env: HOOK_SECRET is not a whsec_ base64 secret');
    const short = await run(['config', 'check', '--config', f], { HOOK_SECRET: 'whsec_AA' });
    expect(short.code).toBe(1);
    expect(short.err).toContain('HOOK_SECRET holds a 1-byte key; a whsec_ secret is base64 of 24 to 64 random bytes');
    const long = await run(['config', 'check', '--config', f], { HOOK_SECRET: secret(65) });
    expect(long.code).toBe(1);
    const ok = await run(['config', 'check', '--config', f], { HOOK_SECRET: secret(32) });
    expect(ok.err).toBe('');
    expect(ok.code).toBe(0);
    expect(ok.out).toContain('hook (webhook, from file): ready');
    // The same file and secret: serve refuses what check refuses.
    const served = await spawn(['serve', '--port', '0', '--config', f], { HOOK_SECRET: 'whsec_AA' });
    expect(served.code).toBe(1);
    expect(served.err).toContain('HOOK_SECRET holds a 1-byte key');
  });

  it('redacts query tokens, header values and URL passwords; refuses credentials in a channel URL', async () => {
    const f = hookFile(
      '      headers: { X-Api-Key: hdr-s3cret-value, X-Team: infra }\n      headers_env: { Authorization: HOOK_AUTH }\n',
    );
    writeFileSync(
      f,
      `${await import('node:fs').then((fs) => fs.readFileSync(f, 'utf8'))}store:\n  redis_url: redis://:pa55word@127.0.0.1:1/0\n  backend: memory\n`,
    );
    const r = await run(['config', 'check', '--config', f], { HOOK_SECRET: secret(32), HOOK_AUTH: 'Bearer x' });
    expect(r.code).toBe(0);
    for (const s of ['tok3n-in-query', 'hdr-s3cret-value', 'infra', 'pa55word']) expect(r.out).not.toContain(s);
    expect(r.out).toContain('url: https://hooks.example.com/v?token=[REDACTED]');
    expect(r.out).toContain('redis_url: redis://[REDACTED]@127.0.0.1:1/0');
    expect(r.out).toContain('Authorization: HOOK_AUTH'); // a variable's name, not a secret
    const creds = join(tempDir(), 'c.yaml');
    writeFileSync(
      creds,
      'notifications:\n  channels:\n    - name: hook\n      type: webhook\n      format: slack\n      url: https://user:pw@hooks.example.com/x\n',
    );
    const refused = await run(['config', 'check', '--config', creds]);
    expect(refused.code).toBe(1);
    expect(refused.err).toContain('notifications.channels[0].url: credentials in a URL are not supported');
    expect(refused.err).not.toContain('pw@');
  });
});

describe('expected errors print one line, exit 1, and name no secret', () => {
  let busy: ReturnType<typeof createServer>;
  let port = 0;
  beforeAll(async () => {
    busy = createServer();
    await new Promise<void>((r) => busy.listen(0, '127.0.0.1', r));
    port = (busy.address() as AddressInfo).port;
  });
  afterAll(() => new Promise((r) => busy.close(r)));

  it('Redis unreachable, port in use, off loopback without a token, a bad log level', async () => {
    const [redis, inUse, open, level] = await Promise.all([
      spawn(['serve', '--port', '0'], { REDIS_URL: 'redis://:hunter2-pass@127.0.0.1:1' }),
      spawn(['serve', '--port', String(port)]),
      spawn(['serve', '--host', '0.0.0.0', '--port', '0']),
      spawn(['serve', '--port', '0'], { VIGIL_LOG_LEVEL: 'loud' }),
    ]);
    expect(redis.err).toBe(
      'vigil: Redis at redis://[REDACTED]@127.0.0.1:1 does not answer (store.redis_url_env: REDIS_URL)\n',
    );
    expect(inUse.err).toBe(`vigil: cannot listen on 127.0.0.1:${port}: address in use\n`);
    expect(open.err).toBe('vigil: binding 0.0.0.0 (not loopback) needs a token in VIGIL_ADMIN_TOKEN\n');
    expect(level.err).toContain('VIGIL_LOG_LEVEL: "loud" is not one of');
    for (const r of [redis, inUse, open, level]) {
      expect(r.code).toBe(1);
      expect(r.err.trim().split('\n')).toHaveLength(1);
    }
  });
});

describe('commands against a running service', () => {
  let url = '';
  const close: (() => Promise<unknown>)[] = [];
  beforeAll(async () => {
    const v = await testVigil({
      backend: 'memory',
      env: { VIGIL_ADMIN_TOKEN: 'adm1n-t0ken-for-cli-tests' },
      channels: [{ name: 'desk', type: 'desktop', command: '/nonexistent/notify-send', min_severity: 'info' }],
    });
    const app = await buildServer(v);
    url = await app.listen({ host: '127.0.0.1', port: 0 });
    close.push(
      () => v.close(),
      () => app.close(),
    );
    const read = normalizeCall('read', { filePath: '/p/src/app.js' }, { cwd: '/p' });
    const ev = (s: string, i: number) => ({
      session_id: s,
      agent: 'build',
      tool: 'read',
      call_id: `c${i}`,
      fingerprint: read.fingerprint,
      target: read.target,
      exit: 0,
      landed: false,
      ts: Date.now() - 10_000 + i,
    });
    await v.progress([0, 1, 2, 3, 4, 5, 6, 7].map((i) => ev('ses_loop', i)));
    await v.progress([ev('ses_fine', 0)]);
    await v.queue.idle();
  });
  afterAll(async () => {
    for (const c of close.reverse()) await c();
  });

  it('status: health, channels, sessions by verdict, open alerts, failed deliveries', async () => {
    const r = await run(['status', '--url', url]);
    expect(r.err).toBe('');
    expect(r.out).toContain(`at ${url}: ok (backend memory`);
    expect(r.out).toContain(
      'desk (desktop, from overlay): NOT READY: /nonexistent/notify-send is not an executable file',
    );
    expect(r.out).toMatch(/sessions: 2 \(1 looping, 0 stalling, 1 ok\)/);
    expect(r.out).toMatch(/open alerts: 1\n {2}SEVERITY/);
    expect(r.out).toMatch(/recent failed deliveries: 2\n/);
    expect(r.out).toContain('/nonexistent/notify-send not found on PATH');
  });

  it('sessions: a table, worst first, filtered by verdict; --json', async () => {
    const r = await run(['sessions', '--url', url]);
    const rows = r.out.trim().split('\n');
    expect(rows[0]).toMatch(/^SESSION\s+AGENT\s+VERDICT\s+STAGE\s+TURNS/);
    expect(rows[1]).toMatch(/^ses_loop\s+build\s+looping/);
    expect(rows[2]).toMatch(/^ses_fine\s+build\s+ok/);
    const j = await run(['sessions', '--url', url, '--verdict', 'ok', '--json']);
    expect(
      j.out
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l).session),
    ).toEqual(['ses_fine']);
    const bad = await run(['sessions', '--url', url, '--verdict', 'stuck']);
    expect(bad.code).toBe(2);
    expect(bad.err).toContain('--verdict: Invalid option');
  });

  it('knobs: show and reset with the admin token; a service that is not there is one line', async () => {
    const env = { VIGIL_ADMIN_TOKEN: 'adm1n-t0ken-for-cli-tests' };
    await fetch(`${url}/knobs`, {
      method: 'PATCH',
      headers: { authorization: `Bearer ${env.VIGIL_ADMIN_TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ progress: { stall_turns: 33 } }),
    });
    expect((await run(['knobs', '--url', url])).out).toContain(
      'progress.stall_turns = 33  (runtime; overrides default: 20)',
    );
    expect((await run(['knobs', 'reset', 'progress.stall_turns', '--url', url])).err).toContain(
      '(set VIGIL_ADMIN_TOKEN)',
    );
    expect((await run(['knobs', 'reset', 'progress.stall_turns', '--url', url], env)).out).toBe(
      'reset: progress.stall_turns\n',
    );
    expect((await run(['knobs', '--url', url])).out).not.toContain('stall_turns');
    const gone = await run(['status', '--url', 'http://127.0.0.1:9']);
    expect(gone.code).toBe(1);
    expect(gone.err).toMatch(/^vigil: no answer from http:\/\/127\.0\.0\.1:9\/? \(.+\): is vigil serve running\?\n$/);
  });
});

describe('shell completion', () => {
  it('bash completes commands and options from the program', async () => {
    const script = (await run(['completion', 'bash'])).out;
    const complete = (words: string[]) =>
      spawnSync(
        'bash',
        [
          '-c',
          `${script}\nCOMP_WORDS=(${words.map((w) => `'${w}'`).join(' ')}); COMP_CWORD=${words.length - 1}; _vigil; echo "\${COMPREPLY[*]}"`,
        ],
        { encoding: 'utf8' },
      ).stdout.trim();
    expect(complete(['vigil', 'st']).split(' ')).toEqual(['status']);
    expect(complete(['vigil', 'config', '']).split(' ')).toContain('check');
    expect(complete(['vigil', 'sessions', '--v']).split(' ')).toEqual(['--verdict']);
    expect((await run(['completion', 'fish'])).out).toContain("complete -c vigil -f -n '__fish_use_subcommand' -a '");
    expect((await run(['completion', 'tcsh'])).err).toContain('--shell: Invalid option');
  });
});

describe('vigil replay', () => {
  const dir = tempDir();
  const cal = generateCalibration();
  const input = join(dir, 'calibration.jsonl');
  writeFileSync(input, toJsonl(cal.inputs));
  const labels = join(dir, 'labels.json');
  writeFileSync(labels, JSON.stringify(Object.fromEntries(cal.cases.map((c) => [c.id, c.label]))));

  it('shows when each verdict changed and when a session was first flagged, not only event indexes', async () => {
    const r = await run(['replay', input]);
    expect(r.code).toBe(0);
    // A timeline line: date and time, then the event index.
    expect(r.out).toMatch(/\n {2}\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ {2}event #\d+ {2}ok -> stalling {2}stalling: /);
    expect(r.out).toMatch(/SESSION\s+AGENT\s+PARENT\s+EVENTS\s+VERDICT\s+FIRST FLAGGED\s+REASON/);
    expect(r.out).toMatch(/looping\s+\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ \(#\d+\)/);
    const j = (await run(['replay', input, '--json'])).out
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    const flagged = j.find((x) => x.verdict !== 'ok');
    expect(flagged.first_flagged_time).toMatch(/^\d{4}-\d\d-\d\dT/);
  });

  it('--sweep prints a header, the ranked table, the best set and the YAML to paste', async () => {
    const grid = join(dir, 'grid.json');
    writeFileSync(grid, JSON.stringify({ dup_warn: [0.02, 0.25], stall_turns: [5, 20] }));
    const r = await run(['replay', input, '--labels', labels, '--sweep', grid]);
    expect(r.code).toBe(0);
    const loops = cal.cases.filter((c) => c.label === 'loop').length;
    expect(r.out).toContain(`sweep: 4 threshold sets over ${cal.cases.length} labelled sessions (${loops} loop, `);
    expect(r.out).toMatch(/\ndup_warn\s+stall_turns\s+TP\s+FP\s+FN\s+TN\s+DELAY\n/);
    expect(r.out).toMatch(
      /\nbest: dup_warn=[\d.]+ stall_turns=\d+ {2}\(0 errors: FP=0 FN=0; mean delay [\d.]+ events\)\n/,
    );
    expect(r.out).toMatch(
      /paste into your config file \(or PATCH \/knobs\):\n\n {4}progress:\n {6}dup_warn: [\d.]+\n {6}stall_turns: \d+\n$/,
    );
  });
});
