import { registerSecret } from '../../core/logger.ts';

/** An env var name as an option value (`*_env`): the secret itself never sits in config. */
export const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/**
 * Reads a secret named by a `*_env` option and registers it with the logger, so it is
 * scrubbed from any log line. Config load already checked it is set for an enabled
 * channel; this throws (naming the variable, never a value) if the env changed since.
 */
export function readSecret(env: NodeJS.ProcessEnv, name: string): string {
  const v = env[name];
  if (!v) throw new Error(`environment variable ${name} is not set`);
  registerSecret(v);
  return v;
}
