import { z } from 'zod/mini';
import {
  loadSensorSecret,
  MAX_KEYED_SESSIONS,
  SESSION_KEY_HEADER,
  sensorSecretFile,
  sessionKey,
  sessionKeyHeader,
} from '../../core/session-key.ts';

// The one HTTP client of every command-hook bridge: each request to Vigil goes through
// here, with the sensor's name in x-vigil-plugin, the session keys of the sessions it
// names, the ingestion token when set, and a hard timeout. Any failure is `undefined`:
// the bridge then has no opinion (fail open). zod/mini: Claude Code's bundle stays small.

declare const __VIGIL_HOOK_VERSION__: string | undefined;
/** `<package version>+<bundle hash>` in a bundle (build.mjs), `dev` from the sources. */
export const HOOK_VERSION = typeof __VIGIL_HOOK_VERSION__ === 'string' ? __VIGIL_HOOK_VERSION__ : '0.1.0+dev';
/** What a sensor's bridge sends in x-vigil-plugin: `vigil-<sensor>/<version>`. */
export const hookId = (sensor: string): string => `vigil-${sensor}/${HOOK_VERSION}`;

const Env = z.object({
  VIGIL_URL: z.optional(z.url({ protocol: /^https?$/ })),
  VIGIL_HOOK_TIMEOUT_MS: z.optional(z.coerce.number().check(z.int(), z.minimum(50), z.maximum(30_000))),
});

export interface ClientSettings {
  url: string;
  token?: string;
  timeoutMs: number;
  /** The sensor secret (core/session-key.ts) that keys each session named; none: reports unkeyed. */
  secret?: Buffer;
}

/** VIGIL_URL (default the local service), VIGIL_INGEST_TOKEN, VIGIL_HOOK_TIMEOUT_MS (default 1500). */
export function clientSettings(env: NodeJS.ProcessEnv): ClientSettings {
  const e = Env.safeParse(env);
  const v = e.success ? e.data : {};
  let secret: Buffer | undefined;
  try {
    secret = loadSensorSecret(sensorSecretFile(env), { create: true });
  } catch {
    // no secret: the reports go unkeyed (a session bound to a key then refuses them: no opinion)
  }
  return {
    ...(secret ? { secret } : {}),
    url: (v.VIGIL_URL ?? 'http://127.0.0.1:7411').replace(/\/+$/, ''),
    ...(env.VIGIL_INGEST_TOKEN ? { token: env.VIGIL_INGEST_TOKEN } : {}),
    timeoutMs: v.VIGIL_HOOK_TIMEOUT_MS ?? 1500,
  };
}

export class VigilClient {
  /** `id` is the sensor's plugin header value (hookId). */
  constructor(
    private readonly s: ClientSettings,
    private readonly id: string,
  ) {}

  private headers(json: boolean, sessions: readonly string[]): Record<string, string> {
    const secret = this.s.secret;
    const keys = secret
      ? sessionKeyHeader(sessions.slice(0, MAX_KEYED_SESSIONS).map((id) => [id, sessionKey(secret, id)] as const))
      : undefined;
    return {
      'x-vigil-plugin': this.id,
      ...(keys ? { [SESSION_KEY_HEADER]: keys } : {}),
      ...(json ? { 'content-type': 'application/json' } : {}),
      ...(this.s.token ? { authorization: `Bearer ${this.s.token}` } : {}),
    };
  }

  /** One request; `sessions` are the sessions it names (each gets its key). */
  async request(
    method: 'GET' | 'POST',
    path: string,
    sessions: readonly string[],
    body?: unknown,
  ): Promise<unknown | undefined> {
    try {
      const r = await fetch(`${this.s.url}${path}`, {
        method,
        headers: this.headers(body !== undefined, [...new Set(sessions)]),
        ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
        signal: AbortSignal.timeout(this.s.timeoutMs),
      });
      if (!r.ok) {
        await r.body?.cancel();
        return undefined;
      }
      return await r.json();
    } catch {
      return undefined;
    }
  }
}
