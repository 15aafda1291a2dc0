import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { keys } from '../../core/store/keys.ts';
import type { Vigil } from '../../core/vigil.ts';

/** Each detector's one-glance state (the breaker's tripped models, ...). */
async function detectorHealth(vigil: Vigil): Promise<Record<string, unknown>> {
  const out: Record<string, unknown> = {};
  for (const d of vigil.engine.detectors()) out[d.type] = (await d.health?.()) ?? {};
  return out;
}

export const healthRoutes =
  (vigil: Vigil, version: string): FastifyPluginAsyncZod =>
  async (app) => {
    app.get(
      '/health',
      {
        schema: {
          summary:
            'Version, backend and Redis state, channels (ready or not), knobs not at their default and their source, watchdog last tick, plugin versions seen',
        },
      },
      async () => {
        const now = vigil.clock.now();
        const redis = vigil.store.backend === 'redis' ? ((await vigil.store.ping()) ? 'up' : 'down') : 'not configured';
        // With the store down, answer at once from what this process knows.
        const up = redis !== 'down';
        // Another instance may have changed the runtime knobs since the last tick.
        if (up) await vigil.knobs.refresh().catch(() => false);
        const wd =
          vigil.health.watchdog ??
          (up ? await vigil.store.get<typeof vigil.health.watchdog>(keys.watchdog).catch(() => undefined) : undefined);
        const channels = await vigil.channelStatus({ deliveries: up });
        return {
          ok: redis !== 'down',
          version,
          backend: vigil.store.backend,
          redis,
          queue: vigil.queue.kind,
          queue_depth: up ? await vigil.queue.depth().catch(() => null) : null,
          // Memory backend: alerts the last clean stop spooled, still waiting for delivery.
          ...(vigil.queue.spooled ? { queue_spooled: vigil.queue.spooled() } : {}),
          mode: vigil.mode().type,
          channels,
          // Enabled channels that cannot deliver on this machine: every alert to them fails.
          channels_not_ready: channels.filter((c) => c.enabled && !c.ready).map((c) => c.name),
          knobs: vigil.knobs.overridden(),
          detectors: up ? await detectorHealth(vigil).catch(() => ({})) : {},
          watchdog: wd
            ? {
                last_tick_at: new Date(wd.last_tick_at).toISOString(),
                age_s: Math.round((now - wd.last_tick_at) / 1000),
                result: wd.result,
              }
            : null,
          // Each declared sensor: when it last reported, and what the mode asks that it cannot do itself.
          sensors: vigil.sensorHealth(),
          plugins: [...vigil.health.plugins.entries()].map(([v, at]) => ({
            version: v,
            last_seen_at: new Date(at).toISOString(),
          })),
        };
      },
    );
  };
