import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { SeveritySchema } from '../../core/alert.ts';
import type { Vigil } from '../../core/vigil.ts';
import { IdSchema } from '../../core/wire.ts';
import type { adminGuard } from '../auth.ts';

export const adminRoutes =
  (vigil: Vigil, admin: ReturnType<typeof adminGuard>): FastifyPluginAsyncZod =>
  async (app) => {
    app.get('/knobs', { schema: { summary: 'Every threshold and the mode, as in effect now' } }, async () =>
      vigil.knobs.all(),
    );

    app.patch(
      '/knobs',
      {
        preHandler: admin,
        schema: {
          summary: 'Change knobs (partial; validated like config; effective at once; persisted)',
          body: z.record(z.string(), z.unknown()),
        },
      },
      async (req) => vigil.knobs.patch(req.body),
    );

    app.post(
      '/trees/:root/resume',
      {
        preHandler: admin,
        schema: {
          summary: 'Resume a tree: clears its stage, refusals and caps',
          params: z.strictObject({ root: IdSchema }),
          // A bodyless POST (curl -X POST) arrives as null.
          body: z.strictObject({ by: z.string().min(1).max(64).default('admin') }).nullish(),
        },
      },
      async (req) => ({ tree: await vigil.engine.resume(req.params.root, req.body?.by ?? 'admin') }),
    );

    app.patch(
      '/channels/:name',
      {
        preHandler: admin,
        schema: {
          summary: 'Toggle a channel (enabled, min_severity, resolve_messages); effective at once',
          params: z.strictObject({ name: z.string().min(1).max(64) }),
          body: z.strictObject({
            enabled: z.boolean().optional(),
            min_severity: SeveritySchema.optional(),
            resolve_messages: z.boolean().optional(),
          }),
        },
      },
      async (req) => {
        const c = vigil.notifier.setChannel(req.params.name, req.body);
        const out = {
          name: c.name,
          enabled: c.enabled,
          min_severity: c.min_severity,
          resolve_messages: c.resolve_messages,
        };
        vigil.events.emit('channel', out);
        return out;
      },
    );
  };
