import type { z } from 'zod';
import { type ProgressEvent, ProgressEventSchema, type RequestRecord, RequestRecordSchema } from './wire.ts';

// The replay input contract: what a reader of recorded history (an agent's transcripts,
// an export, a database) hands the replay, and what the replay asks of a reader. Both
// sides depend on this file and never on each other: a sensor ships its reader, the
// replay knows only this shape, and the composition root (builtins.ts) lists the readers.

/** One recorded input in the wire's own shapes: a progress event or a request record. */
export type ReplayInput = { type: 'progress'; event: ProgressEvent } | { type: 'request'; record: RequestRecord };

export interface InputIssue {
  /** `line 12`, `messages/ses_x.json message 3 part 2`, `session ses_x` */
  where: string;
  field: string;
  message: string;
}

/** What a source says about a session beyond its inputs (exports and databases know agents and parents). */
export interface InputSessionInfo {
  agent?: string;
  parent?: string;
}

export interface LoadedInput {
  /** the reader's kind (`jsonl` for the wire's own JSONL) */
  kind: string;
  /** in replay order */
  inputs: ReplayInput[];
  issues: InputIssue[];
  sessions: Map<string, InputSessionInfo>;
}

export interface LoadOptions {
  /** Called once per issue as it is found (replay prints them to stderr at once). */
  onIssue?: (i: InputIssue) => void;
  /** Progress: lines for JSONL (counted first, only when asked), sessions or files for the others. */
  onProgress?: (done: number, total: number) => void;
}

/** What a streamed input leaves besides its inputs: no input is kept. */
export interface StreamedInput {
  kind: string;
  /** inputs handed over */
  inputs: number;
  /** rejected records, all counted */
  rejected: number;
  /** the first MAX_KEPT_ISSUES of them (each went to onIssue as it was found) */
  issues: InputIssue[];
  sessions: Map<string, InputSessionInfo>;
}

/** Issues kept in a result; the rest are counted (and were each reported as found). */
export const MAX_KEPT_ISSUES = 100;

/** What a reader is shown to decide whether an input is its own. */
export interface InputProbe {
  path: string;
  dir: boolean;
  /** a file's first 200 bytes as UTF-8 ('' for a folder) */
  head: string;
}

/** A reader of one recorded format. The replay asks each in turn; the first to claim an input loads it. */
export interface InputReader {
  /** names the input kind in results */
  readonly kind: string;
  claims(p: InputProbe): boolean;
  /** Every input of PATH, merged by time; each issue also goes to `opts.onIssue` as it is found. */
  load(path: string, opts: LoadOptions): Promise<LoadedInput> | LoadedInput;
}

/** The first issue of a zod error, as field + message. */
export function zodIssue(e: z.ZodError): { field: string; message: string } {
  const i = e.issues[0];
  const field = i.path.length
    ? i.path.join('.')
    : i.code === 'unrecognized_keys'
      ? (i as { keys: string[] }).keys.join(',')
      : '(record)';
  return { field, message: i.message };
}

/** A reader's output checked against the wire schemas (bounds, ASCII): null when it passes, else why not. */
export function checkInput(i: ReplayInput): { field: string; message: string } | null {
  const r = i.type === 'progress' ? ProgressEventSchema.safeParse(i.event) : RequestRecordSchema.safeParse(i.record);
  return r.success ? null : zodIssue(r.error);
}

export const inputTs = (i: ReplayInput): number => (i.type === 'progress' ? i.event.ts : i.record.ts);

/** Sorts inputs into time order, in place; the sort is stable, so a source's own order breaks ties. */
export const byTime = (inputs: ReplayInput[]): ReplayInput[] => inputs.sort((a, b) => inputTs(a) - inputTs(b));
