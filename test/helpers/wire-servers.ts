import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Writable } from 'node:stream';
import { createLogger, type Logger } from '../../core/logger.ts';

/**
 * Local stand-ins for the providers' endpoints (127.0.0.1, port 0): each records every
 * request byte for byte and answers with the providers' real bodies, scripted per test.
 * Sources of the bodies: /work/shared/reference/channels.md sections 1-5.
 */

export interface WireRequest {
  method: string;
  /** Path and query, as sent. */
  url: string;
  headers: IncomingHttpHeaders;
  /** The exact bytes received. */
  body: Buffer;
  text: string;
}

export interface WireReply {
  status: number;
  headers?: Record<string, string>;
  body?: string;
  /** Never answer (a timeout); the socket is closed with the server. */
  hang?: boolean;
}

type Reply = WireReply | ((req: WireRequest) => WireReply);

export interface WireServer {
  /** http://127.0.0.1:<port> */
  origin: string;
  requests: WireRequest[];
  /** Queue replies for the next requests, in order; after them `fallback` answers. */
  script(...replies: Reply[]): void;
  close(): Promise<void>;
}

export async function wireServer(fallback: Reply): Promise<WireServer> {
  const requests: WireRequest[] = [];
  const queue: Reply[] = [];
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      const r: WireRequest = {
        method: req.method ?? '',
        url: req.url ?? '',
        headers: req.headers,
        body,
        text: body.toString('utf8'),
      };
      requests.push(r);
      const next = queue.shift() ?? fallback;
      const reply = typeof next === 'function' ? next(r) : next;
      if (reply.hang) return;
      res.writeHead(reply.status, reply.headers ?? {}).end(reply.body ?? '');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    requests,
    script: (...r) => queue.push(...r),
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** A port with nothing listening: connection refused. */
export async function closedPort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const port = (s.address() as AddressInfo).port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

/** A real (redacting) logger whose lines a test can read. */
export function captureLogger(): { logger: Logger; lines: string[]; text(): string } {
  const lines: string[] = [];
  const destination = new Writable({
    write(chunk, _enc, cb) {
      lines.push(String(chunk));
      cb();
    },
  });
  return { logger: createLogger({ destination, level: 'debug' }), lines, text: () => lines.join('') };
}

const JSON_TYPE = { 'content-type': 'application/json' };
const TEXT_TYPE = { 'content-type': 'text/plain; charset=utf-8' };

/** PagerDuty Events API v2 (reference section 1, "Responses"). */
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

/** Twilio Messages.json (reference section 2): the spec's 201 example and the error body shape. */
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
  tooManyRequests: (): WireReply => TWILIO.error(429, 20429, 'Too Many Requests'),
};

/** Slack incoming webhooks (reference section 3): plain-text bodies, a JSON 429 with Retry-After. */
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

/** ntfy (reference section 4): the published message as JSON, and its error object. */
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
