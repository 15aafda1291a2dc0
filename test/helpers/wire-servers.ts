import type { WireReply, WireRequest } from '../../channels/testing/wire.ts';

// The providers' real response bodies, for the local servers of the channel kit
// (channels/testing): each constant is what the provider's documentation shows.

export {
  captureLogger,
  closedPort,
  type WireReply,
  type WireRequest,
  type WireServer,
  wireServer,
} from '../../channels/testing/wire.ts';

const JSON_TYPE = { 'content-type': 'application/json' };
const TEXT_TYPE = { 'content-type': 'text/plain; charset=utf-8' };

/** PagerDuty Events API v2. */
export const PD = {
  accepted: (dedupKey: string): WireReply => ({
    status: 202,
    headers: JSON_TYPE,
    body: JSON.stringify({ status: 'success', message: 'Event processed', dedup_key: dedupKey }),
  }),
  invalid: (errors = ["Length of 'routing_key' is incorrect (should be 32 characters)"]): WireReply => ({
    status: 400,
    headers: JSON_TYPE,
    body: JSON.stringify({ status: 'invalid event', message: 'Event object is invalid', errors }),
  }),
  rateLimited: { status: 429, headers: TEXT_TYPE, body: '429 - Request Limit Exceeded' } as WireReply,
  serverError: {
    status: 500,
    headers: JSON_TYPE,
    body: JSON.stringify({ status: 'error', message: 'Internal Server Error', errors: ['Internal Server Error'] }),
  } as WireReply,
};

/** Twilio Messages.json: the spec's 201 example and the error body shape. */
export const TWILIO = {
  created: (req: WireRequest): WireReply => {
    const f = new URLSearchParams(req.text);
    const sid = /Accounts\/(AC[0-9a-f]{32})\//.exec(req.url)?.[1] ?? 'AC00000000000000000000000000000000';
    return {
      status: 201,
      headers: JSON_TYPE,
      body: JSON.stringify({
        account_sid: sid,
        api_version: '2010-04-01',
        body: f.get('Body'),
        date_created: 'Thu, 24 Aug 2023 05:01:45 +0000',
        date_sent: 'Thu, 24 Aug 2023 05:01:45 +0000',
        date_updated: 'Thu, 24 Aug 2023 05:01:45 +0000',
        direction: 'outbound-api',
        error_code: null,
        error_message: null,
        from: f.get('From'),
        messaging_service_sid: f.get('MessagingServiceSid'),
        num_media: '0',
        num_segments: '1',
        price: null,
        price_unit: null,
        sid: 'SM00000000000000000000000000000000',
        status: 'queued',
        subresource_uris: {
          media: `/2010-04-01/Accounts/${sid}/Messages/SM00000000000000000000000000000000/Media.json`,
        },
        to: f.get('To'),
        uri: `/2010-04-01/Accounts/${sid}/Messages/SM00000000000000000000000000000000.json`,
      }),
    };
  },
  error: (status: number, code: number, message: string): WireReply => ({
    status,
    headers: JSON_TYPE,
    body: JSON.stringify({ code, message, more_info: `https://www.twilio.com/docs/errors/${code}`, status }),
  }),
  invalidTo: (digits: string): WireReply =>
    TWILIO.error(400, 21211, `The 'To' number ${digits} is not a valid phone number.`),
  tooManyRequests: (retryAfter?: string): WireReply => {
    const r = TWILIO.error(429, 20429, 'Too Many Requests');
    return retryAfter === undefined ? r : { ...r, headers: { ...r.headers, 'retry-after': retryAfter } };
  },
};

/** Slack incoming webhooks: plain-text bodies, a JSON 429 with Retry-After. */
export const SLACK = {
  ok: { status: 200, headers: TEXT_TYPE, body: 'ok' } as WireReply,
  invalidPayload: { status: 400, headers: TEXT_TYPE, body: 'invalid_payload' } as WireReply,
  notFound: { status: 404, headers: TEXT_TYPE, body: 'channel_not_found' } as WireReply,
  rateLimited: {
    status: 429,
    headers: { ...JSON_TYPE, 'retry-after': '1' },
    body: JSON.stringify({ retry_after: 1, ok: false, error: 'rate_limited' }),
  } as WireReply,
  archived: { status: 410, headers: TEXT_TYPE, body: 'channel_is_archived' } as WireReply,
  rollupError: { status: 500, headers: TEXT_TYPE, body: 'rollup_error' } as WireReply,
};

/** ntfy: the published message as JSON, and its error object. */
export const NTFY = {
  published: (req: WireRequest): WireReply => {
    const m = JSON.parse(req.text) as Record<string, unknown>;
    return {
      status: 200,
      headers: JSON_TYPE,
      body: JSON.stringify({
        id: 'sPs71M8A2T',
        time: 1700000000,
        expires: 1700043200,
        event: 'message',
        topic: m.topic,
        title: m.title,
        message: m.message,
        priority: m.priority,
        tags: m.tags,
      }),
    };
  },
  tooManyRequests: {
    status: 429,
    headers: JSON_TYPE,
    body: JSON.stringify({
      code: 42901,
      http: 429,
      error: 'limit reached: too many requests',
      link: 'https://ntfy.sh/docs/publish/#limitations',
    }),
  } as WireReply,
};
