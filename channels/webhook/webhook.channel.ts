import { inject, injectable } from 'tsyringe';
import type { Alert } from '../../core/alert.ts';
import type { Clock } from '../../core/clock.ts';
import type { Channel } from '../../core/contracts.ts';
import { DeliveryError } from '../../core/errors.ts';
import { TOKENS } from '../../core/tokens.ts';
import { readSecret } from '../shared/env.ts';
import {
  CREDENTIALS_IN_URL,
  type HttpAnswer,
  hasCredentials,
  hints,
  isRetryableStatus,
  postBytes,
  providerText,
  retryAfter,
} from '../shared/http.ts';
import { genericPayload, ntfyPayload, sign, signingKey, slackPayload, webhookId } from './webhook.formats.ts';
import { ntfyRoot, type WebhookOptions } from './webhook.options.ts';

/**
 * POSTs one JSON document per transition: generic (signed per Standard Webhooks),
 * ntfy (JSON publish) or slack (incoming webhook). Secrets (URL, signing key, topic,
 * header values) are read once from env here and never appear in an error.
 */
@injectable()
export class WebhookChannel implements Channel {
  readonly type = 'webhook';
  private readonly url: string;
  private readonly key?: Buffer;
  private readonly topic?: string;
  private readonly headers: Record<string, string>;
  /** Values to strip from any provider text we quote. */
  private readonly secrets: string[] = [];
  /** What error messages call the endpoint: the format, or "webhook" for generic. */
  private readonly what: string;

  constructor(
    @inject(TOKENS.PluginOptions) private readonly opts: WebhookOptions,
    @inject(TOKENS.PluginName) readonly name: string,
    @inject(TOKENS.Env) env: NodeJS.ProcessEnv,
    @inject(TOKENS.Clock) private readonly clock: Clock,
  ) {
    this.what = opts.format === 'generic' ? 'webhook' : opts.format;
    const secret = (n: string) => {
      const v = readSecret(env, n);
      this.secrets.push(v);
      return v;
    };
    if (opts.url_env) {
      this.url = secret(opts.url_env);
      if (!/^https?:\/\/[^\s]+$/i.test(this.url) || !URL.canParse(this.url)) {
        throw new Error(`url_env: ${opts.url_env} does not hold an http(s) URL`);
      }
      if (hasCredentials(this.url)) throw new Error(`url_env: ${opts.url_env}: ${CREDENTIALS_IN_URL}`);
      if (opts.format === 'ntfy' && !ntfyRoot(this.url)) {
        throw new Error(`url_env: ${opts.url_env} must hold the ntfy server root, not a topic URL`);
      }
    } else {
      this.url = opts.url!;
    }
    if (opts.format === 'generic') {
      try {
        this.key = signingKey(secret(opts.secret_env!));
      } catch (e) {
        throw new Error(`secret_env: ${opts.secret_env} ${(e as Error).message}`);
      }
    }
    if (opts.format === 'ntfy') this.topic = opts.topic_env ? secret(opts.topic_env) : opts.topic!;
    this.headers = { ...opts.headers };
    for (const [h, n] of Object.entries(opts.headers_env)) this.headers[h] = secret(n);
  }

  async send(alert: Alert, signal: AbortSignal): Promise<void> {
    const payload =
      this.opts.format === 'slack'
        ? slackPayload(alert)
        : this.opts.format === 'ntfy'
          ? ntfyPayload(alert, this.topic!)
          : genericPayload(alert);
    // Serialised once: these bytes are both signed and sent.
    const body = Buffer.from(JSON.stringify(payload), 'utf8');
    const headers: Record<string, string> = {
      ...this.headers,
      'content-type': 'application/json',
      'user-agent': 'Vigil',
    };
    if (this.key) {
      const id = webhookId(alert);
      const ts = Math.floor(this.clock.now() / 1000);
      headers['webhook-id'] = id;
      headers['webhook-timestamp'] = String(ts);
      headers['webhook-signature'] = sign(this.key, id, ts, body);
    }
    const answer = await postBytes(this.what, this.url, {
      headers,
      body,
      timeoutMs: this.opts.timeout_ms,
      signal,
    });
    this.check(answer);
  }

  /** The one place a response is classified. */
  private check({ status, headers, text }: HttpAnswer): void {
    const ok = status >= 200 && status < 300;
    if (this.opts.format === 'slack') {
      // An incoming webhook answers 200 with the plain-text body "ok"; anything else failed.
      if (status === 200 && text.trim() === 'ok') return;
      const code = slackCode(text, this.secrets);
      if (ok) {
        throw new DeliveryError(`slack answered ${status} with "${code}" instead of ok`, {
          retryable: false,
          status,
          providerCode: code,
        });
      }
      throw new DeliveryError(
        `slack answered ${status}${code ? ` ${code}` : ''}${hint(status)}${retryAfter(headers)}`,
        {
          retryable: isRetryableStatus(status),
          status,
          providerCode: code || undefined,
          ...hints({ status, headers }),
        },
      );
    }
    if (ok) return;
    let detail = '';
    let providerCode: string | number | undefined;
    if (this.opts.format === 'ntfy') {
      // {"code":42901,"http":429,"error":"limit reached: too many requests","link":"..."}
      const e = parseJson(text) as { code?: unknown; error?: unknown } | undefined;
      if (typeof e?.code === 'number') providerCode = e.code;
      const words = [providerCode, typeof e?.error === 'string' ? providerText(e.error, this.secrets, 120) : '']
        .filter(Boolean)
        .join(' ');
      if (words) detail = ` (${words})`;
    }
    throw new DeliveryError(`${this.what} answered ${status}${detail}${hint(status)}${retryAfter(headers)}`, {
      retryable: isRetryableStatus(status),
      status,
      providerCode,
      ...hints({ status, headers }),
    });
  }
}

function hint(status: number): string {
  if (status === 410) return ' (gone: the channel is disabled)';
  if (status >= 300 && status < 400) return ' (redirects are not followed)';
  return '';
}

/** Slack's error code: the plain-text body (`invalid_payload`), or `error` of a JSON body (a 429). */
function slackCode(text: string, secrets: string[]): string {
  const t = text.trim();
  const j = parseJson(t) as { error?: unknown } | undefined;
  const code = typeof j?.error === 'string' ? j.error : t;
  return /^[a-z0-9_]{1,64}$/.test(code) ? code : providerText(code, secrets, 60);
}

function parseJson(t: string): unknown {
  try {
    return JSON.parse(t);
  } catch {
    return undefined;
  }
}
