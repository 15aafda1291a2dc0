// The `vigil` package: the kernel's API plus the built-in plugins. An embedder calls
// createVigil(); a third party writes plugins with definePlugin() and the contracts.
import 'reflect-metadata';
import { createRegistry } from './builtins.ts';
import { createKernel, type KernelOptions, type Vigil } from './core/vigil.ts';

/** The zod a plugin's options schema should use (the same instance Vigil composes its config with). */
export { z } from 'zod';
export * from './core/index.ts';
export { createRegistry };

export type VigilOptions = Omit<KernelOptions, 'registry'> & {
  /** What exists; default: the built-ins (createRegistry()), to which `plugins:` in the config adds. */
  registry?: KernelOptions['registry'];
};

/** Builds and starts a Vigil instance with the built-in plugins (and any the config names under `plugins:`). */
export function createVigil(opts: VigilOptions = {}): Promise<Vigil> {
  return createKernel({ ...opts, registry: opts.registry ?? createRegistry() });
}
