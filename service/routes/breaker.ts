import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { Vigil } from '../../core/app.ts';
import type { adminGuard } from '../auth.ts';

// The behavior breaker's readout and its admin Resume. A model id has slashes
// (`openrouter/z-ai/glm-5.3-flash`): the router path segment carries it URL-encoded.
const ModelParam = z
  .string()
  .min(1)
  .max(200)
  .regex(/^[\x21-\x7e]+$/, 'printable ASCII without spaces');

export const breakerRoutes =
  (vigil: Vigil, admin: ReturnType<typeof adminGuard>): FastifyPluginAsyncZod =>
  async (app) => {
    app.get(
      '/breaker',
      {
        schema: {
          summary: 'Behavior breaker: every model (tripped, cooldown, backoff, latest comparison) and recent evidence',
          querystring: z.strictObject({ limit: z.coerce.number().int().min(0).max(10_000).default(50) }),
        },
      },
      async (req) => vigil.breaker.view(req.query.limit),
    );

    app.post(
      '/breaker/:model/resume',
      {
        preHandler: admin,
        schema: {
          summary: 'Resume a tripped model now (its routing skip ends; the model id URL-encoded)',
          params: z.strictObject({ model: ModelParam }),
          // A bodyless POST arrives as null.
          body: z.strictObject({ by: z.string().min(1).max(64).default('admin') }).nullish(),
        },
      },
      async (req) => vigil.breaker.resume(req.params.model, req.body?.by ?? 'admin'),
    );
  };
