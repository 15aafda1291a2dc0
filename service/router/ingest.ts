import rateLimit from '@fastify/rate-limit';
import type { FastifyInstance } from 'fastify';
import { serializerCompiler, validatorCompiler } from 'fastify-type-provider-zod';
import type { Vigil } from '../../core/vigil.ts';
import { newSessionLimit, rateLimitOptions } from '../admission.ts';
import { accessHook } from '../auth.ts';
import { errorHandler } from '../errors.ts';
import { ingestRoutes } from '../routes/ingest.ts';

// The sensors' half of the service, for a router that embeds Vigil: the same routes
// `vigil serve` has for the opencode plugin, the watchdog and request records
// (POST /progress, /requests, /verdicts, /watchdog/heartbeat, GET /directives,
// POST /directives/ack), with the same schemas, limits, errors and ingestion token
// (the service's own hooks: service/auth.ts, service/admission.ts), mounted under a
// prefix of the router's choosing. Encapsulated (no fastify-plugin): its validator,
// error handler and hooks stay inside it, so the router's own routes are untouched.

export interface VigilIngestOptions {
  vigil: Vigil;
}

export async function vigilIngest(app: FastifyInstance, o: VigilIngestOptions): Promise<void> {
  const { vigil } = o;
  app.setValidatorCompiler(validatorCompiler);
  app.setSerializerCompiler(serializerCompiler);
  app.setErrorHandler(errorHandler(vigil));
  // The ingestion token when one is configured (server.ingest_token_env).
  const access = accessHook(vigil);
  if (access) app.addHook('onRequest', access);
  // Per client address: new session ids (server.new_sessions) and the request rate
  // (server.rate_limit); a router that registered @fastify/rate-limit itself already
  // applies the routes' limits.
  app.addHook('preHandler', newSessionLimit(vigil));
  if (!app.hasDecorator('rateLimit')) await app.register(rateLimit, rateLimitOptions);
  await app.register(ingestRoutes(vigil));
}
