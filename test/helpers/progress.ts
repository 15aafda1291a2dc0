import { createHash } from 'node:crypto';

// Progress events as a sensor posts them (POST /progress, one finished tool call each),
// for the suites and benches that drive `vigil serve` over HTTP. Deterministic: the same
// arguments give the same bodies, so a retry resends exactly what was sent.

const sha = (s: string) => createHash('sha256').update(s).digest('hex');

export interface ToolCall {
  tool: string;
  target: string;
  landed?: boolean;
  exit?: number;
}

/** One tool call of `session`: its call_id is `call_<n>`, its fingerprint the call itself (same call, same print). */
export function toolEvent(session: string, n: number, c: ToolCall, ts: number) {
  return {
    session_id: session,
    tool: c.tool,
    call_id: `call_${n}`,
    fingerprint: sha(`${c.tool} ${c.target}${c.landed ? ` #${n}` : ''}`),
    target: c.target,
    exit: c.exit ?? 0,
    landed: c.landed ?? false,
    ts,
  };
}

/**
 * A session that loops: three reads of different files, then `repeats` reads of one
 * file (an unbroken run of one identical lookup: stalling at 5, looping at 8 with the
 * default `progress` knobs). Events one second apart, ending `endsAgo` ms before now.
 */
export function loopingScript(session: string, o: { repeats?: number; endsAgo?: number } = {}) {
  const calls: ToolCall[] = [
    { tool: 'read', target: 'src/a.ts' },
    { tool: 'read', target: 'src/b.ts' },
    { tool: 'read', target: 'src/c.ts' },
    ...Array.from({ length: o.repeats ?? 10 }, () => ({ tool: 'read', target: 'docs/spec.md' })),
  ];
  return script(session, calls, o.endsAgo);
}

/** `calls` as events of `session`, one second apart, the last `endsAgo` ms (default 1 s) before now. */
export function script(session: string, calls: readonly ToolCall[], endsAgo = 1_000) {
  const t0 = Date.now() - endsAgo - calls.length * 1_000;
  return calls.map((c, i) => toolEvent(session, i + 1, c, t0 + i * 1_000));
}
