import rateLimit from '@fastify/rate-limit';
import swagger from '@fastify/swagger';
import Fastify, { type FastifyInstance, LogController } from 'fastify';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import {
  jsonSchemaTransform,
  serializerCompiler,
  validatorCompiler,
  type ZodTypeProvider,
} from 'fastify-type-provider-zod';
import { AppError } from '../core/errors.ts';
import type { Vigil } from '../core/vigil.ts';
import { adminPage, pageAware } from './admin/index.ts';
import { newSessionLimit, rateLimitOptions } from './admission.ts';
import { accessHook, adminGuard, hostGuard, isLoopback, tokensOf, weakToken } from './auth.ts';
import { errorHandler } from './errors.ts';
import { adminRoutes } from './routes/admin.ts';
import { alertRoutes } from './routes/alerts.ts';
import { gateRoutes } from './routes/gate.ts';
import { healthRoutes } from './routes/health.ts';
import { hookEndpoint, injectTransport } from './routes/hooks.ts';
import { ingestRoutes } from './routes/ingest.ts';
import { readoutRoutes } from './routes/readouts.ts';

export interface ServerOptions {
  /** Log requests (the service does; tests and benches do not). */
  logger?: boolean;
  version?: string;
  /** The address the service binds: off loopback every route needs the admin token. */
  host?: string;
}

// The zod type provider and the pino logger make the full generic unwieldy.
export type App = FastifyInstance<any, any, any, any, any>;

/**
 * The HTTP API. Routes are typed from zod schemas (fastify-type-provider-zod), the
 * OpenAPI document is served at /openapi.json, and every validation error is a 400
 * that names the field.
 */
export async function buildServer(vigil: Vigil, opts: ServerOptions = {}): Promise<App> {
  const srv = vigil.config.server;
  const requestTimeout = srv.request_timeout as number;
  const headersTimeout = srv.headers_timeout as number;
  const app = Fastify({
    ...(opts.logger ? { loggerInstance: vigil.logger.child({ part: 'http' }) } : { logger: false }),
    // One line per request, written below (fastify's own are two, at info).
    logController: new LogController({ disableRequestLogging: true }),
    // No child logger per request (a pino child with redaction costs more than the
    // route): the few lines a request writes carry its id themselves.
    childLoggerFactory: (logger) => logger,
    bodyLimit: srv.body_limit_bytes,
    // Every id the schemas accept (128 characters) fits in a path, URL-encoded.
    routerOptions: { maxParamLength: 512 },
    // A slow or stuck client (headers or a body shorter than its Content-Length) gets
    // a 408 and its socket closed, instead of holding it forever. Node checks the
    // deadlines every connectionsCheckingInterval, so that follows the shorter one.
    requestTimeout,
    http: {
      requestTimeout,
      headersTimeout,
      connectionsCheckingInterval: Math.min(30_000, Math.max(100, Math.floor(headersTimeout / 4))),
    },
  }).withTypeProvider<ZodTypeProvider>();
  // Before anything else: a Host no DNS rebinding can forge, or one the operator listed.
  app.addHook('onRequest', hostGuard(srv.allowed_hosts));
  vigil.metrics.collectProcess();
  if (opts.logger) {
    app.addHook('onResponse', async (req, reply) => {
      const line = {
        reqId: req.id,
        method: req.method,
        url: req.url.split('?')[0], // query strings may carry a ticket
        status: reply.statusCode,
        ms: Math.round(reply.elapsedTime),
      };
      // Routine traffic at debug; client errors at info; server errors at error.
      if (reply.statusCode >= 500) req.log.error(line, 'request failed');
      else if (reply.statusCode >= 400) req.log.info(line, 'request refused');
      else req.log.debug(line, 'request');
    });
  }
  // An action route (Resume, Send test alert, reset) may come with no body even when the
  // client says JSON; that is an empty body, not a bad one.
  const json = app.getDefaultJsonParser('error', 'error');
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (req, body, done) =>
    String(body).trim() === '' ? done(null, undefined) : json(req, body as string, done),
  );
  app.setValidatorCompiler(validatorCompiler);
  app.setSerializerCompiler(serializerCompiler);
  await app.register(swagger, {
    openapi: {
      info: {
        title: 'Vigil',
        version: opts.version ?? '0.0.0',
        description: 'Catch coding agents that spend without progress.',
      },
    },
    transform: jsonSchemaTransform,
  });

  const { admin: token, ingest: ingestToken } = tokensOf(vigil);
  const admin = adminGuard(token);
  const guarded = Boolean(opts.host && !isLoopback(opts.host));
  if (guarded) {
    const weak = weakToken(token, srv.admin_token_env) ?? weakToken(ingestToken, srv.ingest_token_env);
    if (weak) throw new AppError('CONFIG_INVALID', `binding ${opts.host} (not loopback) ${weak}`);
  }
  // Sensors' and routers' routes need the ingestion token (when one is set; always off
  // loopback); off loopback everything else needs the admin token (docs/api.md, Auth).
  const access = accessHook(vigil, { guarded, reader: pageAware(admin) });
  if (access) app.addHook('onRequest', access);
  // After validation: a request naming too many sessions new to the service is refused.
  app.addHook('preHandler', newSessionLimit(vigil));
  await app.register(rateLimit, rateLimitOptions);

  app.setErrorHandler(errorHandler(vigil));

  await app.register(healthRoutes(vigil, opts.version ?? '0.0.0'));
  await app.register(ingestRoutes(vigil));
  await app.register(readoutRoutes(vigil));
  await app.register(alertRoutes(vigil, admin));
  await app.register(adminRoutes(vigil, admin));
  await app.register(gateRoutes(vigil));
  // The agents' hooks on this machine (loopback peers only); off loopback only when the operator says so.
  if (vigil.registry.hooks.size && (!guarded || srv.hooks_off_loopback)) {
    const log = vigil.logger.child({ part: 'hooks' });
    await app.register(
      hookEndpoint({
        bridges: vigil.registry.hooks,
        transport: injectTransport((r) => app.inject(r), ingestToken),
        env: vigil.env,
        version: opts.version ?? '0.0.0',
        bodyLimit: srv.hook_body_limit_bytes,
        onError: (sensor, kind) => log.warn({ sensor, kind }, 'a hook bridge failed: the hook got no opinion'),
      }),
    );
  }
  await app.register(pluginRoutes(vigil, admin));
  await app.register(
    adminPage(vigil, { admin, guarded, tokenConfigured: Boolean(token), version: opts.version ?? '0.0.0' }),
  );
  app.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger());
  return app;
}

/** Routes the detectors contribute (the breaker's readout and Resume), mounted with their own schemas. */
const pluginRoutes =
  (vigil: Vigil, admin: ReturnType<typeof adminGuard>): FastifyPluginAsyncZod =>
  async (app) => {
    for (const d of vigil.engine.detectors()) {
      for (const r of d.routes?.() ?? []) {
        app.route({
          method: r.method,
          url: r.url,
          ...(r.admin ? { preHandler: admin } : {}),
          schema: {
            summary: r.summary,
            tags: [d.type],
            ...(r.params ? { params: r.params } : {}),
            ...(r.querystring ? { querystring: r.querystring } : {}),
            ...(r.body ? { body: r.body } : {}),
          },
          handler: (req) => r.handler({ params: req.params, query: req.query, body: req.body }),
        });
      }
    }
  };
