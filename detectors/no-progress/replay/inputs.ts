import { closeSync, createReadStream, openSync, readSync, statSync } from 'node:fs';
import { createInterface } from 'node:readline';
import {
  type InputIssue,
  type InputProbe,
  type InputReader,
  type LoadedInput,
  type LoadOptions,
  MAX_KEPT_ISSUES,
  type ReplayInput,
  type StreamedInput,
  zodIssue,
} from '../../../core/replay.ts';
import { ProgressEventSchema, RequestRecordSchema } from '../../../core/wire.ts';
import { fastInput } from './fastline.ts';

// What `vigil replay INPUT` reads, as judge inputs in replay order. The replay's own
// format is JSONL: one object per line, a progress event or a request record. The
// optional `type` field says which ("progress" | "request"); without it a line with
// `request_id` is a request record, anything else a progress event. Lines are replayed
// in file order (the writer's order is the truth), read line by line: memory does not
// grow with the file. Every other format (an agent's transcripts, an export, a database)
// is read by the first reader (core/replay.ts `InputReader`) that claims it; the readers
// live with their sensors and the caller passes them in (the composition root lists
// them: builtins.ts `replayReaders`). A reader loads its input whole (merging by time
// needs every session first), in its converted form, no content.
// A bad record is reported (where + field + message) and skipped; the rest goes on.
// `eachInput` hands inputs over one at a time and keeps none; `loadInput` collects them.

export interface ReadOptions extends LoadOptions {
  /** Readers of the other formats, asked in order; JSONL when none claims a file. */
  readers?: readonly InputReader[];
}

function probe(path: string): InputProbe {
  if (statSync(path).isDirectory()) return { path, dir: true, head: '' };
  const head = Buffer.alloc(200);
  const fd = openSync(path, 'r');
  let n = 0;
  try {
    n = readSync(fd, head, 0, 200, 0);
  } finally {
    closeSync(fd);
  }
  return { path, dir: false, head: head.subarray(0, n).toString('utf8') };
}

/** The reader that claims PATH, or undefined for the replay's own JSONL. */
export function readerFor(path: string, readers: readonly InputReader[] = []): InputReader | undefined {
  const p = probe(path);
  const r = readers.find((x) => x.claims(p));
  if (r === undefined && p.dir) throw new Error(`no reader knows the folder ${path}`);
  return r;
}

/** The kind of input PATH is: its reader's, or `jsonl`. */
export const detectKind = (path: string, readers?: readonly InputReader[]): string =>
  readerFor(path, readers)?.kind ?? 'jsonl';

export async function loadInput(path: string, opts: ReadOptions = {}): Promise<LoadedInput> {
  const { readers, ...load } = opts;
  const reader = readerFor(path, readers);
  if (reader) return reader.load(path, load);
  const out: LoadedInput = { kind: 'jsonl', inputs: [], issues: [], sessions: new Map() };
  await streamJsonl(
    path,
    (i) => {
      out.inputs.push(i);
    },
    {
      ...load,
      onIssue: (i) => {
        out.issues.push(i);
        load.onIssue?.(i);
      },
    },
  );
  return out;
}

/**
 * Hand INPUT's judge inputs to `each` in replay order, keeping none: a JSONL file is
 * read and judged line by line; what a reader claims is loaded first (merged by time).
 */
export async function eachInput(
  path: string,
  each: (i: ReplayInput) => void,
  opts: ReadOptions = {},
): Promise<StreamedInput> {
  const { readers, ...load } = opts;
  const reader = readerFor(path, readers);
  if (!reader) return streamJsonl(path, each, load);
  const loaded = await reader.load(path, load);
  for (const i of loaded.inputs) each(i);
  return {
    kind: loaded.kind,
    inputs: loaded.inputs.length,
    rejected: loaded.issues.length,
    issues: loaded.issues.slice(0, MAX_KEPT_ISSUES),
    sessions: loaded.sessions,
  };
}

/** One JSONL line -> a judge input, or the issue that rejects it. */
export function parseLine(line: string, where: string): ReplayInput | InputIssue {
  let raw: unknown;
  try {
    raw = JSON.parse(line);
  } catch (e) {
    return { where, field: '(json)', message: `invalid JSON (${(e as Error).message.slice(0, 80)})` };
  }
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) {
    return { where, field: '(json)', message: 'expected a JSON object' };
  }
  // the common, plainly valid records skip zod (fastline.ts: the same checks, the same output)
  const fast = fastInput(raw as Record<string, unknown>);
  if (fast !== undefined) return fast;
  const { type, ...rest } = raw as Record<string, unknown>;
  const isRequest = type === 'request' || (type === undefined && 'request_id' in rest);
  if (type !== undefined && type !== 'request' && type !== 'progress') {
    return {
      where,
      field: 'type',
      message: `expected "progress" or "request", got ${JSON.stringify(type).slice(0, 40)}`,
    };
  }
  if (isRequest) {
    const r = RequestRecordSchema.safeParse(rest);
    return r.success ? { type: 'request', record: r.data } : { where, ...zodIssue(r.error) };
  }
  const r = ProgressEventSchema.safeParse(rest);
  return r.success ? { type: 'progress', event: r.data } : { where, ...zodIssue(r.error) };
}

/** Lines in a file, read in chunks (for a progress total, without holding the file). */
async function countLines(path: string): Promise<number> {
  let n = 0;
  let last = 10;
  for await (const chunk of createReadStream(path)) {
    const buf = chunk as Buffer;
    for (let i = buf.indexOf(10); i >= 0; i = buf.indexOf(10, i + 1)) n++;
    if (buf.length) last = buf[buf.length - 1];
  }
  return last === 10 ? n : n + 1;
}

const isSpace = (c: number) => c === 32 || (c >= 9 && c <= 13) || c === 0xa0 || c === 0xfeff || c > 0x1000;

async function streamJsonl(path: string, each: (i: ReplayInput) => void, opts: LoadOptions): Promise<StreamedInput> {
  const out: StreamedInput = { kind: 'jsonl', inputs: 0, rejected: 0, issues: [], sessions: new Map() };
  const total = opts.onProgress ? await countLines(path) : 0;
  const rl = createInterface({
    input: createReadStream(path, { encoding: 'utf8' }),
    crlfDelay: Number.POSITIVE_INFINITY,
  });
  let n = 0;
  for await (const line of rl) {
    n++;
    if (opts.onProgress && (n & 1023) === 0) opts.onProgress(n, total);
    // blank lines are skipped; only a line starting with a space can be blank
    if (line.length === 0 || (isSpace(line.charCodeAt(0)) && line.trim() === '')) continue;
    const r = parseLine(line, `line ${n}`);
    if ('where' in r) {
      out.rejected++;
      if (out.issues.length < MAX_KEPT_ISSUES) out.issues.push(r);
      opts.onIssue?.(r);
    } else {
      out.inputs++;
      each(r);
    }
  }
  opts.onProgress?.(n, total);
  return out;
}
