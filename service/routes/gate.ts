import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import type { Vigil } from '../../core/vigil.ts';
import { GateAnswerSchema, GateQuerySchema } from '../../core/wire.ts';
import { SENSOR_ROUTE } from '../auth.ts';

export const gateRoutes =
  (vigil: Vigil): FastifyPluginAsyncZod =>
  async (app) => {
    app.post(
      '/gate',
      {
        // A router holds the ingestion token (it posts request records too), never the admin token.
        config: SENSOR_ROUTE,
        schema: {
          summary: 'May this conversation request go on? allow, refuse (scoped 429) or limit the context',
          body: GateQuerySchema,
          response: { 200: GateAnswerSchema },
        },
      },
      async (req) => vigil.gate(req.body),
    );
  };
