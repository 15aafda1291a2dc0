import { type Readable, Transform } from 'node:stream';
import { ReadableStream } from 'node:stream/web';
import { type AnswerFacts, jsonFacts, SseReader, sseFacts } from './usage.ts';

// The gate's onSend tap: whatever a route sends (a string, a Buffer, a Node stream, a
// web stream, a fetch Response), the client gets the same bytes at the same moment, and
// the facts of the answer are handed over once it has been sent in full. A stream is
// never held: each chunk goes on before it is looked at.

/** A JSON answer sent as a stream is read up to this size (answers are small; a bigger one is not a model's). */
const MAX_JSON = 4 << 20; // 4 MiB

type Kind = 'sse' | 'json';

const kindOf = (contentType: unknown, head?: string): Kind | undefined => {
  const ct = typeof contentType === 'string' ? contentType.toLowerCase() : '';
  if (ct.includes('text/event-stream')) return 'sse';
  if (ct.includes('json')) return 'json';
  if (head !== undefined) {
    const h = head.trimStart();
    if (h.startsWith('data:') || h.startsWith('event:')) return 'sse';
    if (h.startsWith('{')) return 'json';
  }
  return undefined;
};

const isWebStream = (p: unknown): p is ReadableStream =>
  typeof (p as { getReader?: unknown } | null)?.getReader === 'function';
const isResponse = (p: unknown): p is Response =>
  typeof p === 'object' && p !== null && Object.prototype.toString.call(p) === '[object Response]';

/** What reads the bytes as they pass: fed each chunk, asked for the facts at the end. */
function reader(kind: Kind) {
  const sse = kind === 'sse' ? new SseReader() : undefined;
  const json: Uint8Array[] = [];
  let size = 0;
  return {
    push(chunk: Uint8Array) {
      if (sse) sse.push(chunk as Buffer);
      else if (size <= MAX_JSON) {
        size += chunk.length;
        json.push(chunk);
      }
    },
    end(): AnswerFacts | undefined {
      if (sse) return sse.end();
      return size <= MAX_JSON ? jsonFacts(Buffer.concat(json).toString('utf8')) : undefined;
    },
  };
}

/** A Node pass-through that feeds what flows to the reader and reports at the end. */
function tapNode(src: Readable, kind: Kind, done: (f: AnswerFacts) => void): Readable {
  const r = reader(kind);
  const t = new Transform({
    transform(chunk: Buffer, _enc, cb) {
      cb(null, chunk); // the client's bytes first
      r.push(chunk);
    },
    flush(cb) {
      cb();
      const f = r.end();
      if (f) done(f);
    },
  });
  // An upstream that fails part way ends the client's stream too (fastify sees the
  // error); a client that goes away stops the upstream. (pipe, not pipeline: a quarter
  // of the cost per answer, measured in bench/router.ts.)
  src.on('error', (err) => t.destroy(err));
  t.on('close', () => {
    if (!src.readableEnded) src.destroy();
  });
  src.pipe(t);
  return t;
}

/**
 * The same for a web stream, kept a web stream (fastify sends those natively): a pull
 * source over the upstream's reader, each chunk handed on before it is read (a
 * TransformStream, or converting to a Node stream, costs several times more per chunk).
 */
function tapWeb(src: ReadableStream, kind: Kind, done: (f: AnswerFacts) => void): ReadableStream {
  const r = reader(kind);
  const rd = src.getReader();
  return new ReadableStream<Uint8Array>({
    async pull(ctrl) {
      const { value, done: ended } = await rd.read();
      if (ended) {
        ctrl.close();
        const f = r.end();
        if (f) done(f);
        return;
      }
      ctrl.enqueue(value);
      r.push(value);
    },
    cancel: (reason) => rd.cancel(reason),
  });
}

export interface TapTarget {
  /** The reply's content type and status, and a way to set them (a Response carries its own). */
  contentType(): unknown;
  status(): number;
  adopt(r: Response): void;
}

/**
 * Returns the payload to send instead of `payload` (the same bytes), and calls `done`
 * with the answer's facts and status once they are known. Payloads that are neither
 * JSON nor SSE are returned untouched and `done` is not called.
 */
export function tapAnswer(
  payload: unknown,
  target: TapTarget,
  done: (f: AnswerFacts, status: number) => void,
): unknown {
  if (typeof payload === 'string' || Buffer.isBuffer(payload)) {
    const text = typeof payload === 'string' ? payload : payload.toString('utf8');
    const kind = kindOf(target.contentType(), text.slice(0, 16));
    const f = kind === 'sse' ? sseFacts(text) : kind === 'json' ? jsonFacts(text) : undefined;
    if (f) done(f, target.status());
    return payload;
  }
  if (isResponse(payload)) {
    // What fastify does with a Response, done here so its body can be tapped.
    target.adopt(payload);
    if (!payload.body) return null;
    return tapAnswer(payload.body, target, done);
  }
  const web = isWebStream(payload);
  if (!web && typeof (payload as { pipe?: unknown } | null)?.pipe !== 'function') return payload;
  const kind = kindOf(target.contentType());
  if (!kind) return payload;
  const status = target.status();
  const report = (f: AnswerFacts) => done(f, status);
  return web ? tapWeb(payload, kind, report) : tapNode(payload as Readable, kind, report);
}
