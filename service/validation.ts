import { formatPath } from '../core/config.ts';

interface Item {
  keyword?: string;
  instancePath: string;
  message?: string;
  params?: Record<string, unknown>;
}

interface RawIssue {
  code: string;
  path: PropertyKey[];
  message: string;
  keys?: string[];
  errors?: RawIssue[][];
}

/**
 * A 400's message names each bad field, e.g. `body[2].fingerprint: 64 lowercase hex
 * chars (sha256)` or `body.prompt: unknown key`. For a union (one event or a batch)
 * the branch that got furthest into the input is the one reported.
 */
export function describeValidation(where: string, items: readonly Item[]): string {
  const out: string[] = [];
  for (const v of items) {
    const path = v.instancePath
      .split('/')
      .filter(Boolean)
      .map((p) => (/^\d+$/.test(p) ? Number(p) : p));
    out.push(
      ...describe([where, ...path], {
        code: v.keyword ?? '',
        path: [],
        message: v.message ?? '',
        ...(v.params as object),
      }),
    );
  }
  return [...new Set(out)].join('; ');
}

function describe(base: PropertyKey[], i: RawIssue): string[] {
  const at = [...base, ...(i.path ?? [])];
  if (i.code === 'unrecognized_keys' && i.keys?.length)
    return i.keys.map((k) => `${formatPath([...at, k])}: unknown key`);
  if (i.code === 'invalid_union' && i.errors?.length) {
    const depth = (b: RawIssue[]) =>
      Math.min(...b.map((x) => x.path.length + (x.code === 'unrecognized_keys' ? 1 : 0)));
    const best = [...i.errors].sort((a, b) => depth(b) - depth(a))[0];
    return best.flatMap((x) => describe(at, x));
  }
  return [`${formatPath(at)}: ${i.message}`];
}
