import { AsyncLocalStorage } from 'node:async_hooks';
import { inject, injectable } from 'tsyringe';
import twilio from 'twilio';
import type { Alert } from '../../core/alert.ts';
import type { Channel } from '../../core/contracts.ts';
import { DeliveryError } from '../../core/errors.ts';
import { TOKENS } from '../../core/tokens.ts';
import { readSecret } from '../shared/env.ts';
import { retryAfterMs } from '../shared/http.ts';
import type { TwilioOptions } from './twilio.options.ts';
import { maskNumber, smsBody } from './twilio.sms.ts';

type Outcome =
  | { ok: true }
  | { ok: false; retryable: boolean; why: string; status?: number; code?: number; retryAfterMs?: number };

/**
 * The SDK's RestException drops the answer's headers, so Retry-After is read here, on
 * the way through, into the box of the send that made the request.
 */
const answerHints = new AsyncLocalStorage<{ retryAfterMs?: number }>();

class HintingRequestClient extends twilio.RequestClient {
  override async request<T>(opts: Parameters<twilio.RequestClient['request']>[0]) {
    const r = await super.request<T>(opts as never);
    const box = answerHints.getStore();
    const raw = (r.headers as Record<string, unknown> | undefined)?.['retry-after'];
    if (box && r.statusCode >= 400 && raw !== undefined) {
      const ms = retryAfterMs(new Headers({ 'retry-after': String(raw) }));
      if (ms !== undefined) box.retryAfterMs = ms;
    }
    return r;
  }
}

/** Twilio error codes that no retry can fix (https://www.twilio.com/docs/api/errors). */
const PERMANENT: Record<number, string> = {
  21211: 'invalid To number',
  21610: 'recipient replied STOP',
  21608: 'number not verified on a trial account',
  21614: 'not an SMS-capable number',
  20003: 'authentication failed',
};

/** Transitions whose per-recipient outcomes are remembered, so a retry never texts a number twice. */
const REMEMBERED = 1_000;

/**
 * SMS through the official SDK, one message per `to` number. A transition counts as
 * delivered only when every number got it; otherwise the error names the failed
 * recipients by index and masked number (never the full number, never Twilio's
 * message, which quotes it) and is retryable if any failure was. The retry sends only
 * to numbers that failed retryably: the ones already sent, refused for good, or still
 * in flight are not sent again.
 */
@injectable()
export class TwilioChannel implements Channel {
  readonly type = 'twilio';
  private readonly client: twilio.Twilio;
  private readonly sends = new Map<string, Map<number, Promise<Outcome>>>();

  constructor(
    @inject(TOKENS.PluginOptions) private readonly opts: TwilioOptions,
    @inject(TOKENS.PluginName) readonly name: string,
    @inject(TOKENS.Env) env: NodeJS.ProcessEnv,
  ) {
    const sid = readSecret(env, opts.account_sid_env);
    const token = readSecret(env, opts.auth_token_env);
    // autoRetry off: the notifier owns the one retry. logLevel fixed so TWILIO_LOG_LEVEL=debug
    // cannot print requests; env {} so only our options configure the client.
    this.client = twilio(sid, token, {
      timeout: opts.timeout_ms,
      autoRetry: false,
      logLevel: 'info',
      env: {},
      httpClient: new HintingRequestClient({ timeout: opts.timeout_ms, autoRetry: false }),
    });
    if (opts.url) {
      // The SDK's supported override: Domain.baseUrl on the cached api domain. Edge and
      // region would rewrite the host, so they are cleared.
      this.client.api.baseUrl = opts.url.replace(/\/+$/, '');
      this.client.edge = undefined;
      this.client.region = undefined;
    }
  }

  async send(alert: Alert, signal: AbortSignal): Promise<void> {
    if (signal.aborted) throw new DeliveryError('twilio send aborted', { retryable: true });
    const body = smsBody(alert, this.opts.max_segments);
    const per = this.remembered(`${alert.dedup_key}\n${alert.state}\n${alert.seq}`);
    const pending = this.opts.to.map(async (to, i): Promise<Outcome> => {
      const prev = per.get(i);
      if (prev) {
        const o = await prev;
        if (o.ok || !o.retryable) return o;
      }
      const p = this.sendOne(to, body);
      per.set(i, p);
      return p;
    });
    // The SDK takes no AbortSignal: on the pipeline's timeout these settle on their own
    // (timeout_ms) and what they settle to is remembered for the retry.
    const results = await Promise.all(pending);
    const failed = results.flatMap((o, i) => (o.ok ? [] : [{ ...o, i }]));
    if (failed.length === 0) return;
    const n = this.opts.to.length;
    const list = failed.map((f) => `to[${f.i}] ${maskNumber(this.opts.to[f.i])}: ${f.why}`).join('; ');
    // The longest wait any recipient's answer asked for (Retry-After on a 429 or 503).
    const waits = failed.flatMap((f) => (f.retryable && f.retryAfterMs !== undefined ? [f.retryAfterMs] : []));
    throw new DeliveryError(`twilio sent ${n - failed.length} of ${n}; ${list}`, {
      retryable: failed.some((f) => f.retryable),
      status: failed[0].status,
      providerCode: failed[0].code,
      ...(waits.length ? { retryAfterMs: Math.max(...waits) } : {}),
    });
  }

  /** Never rejects: the outcome is classified here, once. */
  private async sendOne(to: string, body: string): Promise<Outcome> {
    const sender = {
      ...(this.opts.from ? { from: this.opts.from } : {}),
      ...(this.opts.messaging_service_sid ? { messagingServiceSid: this.opts.messaging_service_sid } : {}),
    };
    const hints: { retryAfterMs?: number } = {};
    try {
      await answerHints.run(hints, () => this.client.messages.create({ to, body, ...sender }));
      return { ok: true };
    } catch (e) {
      const o = classify(e);
      return !o.ok && hints.retryAfterMs !== undefined ? { ...o, retryAfterMs: hints.retryAfterMs } : o;
    }
  }

  private remembered(key: string): Map<number, Promise<Outcome>> {
    let per = this.sends.get(key);
    if (!per) {
      per = new Map();
      this.sends.set(key, per);
      if (this.sends.size > REMEMBERED) this.sends.delete(this.sends.keys().next().value as string);
    }
    return per;
  }
}

/** RestException: HTTP status + Twilio code. Anything else is the transport (timeout, refused): retryable. */
export function classify(e: unknown): Outcome {
  if (e instanceof twilio.RestException) {
    const status = e.status;
    const code = typeof e.code === 'number' ? e.code : undefined;
    const meaning = code !== undefined ? PERMANENT[code] : undefined;
    const retryable = meaning === undefined && (code === 20429 || status === 429 || status >= 500);
    const why = `${status}${code !== undefined ? ` code ${code}` : ''}${meaning ? ` (${meaning})` : code === 20429 ? ' (too many requests)' : ''}`;
    return { ok: false, retryable, why, status, code };
  }
  const code = (e as { code?: unknown }).code;
  return {
    ok: false,
    retryable: true,
    why: `request failed (${typeof code === 'string' && /^[A-Z_]{2,40}$/.test(code) ? code : 'network error'})`,
  };
}
