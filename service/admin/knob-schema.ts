import { readFileSync } from 'node:fs';
import { isMap, parseDocument } from 'yaml';
import { z } from 'zod';
import { DEFAULT_CONFIG_PATH } from '../../core/config.ts';
import { knobSchemas as coreKnobSchemas } from '../../core/config-schema.ts';
import type { Registry } from '../../core/registry.ts';

/** One knob section as the page builds its controls from it. */
export interface KnobSection {
  section: string;
  /** What registered it: a detector type, or `modes`. */
  owner: string;
  /** JSON Schema of what PATCH /knobs accepts for the section (zod's input side: durations take "5m" or ms). */
  schema: Record<string, unknown>;
  /** The section's built-in defaults, parsed (durations in ms), as GET /knobs reports values. */
  defaults: Record<string, unknown>;
  /** One line per knob path inside the section, from the comments of config/default.yaml. */
  hints: Record<string, string>;
}

/**
 * The knob sections exactly as core/knobs.ts validates them (one definition, in
 * core/config.ts), with what registered each: new detectors and modes appear here, and
 * so on the page, without editing it.
 */
export function knobSchemas(registry: Registry): Record<string, { owner: string; schema: z.ZodType }> {
  const owners = new Map([...registry.detectors.values()].map((d) => [d.section, d.type]));
  const out: Record<string, { owner: string; schema: z.ZodType }> = {};
  for (const [section, schema] of Object.entries(coreKnobSchemas(registry)))
    out[section] = { owner: owners.get(section) ?? section, schema };
  return out;
}

/** `a.b.c` -> the trailing comment of that key in config/default.yaml. */
export function yamlHints(path = DEFAULT_CONFIG_PATH): Record<string, string> {
  const out: Record<string, string> = {};
  let doc: ReturnType<typeof parseDocument>;
  try {
    doc = parseDocument(readFileSync(path, 'utf8'));
  } catch {
    return out;
  }
  const walk = (node: unknown, at: string[]) => {
    if (!isMap(node)) return;
    for (const pair of node.items) {
      const key = [...at, String((pair.key as { value?: unknown })?.value ?? pair.key)];
      const comment = (pair.value as { comment?: string } | null)?.comment;
      if (comment) out[key.join('.')] = comment.replace(/[^\x20-\x7e]/g, '').trim();
      walk(pair.value, key);
    }
  };
  walk(doc.contents, []);
  return out;
}

export function describeKnobs(registry: Registry): KnobSection[] {
  const hints = yamlHints();
  return Object.entries(knobSchemas(registry)).map(([section, { owner, schema }]) => {
    const own: Record<string, string> = {};
    for (const [k, v] of Object.entries(hints)) if (k.startsWith(`${section}.`)) own[k.slice(section.length + 1)] = v;
    const json = z.toJSONSchema(schema, { io: 'input', unrepresentable: 'any' }) as Record<string, unknown>;
    delete json.$schema;
    return {
      section,
      owner,
      schema: json,
      defaults: schema.parse({}) as Record<string, unknown>,
      hints: own,
    };
  });
}
