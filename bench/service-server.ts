// The server side of bench/service.ts, in its own process:
//   node bin/run-ts.mjs bench/service-server.ts vigil|vigil-hang
import 'reflect-metadata';
import { z } from 'zod';
import { createRegistry } from '../builtins.ts';
import type { ChannelPlugin } from '../core/contracts.ts';
import { createVigil } from '../index.ts';
import { buildServer } from '../service/server.ts';

// Exit cleanly on SIGTERM so --cpu-prof can write its profile.
process.on('SIGTERM', () => process.exit(0));

const mode = process.argv[2] ?? 'vigil';

// A channel that hangs for 30 s on every delivery (vigil-hang) or returns at once.
const hang = mode === 'vigil-hang';
const slow: ChannelPlugin<Record<string, never>> = {
  kind: 'channel',
  type: 'slow',
  options: z.strictObject({}),
  create: (_c, _o, name) => ({
    type: 'slow',
    name,
    send: (_a, signal) =>
      new Promise<void>((resolve) => {
        if (!hang) return resolve();
        const t = setTimeout(resolve, 30_000);
        signal.addEventListener('abort', () => clearTimeout(t));
      }),
  }),
};
const vigil = await createVigil({
  registry: createRegistry().register(slow),
  env: {},
  overlay: {
    store: { backend: 'memory' },
    notifications: {
      delivery_timeout: '60s',
      channels: [
        {
          name: 'slow',
          type: 'slow',
          min_severity: 'info',
          quiet_window: 0,
          rate_limit: { max: 1_000_000, window: '1h' },
        },
      ],
    },
  },
});
const app = await buildServer(vigil);
const addr = await app.listen({ host: '127.0.0.1', port: 0 });
// Keep alerts flowing into the (possibly hung) channel while the gate is measured.
if (mode !== 'vigil') {
  let i = 0;
  setInterval(() => {
    i++;
    void vigil.notifier.notify({
      dedup_key: `bench-${i}`,
      severity: 'critical',
      title: 'bench',
      summary: 'bench',
      source: 'bench',
    });
  }, 20).unref();
}
process.stdout.write(`ready ${addr}\n`);
