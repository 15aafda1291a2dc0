import { createHmac, randomBytes } from 'node:crypto';
import { chmodSync, linkSync, mkdirSync, readFileSync, unlinkSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';

// The per-session sensor key (docs/api.md, Session keys): a sensor proves it is the one
// that reported a session first by sending HMAC-SHA256(its local secret, session id)
// with every report naming that session. The service binds the first key it sees for a
// session (trust on first use) and from then on refuses reports, verdicts, acks and
// directive reads for that session without it. The secret never leaves the machine;
// the service stores only a hash of each session's key. Sensor side and header format
// live here, in one place, for every sensor (an agent's plugin, the watchdog, a hook
// bridge); this module imports only node built-ins so a sensor bundle can carry it.

export const SESSION_KEY_HEADER = 'x-vigil-session-key';
/** Sessions one request's header may name: keeps the header far below Node's 16 KiB header limit. */
export const MAX_KEYED_SESSIONS = 100;
/** A key as the service accepts it: base64url, the 43 characters of an HMAC-SHA256 or longer. */
export const KEY_PATTERN = /^[A-Za-z0-9_-]{32,128}$/;
/** The variable naming another secret file (a sensor running as another user, a test). */
export const SECRET_FILE_ENV = 'VIGIL_SENSOR_SECRET_FILE';

/**
 * Where the sensors of this user keep their secret: $VIGIL_SENSOR_SECRET_FILE, else
 * $XDG_STATE_HOME/vigil/sensor-secret (~/.local/state/vigil/sensor-secret). One file per
 * user, shared by every sensor on the machine, so the watchdog signs what a plugin bound.
 */
export function sensorSecretFile(env: Record<string, string | undefined>): string {
  const own = env[SECRET_FILE_ENV];
  if (own?.startsWith('/')) return own;
  const xdg = env.XDG_STATE_HOME;
  const base = xdg?.startsWith('/') ? xdg : join(env.HOME || homedir(), '.local/state');
  return join(base, 'vigil', 'sensor-secret');
}

const SECRET_TEXT = /^[0-9a-f]{64}$/;

/**
 * The sensor secret (32 bytes) from `file`, created there (mode 0600, its folder 0700)
 * when absent. Creation is atomic: the secret is written to a private temporary file and
 * linked into place, so two sensors starting at once agree on one secret and nobody
 * reads a half-written file. Throws when the file cannot be read or made, or holds
 * something else than 64 hex characters.
 */
export function loadSensorSecret(file: string, o: { create?: boolean } = {}): Buffer {
  const read = () => {
    const text = readFileSync(file, 'utf8').trim();
    if (!SECRET_TEXT.test(text)) throw new Error(`${file}: not a sensor secret (64 hex characters)`);
    return Buffer.from(text, 'hex');
  };
  try {
    return read();
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT' || o.create === false) throw err;
  }
  mkdirSync(dirname(file), { recursive: true, mode: 0o700 });
  const tmp = `${file}.${process.pid}.${randomBytes(6).toString('hex')}`;
  writeFileSync(tmp, `${randomBytes(32).toString('hex')}\n`, { mode: 0o600, flag: 'wx' });
  try {
    chmodSync(tmp, 0o600); // whatever the umask
    linkSync(tmp, file);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    // another sensor made it first: theirs is the secret
  } finally {
    unlinkSync(tmp);
  }
  return read();
}

/** The key of one session: HMAC-SHA256(secret, session id), base64url without padding. */
export function sessionKey(secret: Buffer, sessionId: string): string {
  return createHmac('sha256', secret).update(sessionId).digest('base64url');
}

/**
 * The header value naming each session's key: `<session_id>=<key>` pairs separated by
 * a space (session ids hold no spaces; keys no `=`). Undefined for no sessions.
 */
export function sessionKeyHeader(pairs: Iterable<readonly [string, string]>): string | undefined {
  const out: string[] = [];
  for (const [id, key] of pairs) out.push(`${id}=${key}`);
  return out.length ? out.join(' ') : undefined;
}

export interface ParsedKeys {
  /** Keys by the session they name. */
  bySession: Map<string, string>;
  /** A bare key (no `id=`): the key of the one session the request names. */
  bare?: string;
}

/**
 * The keys a header value carries, or a problem (naming no key) when it is malformed.
 * Accepts the pairs above, a bare key, and pairs split over repeated headers (which
 * Node joins with ", ").
 */
export function parseSessionKeys(value: string | undefined): ParsedKeys | string {
  const out: ParsedKeys = { bySession: new Map() };
  if (value === undefined) return out;
  const parts = value.split(/\s+/).filter(Boolean);
  if (parts.length > MAX_KEYED_SESSIONS) return `more than ${MAX_KEYED_SESSIONS} keys`;
  for (const raw of parts) {
    const part = raw.endsWith(',') ? raw.slice(0, -1) : raw;
    const i = part.lastIndexOf('=');
    const key = i < 0 ? part : part.slice(i + 1);
    if (!KEY_PATTERN.test(key)) return 'a key is not 32 to 128 base64url characters';
    if (i < 0) {
      if (out.bare !== undefined || parts.length > 1) return 'a bare key must be the only one';
      out.bare = key;
      continue;
    }
    const id = part.slice(0, i);
    if (!id || id.length > 128) return 'a session id before "=" is empty or longer than 128 characters';
    out.bySession.set(id, key);
  }
  return out;
}

/** The header the local hook endpoint checks: only a hook of this user's agents holds its key. */
export const HOOK_KEY_HEADER = 'x-vigil-hook-key';

/**
 * The key of this user's hook endpoint: HMAC-SHA256(the sensor secret, a fixed label),
 * base64url. `vigil install` writes it into the agents' hook settings; the process that
 * hosts the endpoint (the service, or `vigil relay`) derives it from the same secret.
 * It opens only that loopback endpoint; the secret itself never leaves its file.
 */
export function hookKey(secret: Buffer): string {
  return createHmac('sha256', secret).update('vigil hook endpoint').digest('base64url');
}
