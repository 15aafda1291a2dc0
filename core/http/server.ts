import swagger from '@fastify/swagger';
import Fastify, { type FastifyInstance } from 'fastify';
import {
  hasZodFastifySchemaValidationErrors,
  jsonSchemaTransform,
  serializerCompiler,
  validatorCompiler,
  type ZodTypeProvider,
} from 'fastify-type-provider-zod';
import type { Vigil } from '../app.ts';
import { formatPath } from '../config.ts';
import { isAppError } from '../errors.ts';
import { alertRoutes } from './routes/alerts.ts';
import { healthRoutes } from './routes/health.ts';

export interface ServerOptions {
  /** Log requests (the service does; tests and benches do not). */
  logger?: boolean;
  version?: string;
}

// The zod type provider and the pino logger make the full generic unwieldy.
export type App = FastifyInstance<any, any, any, any, any>;

/**
 * The HTTP API. Routes are typed from zod schemas (fastify-type-provider-zod), the
 * OpenAPI document is served at /openapi.json, and every validation error is a 400
 * that names the field.
 */
export async function buildServer(vigil: Vigil, opts: ServerOptions = {}): Promise<App> {
  const app = Fastify({
    ...(opts.logger ? { loggerInstance: vigil.logger.child({ part: 'http' }) } : { logger: false }),
    bodyLimit: vigil.config.server.body_limit_bytes,
  }).withTypeProvider<ZodTypeProvider>();
  app.setValidatorCompiler(validatorCompiler);
  app.setSerializerCompiler(serializerCompiler);
  await app.register(swagger, {
    openapi: { info: { title: 'Vigil', version: opts.version ?? '0.0.0' } },
    transform: jsonSchemaTransform,
  });

  app.setErrorHandler((err, req, reply) => {
    if (hasZodFastifySchemaValidationErrors(err)) {
      const where = err.validationContext ?? 'body';
      const problems = err.validation.map((v) => {
        const path = v.instancePath
          .split('/')
          .filter(Boolean)
          .map((p) => (/^\d+$/.test(p) ? Number(p) : p));
        const keys = (v.params as { issue?: { keys?: string[] } })?.issue?.keys;
        const at = formatPath([where, ...path, ...(keys?.length ? [keys[0]] : [])]);
        return `${at}: ${keys?.length ? 'unknown key' : v.message}`;
      });
      return reply
        .code(400)
        .send({ statusCode: 400, code: 'BAD_INPUT', error: 'Bad Request', message: problems.join('; ') });
    }
    if (isAppError(err)) {
      return reply
        .code(err.statusCode)
        .send({ statusCode: err.statusCode, code: err.code, error: err.name, message: err.message });
    }
    const status = (err as { statusCode?: number }).statusCode ?? 500;
    if (status >= 500) req.log.error({ err: (err as Error).message }, 'request failed');
    return reply.code(status).send({
      statusCode: status,
      code: (err as { code?: string }).code ?? 'INTERNAL',
      error: status >= 500 ? 'Internal Server Error' : 'Bad Request',
      message: status >= 500 ? 'internal error' : (err as Error).message,
    });
  });

  await app.register(healthRoutes(vigil, opts.version ?? '0.0.0'));
  await app.register(alertRoutes(vigil));
  app.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger());
  return app;
}
