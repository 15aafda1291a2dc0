import type { FastifyReply, FastifyRequest } from 'fastify';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { AppError } from '../../core/errors.ts';
import type { Vigil } from '../../core/vigil.ts';
import type { adminGuard } from '../auth.ts';
import { sendAsset } from './assets.ts';
import { describeKnobs, type KnobSection } from './knob-schema.ts';
import { Live, type LiveOptions } from './live.ts';
import { Tickets } from './tickets.ts';

type Guard = ReturnType<typeof adminGuard>;

export interface AdminPageOptions {
  /** The admin token guard (service/auth.ts). */
  admin: Guard;
  /** Bound off loopback: every route needs the token, /events a ticket. */
  guarded: boolean;
  tokenConfigured: boolean;
  version: string;
  live?: LiveOptions;
}

const ASSET = /^\/admin\/assets\/[a-z]+\.(js|css)$/;

/**
 * The service-wide guard off loopback, less what the page needs before it has the
 * token: the static shell (no data in it) and /events with a ticket, which its route
 * checks itself. Everything the page then reads or does carries the token.
 */
export function pageAware(guard: Guard): Guard {
  return async (req: FastifyRequest, reply: FastifyReply) => {
    const q = req.url.indexOf('?');
    const path = q < 0 ? req.url : req.url.slice(0, q);
    const query = q < 0 ? '' : req.url.slice(q);
    if (req.method === 'GET' && (path === '/' || ASSET.test(path))) return;
    if (req.method === 'GET' && path === '/events' && /[?&]ticket=/.test(query)) return;
    return guard(req, reply);
  };
}

/** The admin page, its live event stream and the read routes it adds (knob schemas, page meta). */
export const adminPage =
  (vigil: Vigil, o: AdminPageOptions): FastifyPluginAsyncZod =>
  async (app) => {
    const live = new Live(vigil, o.live);
    const tickets = new Tickets();
    live.start();
    // Open streams would hold server.close() forever: end them first.
    app.addHook('preClose', async () => live.stop());

    app.get('/', { schema: { hide: true } }, (req, reply) => sendAsset(req, reply, 'index.html'));
    app.get(
      '/admin/assets/:file',
      { schema: { hide: true, params: z.strictObject({ file: z.enum(['app.js', 'app.css']) }) } },
      (req, reply) => sendAsset(req, reply, req.params.file),
    );

    app.get(
      '/admin/meta',
      { schema: { summary: 'What the admin page needs to know about this service' } },
      async () => ({
        version: o.version,
        guarded: o.guarded,
        token_configured: o.tokenConfigured,
        watchdog_interval_ms: vigil.config.watchdog.interval as number,
        stale_after_ms: vigil.config.detection.stale_after as number,
      }),
    );

    let knobSections: KnobSection[] | undefined;
    app.get(
      '/knobs/schema',
      { schema: { summary: 'Each knob section: JSON Schema (what PATCH /knobs accepts), defaults, one-line hints' } },
      async () => {
        knobSections ??= describeKnobs(vigil.registry);
        return knobSections;
      },
    );

    app.post(
      '/events/ticket',
      {
        preHandler: o.admin,
        schema: { summary: 'A short-lived, single-use ticket for GET /events (EventSource cannot send headers)' },
      },
      async () => tickets.issue(),
    );

    app.get(
      '/events',
      {
        schema: {
          summary:
            'Server-Sent Events: hello, sessions, transition, tree, delivery, knobs, channel, heartbeat. Off loopback: ?ticket=',
          querystring: z.strictObject({ ticket: z.string().min(1).max(200).optional() }),
        },
      },
      async (req, reply) => {
        // Off loopback a request without a ticket already passed the token guard (onRequest).
        if (req.query.ticket !== undefined && !tickets.redeem(req.query.ticket)) {
          throw new AppError(
            'UNAUTHORIZED',
            'event ticket invalid, expired or used: POST /events/ticket for a new one',
          );
        }
        live.attach(reply);
        return reply;
      },
    );
  };
