// HTTP access for the page. The admin token lives in sessionStorage for this tab only
// and travels as `Authorization: Bearer`; it is never put in the DOM or a URL.

const KEY = 'vigil.admin.token';

export const token = {
  get(): string {
    return sessionStorage.getItem(KEY) ?? '';
  },
  set(t: string): void {
    sessionStorage.setItem(KEY, t);
  },
  clear(): void {
    sessionStorage.removeItem(KEY);
  },
};

export interface Problem {
  path: string;
  message: string;
}

export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly problems: Problem[] = [],
  ) {
    super(message);
  }
}

export async function api<T = unknown>(method: string, path: string, body?: unknown): Promise<T> {
  const headers: Record<string, string> = {};
  const t = token.get();
  if (t) headers.authorization = `Bearer ${t}`;
  if (body !== undefined) headers['content-type'] = 'application/json';
  let res: Response;
  try {
    res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  } catch {
    throw new ApiError(0, 'service unreachable');
  }
  const text = await res.text();
  const type = res.headers.get('content-type') ?? '';
  const data = type.includes('json') && text ? JSON.parse(text) : text;
  if (!res.ok) {
    const msg = typeof data === 'object' && data?.message ? String(data.message) : `HTTP ${res.status}`;
    throw new ApiError(res.status, msg.split('\n')[0], (typeof data === 'object' && data?.problems) || []);
  }
  return data as T;
}

/** One line for an error shown beside the control that caused it. */
export function errorText(e: unknown): string {
  if (e instanceof ApiError) {
    if (e.status === 401) return 'admin token missing or wrong';
    if (e.status === 403) return 'no admin token configured on the service';
    if (e.problems.length) return e.problems.map((p) => `${p.path}: ${p.message}`).join('; ');
    return e.message;
  }
  return (e as Error).message ?? String(e);
}
