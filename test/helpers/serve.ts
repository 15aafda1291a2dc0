import { writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { freePort, http, type Proc, sleep, startProc, until } from '../fixtures/opencode-e2e/procs.ts';
import { tempDir } from './index.ts';

// `vigil serve` as an operator runs it (the bin, a config file, its own process group),
// and a sensor's way of posting to it (resend the same body until it is accepted), for
// the suites that stop, kill and restart the service or its Redis under load.

const ROOT = resolve(import.meta.dirname, '..', '..');

export interface Served {
  proc: Proc;
  url: string;
  port: number;
}

/**
 * Starts `vigil serve --port <port> --config <file>` with `config` as the file (JSON is
 * YAML) and only PATH and `env` in its environment; resolves once /health answers 200.
 * Pass the port of an earlier run to restart the same service where its clients post.
 */
export async function vigilServe(o: {
  config: Record<string, unknown>;
  env?: NodeJS.ProcessEnv;
  port?: number;
  name?: string;
}): Promise<Served> {
  const port = o.port ?? (await freePort());
  const name = o.name ?? 'vigil-serve';
  const dir = tempDir(name);
  const file = join(dir, 'vigil.yaml');
  writeFileSync(file, JSON.stringify(o.config));
  const proc = startProc(name, process.execPath, ['bin/vigil.mjs', 'serve', '--port', String(port), '--config', file], {
    cwd: ROOT,
    env: { PATH: process.env.PATH, VIGIL_LOG_LEVEL: 'warn', ...o.env },
    logDir: dir,
  });
  const url = `http://127.0.0.1:${port}`;
  await until(
    'vigil serve',
    async () => {
      if (proc.child.exitCode !== null) throw new Error(`vigil serve exited ${proc.child.exitCode}`);
      return (await http('GET', `${url}/health`)).status === 200 || undefined;
    },
    { detail: () => proc.output() },
  );
  return { proc, url, port };
}

/** SIGKILL to the service's process group (a crash: no drain, no clean close); resolves once it is gone. */
export async function crash(s: Served): Promise<void> {
  const pid = s.proc.child.pid;
  if (pid === undefined || s.proc.child.exitCode !== null || s.proc.child.signalCode !== null) return;
  process.kill(-pid, 'SIGKILL');
  await s.proc.exited;
}

/**
 * Posts `body` until the answer is 2xx, as the sensors do: the same body (the same
 * call_id) each time, after a 5xx, a 429 or no answer at all (the service is down or
 * restarting). Any other 4xx is a defect of the test, not an outage: it throws.
 */
export async function postUntilAccepted(
  url: string,
  body: unknown,
  o: { onRetry?: (status: number) => void; delayMs?: number; timeoutMs?: number } = {},
): Promise<{ status: number; data: any }> {
  const end = Date.now() + (o.timeoutMs ?? 120_000);
  for (;;) {
    const res = await http('POST', url, body, 5_000).catch(() => ({ status: 0, data: null }));
    if (res.status >= 200 && res.status < 300) return res;
    if (res.status >= 400 && res.status < 500 && res.status !== 429) {
      throw new Error(`POST ${url} answered ${res.status}: ${JSON.stringify(res.data)}`);
    }
    if (Date.now() > end) throw new Error(`POST ${url} not accepted in time (last status ${res.status})`);
    o.onRetry?.(res.status);
    await sleep(o.delayMs ?? 100);
  }
}
