import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { Vigil } from '../../core/app.ts';
import { AgentSchema, IdSchema } from '../../core/wire.ts';

export const GateQuerySchema = z.strictObject({
  conversation: IdSchema,
  agent: AgentSchema.optional(),
  parent: IdSchema.optional(),
  model: z
    .string()
    .min(1)
    .max(200)
    .regex(/^[\x21-\x7e]+$/)
    .optional(),
});

export const GateAnswerSchema = z.object({
  action: z.enum(['allow', 'refuse', 'limit']),
  status: z.literal(429).optional(),
  retry_after_s: z.number().optional(),
  reason: z.string().optional(),
  max_context_tokens: z.number().optional(),
  limit_mechanism: z.enum(['cap', 'overflow']).optional(),
  model_tripped: z.boolean(),
});

export const gateRoutes =
  (vigil: Vigil): FastifyPluginAsyncZod =>
  async (app) => {
    app.post(
      '/gate',
      {
        schema: {
          summary: 'May this conversation request go on? allow, refuse (scoped 429) or limit the context',
          body: GateQuerySchema,
          response: { 200: GateAnswerSchema },
        },
      },
      async (req) => vigil.engine.check(req.body),
    );
  };
