// How the hook host (hook-host.ts) reaches Vigil's sensor routes (/progress,
// /directives, /directives/ack): in the service's own process (the service answers
// itself, service/routes/hooks.ts), or over HTTP from `vigil relay` to a service
// elsewhere (this file). Either way the same routes, tokens and session keys decide.
// Any failure is `undefined`: the hook then has no opinion (fail open).

export interface VigilTransport {
  /** One request; `headers` carry the plugin id and the session keys. Undefined: no usable answer. */
  request(
    method: 'GET' | 'POST',
    path: string,
    headers: Record<string, string>,
    body?: unknown,
  ): Promise<unknown | undefined>;
}

export interface HttpTransportOptions {
  /** The service's base URL. */
  url: string;
  /** Its ingestion token, when it has one. */
  token?: string;
  /** Per request (ms): past it the hook has no opinion. */
  timeoutMs: number;
}

/** Requests over HTTP with a hard timeout, the ingestion token when set. */
export function httpTransport(o: HttpTransportOptions): VigilTransport {
  const base = o.url.replace(/\/+$/, '');
  return {
    async request(method, path, headers, body) {
      try {
        const r = await fetch(`${base}${path}`, {
          method,
          headers: {
            ...headers,
            ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
            ...(o.token ? { authorization: `Bearer ${o.token}` } : {}),
          },
          ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
          signal: AbortSignal.timeout(o.timeoutMs),
        });
        if (!r.ok) {
          await r.body?.cancel();
          return undefined;
        }
        return await r.json();
      } catch {
        return undefined;
      }
    },
  };
}
