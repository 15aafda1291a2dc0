import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Writable } from 'node:stream';
import { createLogger, type Logger } from '../../core/logger.ts';

// A local stand-in for a provider's endpoint (127.0.0.1, port 0): it records every
// request byte for byte and answers with replies scripted per test, in the provider's
// real wire format. Part of the channel test kit (`vigil/testing`).

export interface WireRequest {
  method: string;
  /** Path and query, as sent. */
  url: string;
  headers: IncomingHttpHeaders;
  /** The exact bytes received. */
  body: Buffer;
  text: string;
  /** When it arrived (epoch ms). */
  at: number;
}

export interface WireReply {
  status: number;
  headers?: Record<string, string>;
  body?: string;
  /** Never answer (a timeout); the socket is closed with the server. */
  hang?: boolean;
}

type Reply = WireReply | ((req: WireRequest) => WireReply);

export interface WireServer {
  /** http://127.0.0.1:<port> */
  origin: string;
  requests: WireRequest[];
  /** Queue replies for the next requests, in order; after them `fallback` answers. */
  script(...replies: Reply[]): void;
  close(): Promise<void>;
}

export async function wireServer(fallback: Reply): Promise<WireServer> {
  const requests: WireRequest[] = [];
  const queue: Reply[] = [];
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      const r: WireRequest = {
        method: req.method ?? '',
        url: req.url ?? '',
        headers: req.headers,
        body,
        text: body.toString('utf8'),
        at: Date.now(),
      };
      requests.push(r);
      const next = queue.shift() ?? fallback;
      const reply = typeof next === 'function' ? next(r) : next;
      if (reply.hang) return;
      res.writeHead(reply.status, reply.headers ?? {}).end(reply.body ?? '');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    requests,
    script: (...r) => queue.push(...r),
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** A port with nothing listening: connection refused. */
export async function closedPort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const port = (s.address() as AddressInfo).port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

/** A real (redacting) logger whose lines a test can read. */
export function captureLogger(): { logger: Logger; lines: string[]; text(): string } {
  const lines: string[] = [];
  const destination = new Writable({
    write(chunk, _enc, cb) {
      lines.push(String(chunk));
      cb();
    },
  });
  return { logger: createLogger({ destination, level: 'debug' }), lines, text: () => lines.join('') };
}
