import rateLimit from '@fastify/rate-limit';
import type { FastifyInstance } from 'fastify';
import { serializerCompiler, validatorCompiler } from 'fastify-type-provider-zod';
import { VERSION } from '../../core/paths.ts';
import type { Vigil } from '../../core/vigil.ts';
import { newSessionLimit, rateLimitOptions } from '../admission.ts';
import { accessHook } from '../auth.ts';
import { errorHandler } from '../errors.ts';
import { hookEndpoint, injectTransport } from '../routes/hooks.ts';
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
  /**
   * Also mount the local hook endpoint (POST <prefix>/hooks/<sensor>, loopback peers
   * only): the hooks of Claude Code, Codex CLI and Gemini CLI on the router's machine
   * then post there (vigil install <agent> --url http://127.0.0.1:<port><prefix>).
   * Off unless asked: it takes raw hook payloads.
   */
  hooks?: boolean;
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
  if (o.hooks) {
    // the reduced events go to this mount's own routes, in process
    const prefix = app.prefix;
    const token = vigil.env[vigil.config.server.ingest_token_env] || undefined;
    await app.register(
      hookEndpoint({
        bridges: vigil.registry.hooks,
        transport: injectTransport((r) => app.inject({ ...r, url: `${prefix}${r.url}` }), token),
        env: vigil.env,
        version: VERSION,
        bodyLimit: vigil.config.server.hook_body_limit_bytes,
      }),
    );
  }
}
