import { DeliveryError } from '../../core/errors.ts';
import { scrub } from '../../core/logger.ts';
import { ascii } from '../../core/render.ts';

// The HTTP rules every JSON channel shares, so a status is classified in one place:
// 2xx success; 429, 5xx, timeouts and network errors retryable; everything else
// (3xx included: redirects are never followed, 410 = endpoint gone) permanent.

export interface HttpAnswer {
  status: number;
  headers: Headers;
  /** The response body, cut to MAX_BODY characters. */
  text: string;
}

/** Provider error bodies are small; a longer one is cut, never logged whole. */
const MAX_BODY = 8_192;

export function isRetryableStatus(status: number): boolean {
  return status === 429 || status >= 500;
}

/**
 * POSTs `body` (the exact bytes, so a signature over them holds) and returns the answer
 * whatever its status. A timeout or network failure throws a retryable DeliveryError
 * whose text names neither the URL nor any header value.
 */
export async function postBytes(
  what: string,
  url: string,
  req: { headers: Record<string, string>; body: Uint8Array; timeoutMs: number; signal: AbortSignal },
): Promise<HttpAnswer> {
  const timeout = AbortSignal.timeout(req.timeoutMs);
  let res: Response;
  try {
    res = await fetch(url, {
      method: 'POST',
      headers: req.headers,
      body: req.body as Uint8Array<ArrayBuffer>, // Buffer.from() owns a plain ArrayBuffer
      redirect: 'manual', // a 3xx comes back as itself and is a permanent failure
      signal: AbortSignal.any([req.signal, timeout]),
    });
  } catch (e) {
    if (timeout.aborted) throw new DeliveryError(`${what} timed out after ${req.timeoutMs} ms`, { retryable: true });
    if (req.signal.aborted) throw new DeliveryError(`${what} request aborted`, { retryable: true });
    // Only the error code: the cause's message can carry host and port.
    const code = (e as { cause?: { code?: unknown } }).cause?.code;
    throw new DeliveryError(`${what} request failed (${typeof code === 'string' ? code : 'network error'})`, {
      retryable: true,
    });
  }
  let text = '';
  try {
    text = (await res.text()).slice(0, MAX_BODY);
  } catch {
    // a body cut off mid-stream leaves the status, which is what classification needs
  }
  return { status: res.status, headers: res.headers, text };
}

/** Whether a URL carries a user or password (fetch refuses such URLs, so they never deliver). */
export function hasCredentials(url: string): boolean {
  return URL.canParse(url) && Boolean(new URL(url).username || new URL(url).password);
}

/** The message for a URL with credentials: refused at load, because no delivery could succeed. */
export const CREDENTIALS_IN_URL =
  'credentials in a URL are not supported (fetch refuses them): send them as a header from headers_env';

/**
 * Phone-number-like runs (7 or more digits, with the usual separators) masked down to
 * their last two digits: a provider may quote a recipient in its error text.
 */
export function maskPhones(s: string): string {
  return s.replace(/\+?\d[\d ().-]{5,}\d/g, (m) => {
    const digits = m.replace(/\D/g, '');
    return digits.length < 7 ? m : `${m.startsWith('+') ? '+' : ''}${'*'.repeat(digits.length - 2)}${digits.slice(-2)}`;
  });
}

/**
 * Provider text fit for an error message and the delivery log: one ASCII line, short,
 * with every secret the process knows replaced and phone numbers masked.
 */
export function providerText(s: string, secrets: readonly string[] = [], max = 200): string {
  let out = s;
  for (const v of secrets) if (v) out = out.split(v).join('[REDACTED]');
  out = maskPhones(scrub(ascii(out).replace(/\s+/g, ' ').trim()));
  return out.length > max ? `${out.slice(0, max - 3)}...` : out;
}

/** `Retry-After` as a short suffix for a message. */
export function retryAfter(h: Headers): string {
  const ms = retryAfterMs(h);
  return ms === undefined ? '' : ` (retry after ${Math.ceil(ms / 1000)} s)`;
}

/** `Retry-After` in ms: delay-seconds or an HTTP date; undefined when absent or unreadable. Capped at a day. */
export function retryAfterMs(h: Headers, now = Date.now()): number | undefined {
  const v = h.get('retry-after')?.trim();
  if (!v) return undefined;
  if (/^\d{1,9}$/.test(v)) return Math.min(Number(v) * 1000, 86_400_000);
  const at = Date.parse(v);
  return Number.isNaN(at) ? undefined : Math.min(Math.max(0, at - now), 86_400_000);
}

/** The retry hints of an answer for a DeliveryError: Retry-After, and 410 = the endpoint is gone. */
export function hints(a: Pick<HttpAnswer, 'status' | 'headers'>): { retryAfterMs?: number; gone?: boolean } {
  const ms = retryAfterMs(a.headers);
  return { ...(ms !== undefined ? { retryAfterMs: ms } : {}), ...(a.status === 410 ? { gone: true } : {}) };
}
