import { desktopPlugin } from '../channels/desktop/index.ts';
import { Registry } from './registry.ts';

/** A registry with every built-in plugin. Third parties add theirs with `registry.register(plugin)`. */
export function createRegistry(): Registry {
  return new Registry().register(desktopPlugin);
}
