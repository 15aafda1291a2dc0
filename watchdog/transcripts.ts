import { closeSync, type Dirent, existsSync, fstatSync, openSync, readdirSync, readSync, statSync } from 'node:fs';
import { join } from 'node:path';
import type { ReplayInput } from '../core/replay.ts';
import { IdSchema } from '../core/wire.ts';
import { transcriptInputs } from '../sensors/claude-code/transcripts.ts';
import { rolloutSession } from '../sensors/codex/replay.ts';
import { chatSession } from '../sensors/gemini/replay.ts';
import type { LoadedSession } from './collect.ts';
import type { WatchdogPaths } from './options.ts';

// The agents the watchdog reads from disk, with no hook installed (docs/watchdog.md):
// each tick lists the transcript files modified since the window start, newest first and
// at most `max_files`, reads each (a big one: its first line, which names the session,
// and its last `max_bytes`) and maps it through the agent's own sensor reader, the one
// `vigil replay` uses. The sessions then go to the tick's one judge beside opencode's.

interface Found {
  file: string;
  mtime: number;
  /** Gemini: a subagent's file sits in a folder named by its parent session. */
  parent?: string;
}

export interface TranscriptAgent {
  name: string;
  /** The agent's transcript folder, from the tick's paths. */
  root: (p: WatchdogPaths) => string;
  /** Whether a file (path relative to root, split) is one of its transcripts; the parent session if it says. */
  match: (parts: string[]) => { parent?: string } | undefined;
  /** The file's judge inputs, through the sensor's mapping; undefined when it is not a transcript. */
  load: (f: Found, text: string) => ReplayInput[] | undefined;
}

const UUID = /^[0-9a-f-]{36}$/;
const progress = (events: { ts: number }[]) => events.map((e) => ({ type: 'progress', event: e }) as ReplayInput);

/** The per-agent list. Depths follow each agent's layout (docs/claude-code.md, codex.md, gemini.md). */
export const TRANSCRIPT_AGENTS: readonly TranscriptAgent[] = [
  {
    // <dir>/<session>.jsonl, and <dir>/<session>/subagents/agent-<id>.jsonl
    name: 'claude-code',
    root: (p) => p.claudeProjects,
    match: (parts) =>
      (parts.length === 2 || (parts.length === 4 && parts[2] === 'subagents')) && parts.at(-1)!.endsWith('.jsonl')
        ? {}
        : undefined,
    load: (f, text) => transcriptInputs(f.file, new Map(), [], text),
  },
  {
    // YYYY/MM/DD/rollout-*.jsonl
    name: 'codex',
    root: (p) => p.codexSessions,
    match: (parts) => (parts.length === 4 && /^rollout-.*\.jsonl$/.test(parts[3]) ? {} : undefined),
    load: (_f, text) => {
      const s = rolloutSession(text);
      return s ? progress(s.events) : undefined;
    },
  },
  {
    // <project>/chats/session-*.jsonl, a subagent's in <project>/chats/<parent session>/<id>.jsonl
    name: 'gemini',
    root: (p) => p.geminiTmp,
    match: (parts) => {
      if (parts.length === 3 && parts[1] === 'chats' && /^session-.*\.jsonl$/.test(parts[2])) return {};
      if (parts.length === 4 && parts[1] === 'chats' && UUID.test(parts[2]) && parts[3].endsWith('.jsonl'))
        return { parent: parts[2] };
      return undefined;
    },
    load: (f, text) => {
      const s = chatSession(text, f.parent);
      return s ? progress(s.events) : undefined;
    },
  },
];

/** Files under root, four levels at most, that `match` takes and that changed at or after `since`. */
function listRecent(root: string, agent: TranscriptAgent, since: number): Found[] {
  const out: Found[] = [];
  const walk = (d: string, parts: string[]) => {
    if (parts.length > 4) return;
    let entries: Dirent[];
    try {
      entries = readdirSync(d, { withFileTypes: true });
    } catch {
      return; // gone or unreadable: nothing of it to read this tick
    }
    for (const e of entries) {
      const p = join(d, e.name);
      const rel = [...parts, e.name];
      if (e.isDirectory()) walk(p, rel);
      else if (e.isFile()) {
        const m = agent.match(rel);
        if (!m) continue;
        try {
          const mtime = statSync(p).mtimeMs;
          if (mtime >= since) out.push({ file: p, mtime, ...m });
        } catch {
          // removed between the listing and the stat
        }
      }
    }
  };
  walk(root, []);
  return out;
}

/** The whole file, or its first line and its last `max` bytes (from the first whole line). */
export function readBounded(file: string, max: number): string {
  const fd = openSync(file, 'r');
  try {
    const size = fstatSync(fd).size;
    const read = (pos: number, len: number) => {
      const b = Buffer.alloc(len);
      const n = readSync(fd, b, 0, len, pos);
      return b.subarray(0, n).toString('utf8');
    };
    if (size <= max) return read(0, size);
    const head = read(0, Math.min(64 * 1024, max));
    const first = head.slice(0, head.indexOf('\n') + 1);
    const tail = read(size - max, max);
    return first + tail.slice(tail.indexOf('\n') + 1);
  } finally {
    closeSync(fd);
  }
}

export interface TranscriptRead {
  sessions: LoadedSession[];
  /** Files read this tick. */
  files: number;
  /** More files changed in the window than max_files. */
  truncated: boolean;
}

/** One file's inputs, one LoadedSession per session they name (a file can hold a subagent). */
function sessionsOf(inputs: ReplayInput[], updated: number): LoadedSession[] {
  const by = new Map<string, LoadedSession>();
  for (const i of inputs) {
    if (i.type !== 'progress') continue;
    const e = i.event;
    let s = by.get(e.session_id);
    if (!s) {
      s = { id: e.session_id, active: true, updated, inputs: [] };
      by.set(e.session_id, s);
    }
    if (!s.parent && e.parent_session_id) s.parent = e.parent_session_id;
    if (!s.agent && e.agent) s.agent = e.agent;
    s.inputs.push(i);
  }
  // an id the service would refuse would fail the whole report
  return [...by.values()].filter((s) => IdSchema.safeParse(s.id).success);
}

export function collectTranscripts(
  paths: WatchdogPaths,
  o: { since: number; maxFiles: number; maxBytes: number; agents?: readonly TranscriptAgent[] },
): TranscriptRead {
  const found: Found[] = [];
  const agentOf = new Map<string, TranscriptAgent>();
  for (const a of o.agents ?? TRANSCRIPT_AGENTS) {
    const root = a.root(paths);
    if (!existsSync(root)) continue;
    for (const f of listRecent(root, a, o.since)) {
      found.push(f);
      agentOf.set(f.file, a);
    }
  }
  found.sort((x, y) => y.mtime - x.mtime);
  const take = found.slice(0, o.maxFiles);
  const merged = new Map<string, LoadedSession>();
  let files = 0;
  for (const f of take) {
    let text: string;
    try {
      text = readBounded(f.file, o.maxBytes);
    } catch {
      continue; // removed since the listing
    }
    files++;
    const inputs = agentOf.get(f.file)!.load(f, text);
    if (!inputs) continue;
    for (const s of sessionsOf(inputs, f.mtime)) {
      const had = merged.get(s.id);
      if (!had) merged.set(s.id, s);
      else {
        // a session over several files (a resumed rollout): one session for the judge
        had.inputs.push(...s.inputs);
        had.updated = Math.max(had.updated, s.updated);
      }
    }
  }
  return { sessions: [...merged.values()], files, truncated: found.length > take.length };
}
