import type { z } from 'zod';

/**
 * Bench options `--name value` validated with zod; a bad one exits 2 naming the flag.
 */
export function benchArgs<T extends z.ZodType>(schema: T, argv = process.argv.slice(2)): z.output<T> {
  const raw: Record<string, string> = {};
  for (let i = 0; i < argv.length; i++) {
    const m = /^--([a-z-]+)$/.exec(argv[i]);
    if (m) raw[m[1]] = argv[++i] ?? '';
  }
  const r = schema.safeParse(raw);
  if (!r.success) {
    for (const i of r.error.issues) console.error(`--${i.path.join('.') || '?'}: ${i.message}`);
    process.exit(2);
  }
  return r.data;
}
