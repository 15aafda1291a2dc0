import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { byTime, type InputReader, type LoadedInput, type ReplayInput } from '../../core/replay.ts';
import type { ProgressEvent } from '../../core/wire.ts';
import { type LandedTracker, newLandedTracker } from '../shared/landed.ts';
import { finishedCalls, readRollout, toolEvent } from './map.ts';

// A Codex rollout file (`$CODEX_HOME/sessions/YYYY/MM/DD/rollout-*.jsonl`) as the progress
// events its live hooks would have sent (map.ts is the one mapping of both): the turns
// (task_started), each finished call with its exit code, each model call with its usage.
// The thread is the session; a subagent's rollout names its parent thread.

export interface RolloutSession {
  session: string;
  parent?: string;
  agent?: string;
  events: ProgressEvent[];
}

/** True when `head` (a file's first bytes) is a Codex rollout's first line. */
export const isRollout = (head: string): boolean =>
  /^\{"timestamp":"[^"]*","(ordinal":\d+,")?type":"session_meta"/.test(head);

export function rolloutSession(text: string): RolloutSession | undefined {
  const first = readRollout(text.slice(0, text.indexOf('\n') + 1 || text.length), undefined, 0);
  if (!first.thread) return undefined;
  const ids = {
    session_id: first.parent ?? first.thread,
    ...(first.parent ? { agent_id: first.thread, agent_type: first.agent ?? 'default' } : {}),
  };
  const r = readRollout(text, ids, 0);
  const events: ProgressEvent[] = [];
  const session = first.thread;
  r.prompts.forEach((p, i) => {
    events.push({
      kind: 'prompt',
      session_id: session,
      ...(first.parent ? { parent_session_id: first.parent, agent: first.agent ?? 'default' } : {}),
      ...(p.turn ? { call_id: p.turn } : {}),
      resume: i > 0,
      ts: p.ts,
    });
  });
  let tr: LandedTracker = newLandedTracker();
  for (const c of finishedCalls(r)) {
    const t = toolEvent(
      {
        ids,
        name: c.name,
        input: c.input,
        call_id: c.call_id,
        ...(r.cwd ? { cwd: r.cwd } : {}),
        output: c.output,
        ...(c.exit !== undefined ? { exit: c.exit } : {}),
      },
      tr,
      c.ts,
    );
    tr = t.tracker;
    events.push(t.event);
  }
  events.push(...r.models);
  events.sort((a, b) => a.ts - b.ts);
  return {
    session,
    ...(first.parent ? { parent: first.parent } : {}),
    ...(first.agent ? { agent: first.agent } : {}),
    events,
  };
}

/** The Codex rollout files under `dir`, any depth. */
function rolloutFiles(dir: string): string[] {
  const out: string[] = [];
  const walk = (d: string, depth: number) => {
    if (depth > 5) return;
    for (const e of readdirSync(d, { withFileTypes: true })) {
      if (e.isDirectory()) walk(join(d, e.name), depth + 1);
      else if (/^rollout-.*\.jsonl$/.test(e.name)) out.push(join(d, e.name));
    }
  };
  walk(dir, 0);
  return out.sort();
}

/** `vigil replay` of one rollout, or a folder holding them (CODEX_HOME/sessions): merged by time. */
export const codexReader: InputReader = {
  kind: 'codex',
  claims: (p) => (p.dir ? rolloutFiles(p.path).length > 0 : isRollout(p.head)),
  load(path, opts): LoadedInput {
    const out: LoadedInput = { kind: 'codex', inputs: [], issues: [], sessions: new Map() };
    const all: ReplayInput[] = [];
    const files = statSync(path).isDirectory() ? rolloutFiles(path) : [path];
    files.forEach((f, n) => {
      const s = rolloutSession(readFileSync(f, 'utf8'));
      if (!s) {
        const i = { where: f, field: 'session_meta', message: 'not a Codex rollout (no session_meta first)' };
        out.issues.push(i);
        opts.onIssue?.(i);
        return;
      }
      out.sessions.set(s.session, {
        ...(s.agent ? { agent: s.agent } : {}),
        ...(s.parent ? { parent: s.parent } : {}),
      });
      for (const e of s.events) all.push({ type: 'progress', event: e });
      opts.onProgress?.(n + 1, files.length);
    });
    out.inputs = byTime(all);
    return out;
  },
};
