import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';

/**
 * Short-lived, single-use tickets for GET /events. EventSource cannot send an
 * Authorization header, and the admin token must never sit in a URL (URLs are logged),
 * so a page holding the token trades it (POST /events/ticket) for a ticket that is
 * worthless a few seconds later. A ticket is `<expiry>.<nonce>.<hmac>` under a key
 * made per process: nothing is stored but the nonces already used, until they expire.
 */
export class Tickets {
  private readonly key = randomBytes(32);
  private readonly used = new Map<string, number>();

  constructor(
    private readonly ttlMs = 30_000,
    private readonly now: () => number = Date.now,
  ) {}

  issue(): { ticket: string; expires_in_s: number } {
    const body = `${this.now() + this.ttlMs}.${randomBytes(16).toString('base64url')}`;
    return { ticket: `${body}.${this.mac(body)}`, expires_in_s: Math.round(this.ttlMs / 1000) };
  }

  /** True once per valid, unexpired ticket; the MAC is compared in constant time. */
  redeem(ticket: string): boolean {
    const parts = ticket.split('.');
    if (parts.length !== 3) return false;
    const [exp, nonce, mac] = parts;
    const body = `${exp}.${nonce}`;
    const want = Buffer.from(this.mac(body));
    const got = Buffer.from(mac);
    if (got.length !== want.length || !timingSafeEqual(got, want)) return false;
    const now = this.now();
    if (!(Number(exp) > now)) return false;
    for (const [n, e] of this.used) if (e <= now) this.used.delete(n);
    if (this.used.has(nonce)) return false;
    this.used.set(nonce, Number(exp));
    return true;
  }

  private mac(body: string): string {
    return createHmac('sha256', this.key).update(body).digest('base64url');
  }
}
