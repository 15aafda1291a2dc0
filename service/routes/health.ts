import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import type { Vigil } from '../../core/app.ts';

export const healthRoutes =
  (vigil: Vigil, version: string): FastifyPluginAsyncZod =>
  async (app) => {
    app.get(
      '/health',
      { schema: { summary: 'Version, backend and Redis state, watchdog last tick, plugin versions seen' } },
      async () => {
        const now = vigil.clock.now();
        const redis = vigil.store.backend === 'redis' ? ((await vigil.store.ping()) ? 'up' : 'down') : 'not configured';
        const wd =
          vigil.health.watchdog ??
          (await vigil.store.get<typeof vigil.health.watchdog>('watchdog:last').catch(() => undefined));
        return {
          ok: redis !== 'down',
          version,
          backend: vigil.store.backend,
          redis,
          queue: vigil.queue.kind,
          mode: vigil.knobs.get<{ mode: string }>('progress').mode,
          watchdog: wd
            ? {
                last_tick_at: new Date(wd.last_tick_at).toISOString(),
                age_s: Math.round((now - wd.last_tick_at) / 1000),
                result: wd.result,
              }
            : null,
          plugins: [...vigil.health.plugins].map(([v, at]) => ({
            version: v,
            last_seen_at: new Date(at).toISOString(),
          })),
          tripped_models: (await vigil.breaker.view(0)).models.filter((m) => m.tripped).map((m) => m.model),
        };
      },
    );
  };
