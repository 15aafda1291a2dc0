import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import type { Vigil } from '../../app.ts';

export const healthRoutes =
  (vigil: Vigil, version: string): FastifyPluginAsyncZod =>
  async (app) => {
    app.get('/health', { schema: { summary: 'Version, backend and Redis state' } }, async () => ({
      ok: true,
      version,
      backend: vigil.store.backend,
      redis: vigil.store.backend === 'redis' ? ((await vigil.store.ping()) ? 'up' : 'down') : 'not configured',
      queue: vigil.queue.kind,
    }));
  };
