import { inject, injectable } from 'tsyringe';
import type { Alert } from '../../core/alert.ts';
import type { Channel } from '../../core/contracts.ts';
import { DeliveryError } from '../../core/errors.ts';
import { TOKENS } from '../../core/tokens.ts';
import { readSecret } from '../shared/env.ts';
import { type HttpAnswer, hints, isRetryableStatus, postBytes, providerText, retryAfter } from '../shared/http.ts';
import { pagerDutyEvent } from './pagerduty.event.ts';
import type { PagerDutyOptions } from './pagerduty.options.ts';

/**
 * PagerDuty Events API v2 with Node's fetch (the official pdjs client forces https,
 * retries 429 on its own for a minute and is unmaintained). One POST per transition;
 * the routing key travels in the body and never in an error.
 */
@injectable()
export class PagerDutyChannel implements Channel {
  readonly type = 'pagerduty';
  private readonly routingKey: string;

  constructor(
    @inject(TOKENS.PluginOptions) private readonly opts: PagerDutyOptions,
    @inject(TOKENS.PluginName) readonly name: string,
    @inject(TOKENS.Env) env: NodeJS.ProcessEnv,
  ) {
    this.routingKey = readSecret(env, opts.routing_key_env);
  }

  async send(alert: Alert, signal: AbortSignal): Promise<void> {
    const event = pagerDutyEvent(alert, this.routingKey, this.opts);
    const answer = await postBytes('pagerduty', this.opts.url, {
      headers: { 'content-type': 'application/json', 'user-agent': 'Vigil' },
      body: Buffer.from(JSON.stringify(event), 'utf8'),
      timeoutMs: this.opts.timeout_ms,
      signal,
    });
    this.check(answer);
  }

  /** 202 accepted; 400 invalid event (permanent, PagerDuty's `errors` quoted); 429 and 5xx retryable. */
  private check({ status, headers, text }: HttpAnswer): void {
    if (status >= 200 && status < 300) return;
    let detail = '';
    try {
      // {"status":"invalid event","message":"Event object is invalid","errors":["..."]}
      const body = JSON.parse(text) as { status?: unknown; message?: unknown; errors?: unknown };
      const errors = Array.isArray(body.errors) ? body.errors.filter((e) => typeof e === 'string') : [];
      const head = typeof body.status === 'string' ? body.status : typeof body.message === 'string' ? body.message : '';
      const words = [head, errors.join('; ')].filter(Boolean).join(': ');
      if (words) detail = ` (${providerText(words, [this.routingKey], 240)})`;
    } catch {
      // a 429 is plain text ("429 - Request Limit Exceeded"): the status says it all
    }
    const moved = status >= 300 && status < 400 ? ' (redirects are not followed)' : '';
    throw new DeliveryError(`pagerduty answered ${status}${detail}${moved}${retryAfter(headers)}`, {
      retryable: isRetryableStatus(status),
      status,
      ...hints({ status, headers }),
    });
  }
}
