import { CommanderError } from 'commander';
import { z } from 'zod';

// Every command validates its arguments with zod and names the bad one.
export function parseArgs<T extends z.ZodType>(schema: T, raw: unknown, cmd: string): z.output<T> {
  const r = schema.safeParse(raw);
  if (!r.success) {
    const msg = r.error.issues
      .map((i) => {
        const key = String(i.path[0] ?? '?');
        // Environment variables keep their name; options are shown as written.
        const name = /^[A-Z_]+$/.test(key) ? key : `--${key.replace(/_/g, '-')}`;
        return `${name}: ${i.message}`;
      })
      .join('\n  ');
    throw new CommanderError(2, 'vigil.args', `${cmd}: invalid arguments:\n  ${msg}`);
  }
  return r.data;
}

export const Port = z.coerce.number({ error: 'a port number (0-65535)' }).int().min(0).max(65535);
