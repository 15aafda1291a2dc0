import { createRequire } from 'node:module';
import { isAbsolute, join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { AnyPlugin } from './contracts.ts';
import { AppError } from './errors.ts';
import { isPlugin, type Registry } from './registry.ts';

// Plugins named under `plugins:` in the config file: each entry is a module (a path
// relative to the config file, or a package name) whose exports are plugin
// definitions. They are registered before the config schema is composed, so their
// options are validated exactly like the built-in ones.

/** The plugin definitions a module exports: named exports and the default, each a plugin or a list. */
export function pluginsOf(mod: Record<string, unknown>): AnyPlugin[] {
  const out: AnyPlugin[] = [];
  const seen = new Set<unknown>();
  for (const v of Object.values(mod)) {
    for (const x of Array.isArray(v) ? v : [v]) {
      if (isPlugin(x) && !seen.has(x)) {
        seen.add(x);
        out.push(x);
      }
    }
  }
  return out;
}

/** Where a specifier points: a file URL for paths, the resolved entry for packages (from `baseDir`). */
export function resolveSpec(spec: string, baseDir: string): string {
  if (spec.startsWith('.') || isAbsolute(spec)) return pathToFileURL(resolve(baseDir, spec)).href;
  try {
    return pathToFileURL(createRequire(join(baseDir, 'noop.js')).resolve(spec)).href;
  } catch {
    // An ESM-only package has no `require` entry: let import() resolve it by name.
    return spec;
  }
}

/**
 * Imports each module and registers what it exports. Fails naming the module and the
 * reason: it cannot be loaded, it exports no plugin, or a `type` is already taken.
 * A module already loaded into this registry is skipped.
 */
export async function loadPluginModules(specs: readonly string[], baseDir: string, registry: Registry): Promise<void> {
  for (const [i, spec] of specs.entries()) {
    const where = `plugins[${i}] "${spec}"`;
    const url = resolveSpec(spec, baseDir);
    if ([...registry.origins.values()].includes(url)) continue;
    let mod: Record<string, unknown>;
    try {
      mod = await import(url);
    } catch (e) {
      const err = e as NodeJS.ErrnoException;
      throw new AppError(
        'PLUGIN_LOAD_FAILED',
        `${where}: cannot load (${err.code ?? err.name}: ${err.message.split('\n')[0]})`,
        {
          cause: e,
        },
      );
    }
    const found = pluginsOf(mod);
    if (!found.length) {
      throw new AppError(
        'PLUGIN_LOAD_FAILED',
        `${where}: exports no plugin (export definePlugin({ kind, type, options, create }) from it)`,
      );
    }
    for (const p of found) {
      try {
        registry.register(p, url);
      } catch (e) {
        throw new AppError('PLUGIN_LOAD_FAILED', `${where}: ${(e as Error).message}`, { cause: e });
      }
    }
  }
}
