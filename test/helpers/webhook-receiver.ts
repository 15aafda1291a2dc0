import { randomBytes } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

// A local endpoint speaking the webhook channel's generic format (Standard Webhooks:
// `webhook-id` header, `{type, timestamp, data}` body), for the suites that count
// transitions end to end. A transition is known by its identity (dedup_key, state,
// seq); the channel derives the webhook-id from it, so a redelivery carries the same id.

/** A fresh Standard Webhooks signing secret (24 random bytes). */
export const webhookSecret = (): string => `whsec_${randomBytes(24).toString('base64')}`;

/** A webhook channel entry for the receiver on `port`: every severity, no quiet window, no practical rate limit. */
export const webhookChannel = (port: number, secretEnv = 'HOOK_SECRET') => ({
  name: 'hook',
  type: 'webhook',
  url: `http://127.0.0.1:${port}/hook`,
  secret_env: secretEnv,
  min_severity: 'info',
  quiet_window: 0,
  rate_limit: { max: 100_000, window: '1m' },
});

export interface Got {
  /** The webhook-id header. */
  id: string;
  /** `dedup_key/state/seq`: the transition's identity. */
  key: string;
  dedup_key: string;
  state: string;
  seq: number;
  /** The title's first word (the verdict level for a session's incident: stalling, looping, recovered). */
  level: string;
  at: number;
}

/** A webhook receiver that can go away (connection refused), answer slowly, or answer a scripted status first. */
export class WebhookReceiver {
  readonly got: Got[] = [];
  port = 0;
  delayMs = 0;
  script: { status: number; headers?: Record<string, string> }[] = [];
  private server: Server | undefined;

  async start(port = 0): Promise<void> {
    this.server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const next = this.script.shift();
        const reply = () => {
          if (next) return res.writeHead(next.status, next.headers ?? {}).end();
          const d = JSON.parse(Buffer.concat(chunks).toString('utf8')).data;
          this.got.push({
            id: String(req.headers['webhook-id']),
            key: `${d.dedup_key}/${d.state}/${d.seq}`,
            dedup_key: String(d.dedup_key),
            state: String(d.state),
            seq: Number(d.seq),
            level: String(d.title).split(':')[0],
            at: Date.now(),
          });
          res.writeHead(204).end();
        };
        if (this.delayMs) setTimeout(reply, this.delayMs);
        else reply();
      });
    });
    await new Promise<void>((r) => this.server!.listen(port, '127.0.0.1', r));
    this.port = (this.server.address() as AddressInfo).port;
  }

  async stop(): Promise<void> {
    const s = this.server;
    if (!s) return;
    s.closeAllConnections();
    await new Promise<void>((r) => s.close(() => r()));
    this.server = undefined;
  }

  /** Distinct transitions received, how many arrived more than once, and whether every repeat kept its webhook-id. */
  tally(): { distinct: number; duplicates: number; ids: boolean } {
    const seen = new Map<string, string>();
    let duplicates = 0;
    let ids = true;
    for (const g of this.got) {
      const id = seen.get(g.key);
      if (id !== undefined) {
        duplicates++;
        if (id !== g.id) ids = false;
      } else seen.set(g.key, g.id);
    }
    return { distinct: seen.size, duplicates, ids };
  }

  /**
   * The distinct transitions of one incident, in seq order, each as `state/seq/level`:
   * what a run delivered for it, comparable between runs of the same script.
   */
  transitions(dedupKey: string): string[] {
    const out = new Map<string, string>();
    for (const g of this.got) if (g.dedup_key === dedupKey) out.set(g.key, `${g.state}/${g.seq}/${g.level}`);
    return [...out.values()].sort((a, b) => Number(a.split('/')[1]) - Number(b.split('/')[1]));
  }
}
