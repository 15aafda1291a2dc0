import rateLimit from '@fastify/rate-limit';
import type { FastifyInstance } from 'fastify';
import { serializerCompiler, validatorCompiler } from 'fastify-type-provider-zod';
import type { Vigil } from '../../core/vigil.ts';
import { ingestGuard } from '../auth.ts';
import { errorHandler } from '../errors.ts';
import { ingestRoutes } from '../routes/ingest.ts';

// The sensors' half of the service, for a router that embeds Vigil: the same routes
// `vigil serve` has for the opencode plugin, the watchdog and request records
// (POST /progress, /requests, /verdicts, /watchdog/heartbeat, GET /directives,
// POST /directives/ack), with the same schemas, limits, errors and ingestion token,
// mounted under a prefix of the router's choosing. Encapsulated (no fastify-plugin):
// its validator, error handler and token check stay inside it.

export interface VigilIngestOptions {
  vigil: Vigil;
}

export async function vigilIngest(app: FastifyInstance, o: VigilIngestOptions): Promise<void> {
  const { vigil } = o;
  app.setValidatorCompiler(validatorCompiler);
  app.setSerializerCompiler(serializerCompiler);
  app.setErrorHandler(errorHandler(vigil));
  // The per-client rate limit of the ingestion routes; a router that registered
  // @fastify/rate-limit itself already applies the routes' limits.
  if (!app.hasDecorator('rateLimit')) await app.register(rateLimit, { global: false });
  // The sensors send the ingestion token when one is configured (server.ingest_token_env).
  const token = vigil.env[vigil.config.server.ingest_token_env] || undefined;
  if (token) app.addHook('onRequest', ingestGuard(token));
  await app.register(ingestRoutes(vigil));
}
