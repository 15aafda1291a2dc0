import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { AppError } from '../../core/errors.ts';
import type { Vigil } from '../../core/vigil.ts';
import { IdSchema } from '../../core/wire.ts';

export const readoutRoutes =
  (vigil: Vigil): FastifyPluginAsyncZod =>
  async (app) => {
    app.get(
      '/sessions',
      {
        schema: {
          summary: 'The Sessions readout: verdict, stage, turns and $ since landed, top repeated target, plugin live',
          querystring: z.strictObject({ limit: z.coerce.number().int().min(1).max(10_000).default(1000) }),
        },
      },
      async (req) => vigil.engine.sessionRows(req.query.limit),
    );

    app.get(
      '/sessions/:id/report',
      {
        schema: {
          summary: 'The incident report of a session (text, no content)',
          params: z.strictObject({ id: IdSchema }),
        },
      },
      async (req, reply) => {
        const r = await vigil.engine.report(req.params.id);
        if (r === undefined) throw new AppError('NOT_FOUND', `no session "${req.params.id}"`);
        return reply.type('text/plain; charset=utf-8').send(`${r}\n`);
      },
    );

    app.get(
      '/warnings',
      { schema: { summary: 'The warnings: sessions that are stalling or looping, worst first' } },
      async () => {
        const rows = await vigil.engine.sessionRows(10_000);
        return rows
          .filter((r) => r.verdict !== 'ok')
          .map((r) => ({
            session: r.session,
            agent: r.agent,
            root: r.root,
            level: r.verdict,
            stage: r.stage,
            turns_since_landed: r.turns_since_landed,
            usd_since_landed: r.usd_since_landed,
            top_target: r.top_target,
            top_count: r.top_count,
            reason: r.reason,
          }));
      },
    );

    // Prometheus text where a scraper looks by default; the old path stays for configured scrapers.
    const prometheus = async (_req: unknown, reply: import('fastify').FastifyReply) =>
      reply.type(vigil.metrics.registry.contentType).send(await vigil.metrics.registry.metrics());
    app.get('/metrics', { schema: { summary: 'Prometheus metrics (text exposition format)' } }, prometheus);
    app.get('/metrics/prometheus', { schema: { summary: 'Prometheus metrics (same as /metrics)' } }, prometheus);

    app.get(
      '/trees/:root',
      {
        schema: {
          summary: 'A tree: mode stage, refusals, caps and pending directives',
          params: z.strictObject({ root: IdSchema }),
        },
      },
      async (req) => ({
        tree: (await vigil.engine.treeState(req.params.root)) ?? null,
        directives: await vigil.engine.directives.pending(req.params.root),
      }),
    );

    app.get(
      '/panels',
      { schema: { summary: "Tables the detectors contribute (the breaker's models, ...), for the admin page" } },
      async () => {
        const out = [];
        for (const d of vigil.engine.detectors()) {
          for (const p of (await d.panels?.()) ?? []) out.push({ detector: d.type, ...p });
        }
        return out;
      },
    );
  };
