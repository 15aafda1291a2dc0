import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { Vigil } from '../../core/vigil.ts';
import type { adminGuard } from '../auth.ts';

export const alertRoutes =
  (vigil: Vigil, admin: ReturnType<typeof adminGuard>): FastifyPluginAsyncZod =>
  async (app) => {
    app.get('/alerts', { schema: { summary: 'Open alerts (incidents)' } }, async () => vigil.notifier.openAlerts());

    app.get(
      '/deliveries',
      {
        schema: {
          summary: 'Recent deliveries, failures and suppressions, newest first',
          querystring: z.strictObject({ limit: z.coerce.number().int().min(1).max(1000).default(100) }),
        },
      },
      async (req) => vigil.deliveryLog.recent(req.query.limit),
    );

    app.get(
      '/channels',
      {
        schema: { summary: 'Configured channels (no secrets): routing, whether each can deliver here, last delivery' },
      },
      async () => {
        await vigil.toggles.refresh().catch(() => []);
        const status = new Map((await vigil.channelStatus()).map((c) => [c.name, c]));
        return vigil.notifier.channels().map((c) => {
          const st = status.get(c.name);
          return {
            name: c.name,
            type: c.type,
            enabled: c.enabled,
            min_severity: c.min_severity,
            resolve_messages: c.resolve_messages,
            rate_limit: c.rate_limit,
            quiet_window: c.quiet_window,
            ready: st?.ready ?? true,
            ...(st?.reason ? { reason: st.reason } : {}),
            source: st?.source,
            ...(st?.runtime ? { runtime: st.runtime } : {}),
            last_delivery: st?.last_delivery ?? null,
          };
        });
      },
    );

    app.post(
      '/channels/:name/test',
      {
        preHandler: admin,
        schema: {
          summary: 'Send test alert: the real pipeline, marked TEST, no dedup, quiet window or rate limit',
          params: z.strictObject({ name: z.string().min(1).max(64) }),
          querystring: z.strictObject({ wait_ms: z.coerce.number().int().min(0).max(60_000).default(15_000) }),
        },
      },
      async (req, reply) => {
        const { job_id } = await vigil.notifier.sendTest(req.params.name);
        const r = req.query.wait_ms ? await vigil.notifier.waitForOutcome(job_id, req.query.wait_ms) : undefined;
        return reply
          .code(r ? 200 : 202)
          .send({ job_id, outcome: r?.outcome ?? 'queued', attempts: r?.attempts, reason: r?.reason });
      },
    );
  };
