// Errors carry a stable code; the table gives each code its HTTP status, so the
// service never guesses a status from a message.
export const ERRORS = {
  CONFIG_INVALID: 400,
  PLUGIN_CREATE_FAILED: 500,
  PLUGIN_DUPLICATE: 500,
  PLUGIN_INVALID: 500,
  PLUGIN_LOAD_FAILED: 500,
  CHANNEL_NOT_FOUND: 404,
  CHANNEL_DELIVERY_FAILED: 502,
  CHANNEL_TIMEOUT: 504,
  STORE_UNAVAILABLE: 503,
  /** Redis refused the password (or the user): not an outage, a configuration to fix. */
  AUTH_FAILED: 503,
  BAD_INPUT: 400,
  UNAUTHORIZED: 401,
  FORBIDDEN: 403,
  /** The Host header names a host not in server.allowed_hosts (DNS rebinding). */
  HOST_NOT_ALLOWED: 403,
  /** A session bound to its sensor's key named without that key (X-Vigil-Session-Key). */
  SESSION_KEY_MISMATCH: 403,
  NOT_FOUND: 404,
  /** A raw hook payload from a peer that is not on this machine (the hook endpoint answers loopback only). */
  HOOK_NOT_LOOPBACK: 403,
  /** A hook call without this user's hook key (X-Vigil-Hook-Key). */
  HOOK_KEY_MISMATCH: 401,
  /** A client over a per-client limit (requests, new sessions). */
  RATE_LIMITED: 429,
} as const satisfies Record<string, number>;

export type ErrorCode = keyof typeof ERRORS;

export class AppError extends Error {
  readonly statusCode: number;
  readonly retryable: boolean;
  constructor(
    readonly code: ErrorCode,
    message: string,
    opts: { cause?: unknown; retryable?: boolean } = {},
  ) {
    super(message, { cause: opts.cause });
    this.name = 'AppError';
    this.statusCode = ERRORS[code];
    this.retryable = opts.retryable ?? false;
  }
}

export function isAppError(e: unknown): e is AppError {
  return e instanceof Error && (e as AppError).name === 'AppError' && typeof (e as AppError).code === 'string';
}

/**
 * A failed delivery, classified once where the channel knows the wire format:
 * `retryable` (timeout, 429, 5xx, network) or permanent (bad request, bad number,
 * missing binary). The worker retries only the former.
 */
export class DeliveryError extends AppError {
  constructor(
    message: string,
    opts: {
      retryable: boolean;
      cause?: unknown;
      status?: number;
      providerCode?: string | number;
      /** The provider said when to try again (Retry-After), in ms. */
      retryAfterMs?: number;
      /** The endpoint is gone for good (HTTP 410): the channel is disabled. */
      gone?: boolean;
    },
  ) {
    super('CHANNEL_DELIVERY_FAILED', message, opts);
    this.name = 'AppError';
    this.status = opts.status;
    this.providerCode = opts.providerCode;
    this.retryAfterMs = opts.retryAfterMs;
    this.gone = opts.gone ?? false;
  }
  readonly status?: number;
  readonly providerCode?: string | number;
  readonly retryAfterMs?: number;
  readonly gone: boolean;
}

export function isDeliveryError(e: unknown): e is DeliveryError {
  return isAppError(e) && e.code === 'CHANNEL_DELIVERY_FAILED';
}

/** Retryable unless a channel said otherwise: an unknown failure gets its one retry. */
export function isRetryable(e: unknown): boolean {
  if (isAppError(e)) return e.retryable;
  return true;
}
