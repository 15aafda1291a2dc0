import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { hasZodFastifySchemaValidationErrors } from 'fastify-type-provider-zod';
import { ConfigError } from '../core/config.ts';
import { isAppError } from '../core/errors.ts';
import type { Vigil } from '../core/vigil.ts';
import { describeValidation } from './validation.ts';

/** `progress.dup_warn: Too big ...` -> {path, message}; a path never contains ': '. */
function problemOf(p: string): { path: string; message: string } {
  const i = p.indexOf(': ');
  return i < 0 ? { path: '(root)', message: p } : { path: p.slice(0, i), message: p.slice(i + 2) };
}

/**
 * The error answer of every Vigil route, in the service and where an embedder mounts
 * them (vigil/router): a validation error is a 400 naming the field, an AppError its
 * code's status, anything else a 500 that says nothing of the cause.
 */
export function errorHandler(vigil: Vigil) {
  return (err: FastifyError, req: FastifyRequest, reply: FastifyReply) => {
    if (hasZodFastifySchemaValidationErrors(err)) {
      const message = describeValidation(err.validationContext ?? 'body', err.validation as never);
      vigil.metrics.rejected.inc({ route: req.routeOptions.url ?? 'unknown' });
      return reply.code(400).send({ statusCode: 400, code: 'BAD_INPUT', error: 'Bad Request', message });
    }
    if (isAppError(err)) {
      // A store that does not answer: the client should come back, not give up.
      if (err.code === 'STORE_UNAVAILABLE' || err.code === 'AUTH_FAILED') {
        vigil.metrics.rejected.inc({ route: req.routeOptions.url ?? 'unknown' });
        req.log.warn({ reqId: req.id, err: err.message }, 'store unavailable');
        void reply.header('retry-after', '5');
      }
      const after = (err as { retryAfterS?: number }).retryAfterS;
      if (after !== undefined) void reply.header('retry-after', String(after));
      // A config or knob error also lists each problem by path, so a form can show it beside its field.
      const problems = err instanceof ConfigError ? { problems: err.problems.map(problemOf) } : {};
      return reply
        .code(err.statusCode)
        .send({ statusCode: err.statusCode, code: err.code, error: err.name, message: err.message, ...problems });
    }
    const status = (err as { statusCode?: number }).statusCode ?? 500;
    if (status >= 500) req.log.error({ reqId: req.id, err: (err as Error).message }, 'request failed');
    else vigil.metrics.rejected.inc({ route: req.routeOptions.url ?? 'unknown' });
    return reply.code(status).send({
      statusCode: status,
      code: (err as { code?: string }).code ?? 'INTERNAL',
      error: status >= 500 ? 'Internal Server Error' : 'Bad Request',
      message: status >= 500 ? 'internal error' : `body: ${(err as Error).message}`,
    });
  };
}
