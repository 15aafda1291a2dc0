import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { SeveritySchema } from '../../core/alert.ts';
import { AppError } from '../../core/errors.ts';
import type { Vigil } from '../../core/vigil.ts';
import { IdSchema } from '../../core/wire.ts';
import type { adminGuard } from '../auth.ts';

export const adminRoutes =
  (vigil: Vigil, admin: ReturnType<typeof adminGuard>): FastifyPluginAsyncZod =>
  async (app) => {
    /** The sections, plus `_sources`: each knob not at its default, with where its value comes from. */
    const withSources = () => ({ ...vigil.knobs.all(), _sources: vigil.knobs.overridden() });

    app.get(
      '/knobs',
      {
        schema: {
          summary:
            'Every threshold and the mode, as in effect now; `_sources` lists each knob not at its default and where it comes from (file, env, overlay, runtime)',
        },
      },
      async () => {
        await vigil.knobs.refresh();
        return withSources();
      },
    );

    app.delete(
      '/knobs',
      { preHandler: admin, schema: { summary: 'Reset every runtime knob: the config applies again (all instances)' } },
      async () => {
        const r = await vigil.knobs.reset();
        return { reset: r.reset, ...withSources() };
      },
    );

    app.delete(
      '/knobs/:knob',
      {
        preHandler: admin,
        schema: {
          summary: 'Reset one runtime knob (`modes.mode`) or a section (`progress`): the config value applies again',
          params: z.strictObject({
            knob: z
              .string()
              .regex(/^[a-z0-9_-]+(\.[a-z0-9_-]+)*$/i, 'a dotted knob path such as modes.mode')
              .max(200),
          }),
        },
      },
      async (req) => {
        const r = await vigil.knobs.reset([req.params.knob]);
        return { reset: r.reset, ...withSources() };
      },
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
          summary:
            'Toggle a channel (enabled, min_severity, resolve_messages); effective at once, saved in the store for every instance',
          params: z.strictObject({ name: z.string().min(1).max(64) }),
          body: z.strictObject({
            enabled: z.boolean().optional(),
            min_severity: SeveritySchema.optional(),
            resolve_messages: z.boolean().optional(),
          }),
        },
      },
      async (req) => {
        const t = await vigil.toggles.set(req.params.name, req.body);
        const out = { name: req.params.name, ...t };
        vigil.events.emit('channel', out);
        return out;
      },
    );

    app.post(
      '/channels/:name/reset',
      {
        preHandler: admin,
        schema: {
          summary: "Drop a channel's runtime toggles: its config values apply again (all instances)",
          params: z.strictObject({ name: z.string().min(1).max(64) }),
        },
      },
      async (req) => {
        const c = vigil.notifier.channels().find((x) => x.name === req.params.name);
        if (!c) throw new AppError('CHANNEL_NOT_FOUND', `no channel named "${req.params.name}"`);
        await vigil.toggles.reset(c.name);
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
