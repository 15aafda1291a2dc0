import { createHash, createHmac } from 'node:crypto';
import type { Alert } from '../../core/alert.ts';
import { ascii, renderLine, renderTitle, truncate } from '../../core/render.ts';
import { fitTo } from '../shared/fit.ts';

// Pure builders for the three wire formats: no I/O, so tests can pin them exactly.

/**
 * The Standard Webhooks `webhook-id`: the identity of the transition, the same on a
 * retry (receivers dedupe on it), different for every transition. No '.' (it is the
 * separator in the signed content).
 */
export function webhookId(a: Pick<Alert, 'dedup_key' | 'state' | 'seq'>): string {
  return `msg_${createHash('sha256').update(`${a.dedup_key}\n${a.state}\n${a.seq}`).digest('hex').slice(0, 32)}`;
}

/** The HMAC key: the bytes after `whsec_`, base64-decoded (as the standardwebhooks library does). */
export function signingKey(secret: string): Buffer {
  const b64 = secret.startsWith('whsec_') ? secret.slice('whsec_'.length) : secret;
  if (!/^[A-Za-z0-9+/]+={0,2}$/.test(b64)) throw new Error('is not a whsec_ base64 secret');
  const key = Buffer.from(b64, 'base64');
  // Standard Webhooks secrets are 24 to 64 random bytes; a shorter key signs but guards nothing.
  if (key.length < 24 || key.length > 64) {
    throw new Error(`holds a ${key.length}-byte key; a whsec_ secret is base64 of 24 to 64 random bytes`);
  }
  return key;
}

/** `v1,<base64 hmac-sha256 of "id.timestamp.body">`, over the exact bytes sent. */
export function sign(key: Buffer, id: string, unixSeconds: number, body: Uint8Array): string {
  const mac = createHmac('sha256', key).update(`${id}.${unixSeconds}.`).update(body).digest('base64');
  return `v1,${mac}`;
}

/**
 * generic: the Standard Webhooks payload shape ({type, timestamp, data}) with the alert
 * as `data`. Fields are listed, not spread, so an internal field never leaks out.
 */
export function genericPayload(a: Alert) {
  return {
    type: `alert.${a.state}`,
    timestamp: new Date(a.at).toISOString(),
    data: {
      dedup_key: a.dedup_key,
      state: a.state,
      severity: a.severity,
      title: a.title,
      summary: a.summary,
      details: a.details,
      source: a.source,
      at: a.at,
      seq: a.seq,
      ...(a.test ? { test: true } : {}),
    },
  };
}

const NTFY_PRIORITY = { info: 3, warning: 4, critical: 5 } as const; // 3 default, 4 high, 5 max
const NTFY_TAG = { info: 'information_source', warning: 'warning', critical: 'rotating_light' } as const;
/** ntfy's message limit is 4096 bytes (longer becomes an attachment); the text is ASCII, so chars = bytes. */
const NTFY_MESSAGE_MAX = 4_000;

/** One sequence id per incident: ntfy >= 2.16 clients replace the trigger with the escalation and the recovery. */
export function ntfySequenceId(dedupKey: string): string {
  return `vigil-${createHash('sha256').update(dedupKey).digest('hex').slice(0, 24)}`;
}

/** ntfy JSON publish (POST to the server root). A recovery is short and low priority: it should not wake anyone. */
export function ntfyPayload(a: Alert, topic: string) {
  const resolve = a.state === 'resolve';
  const text = resolve ? renderLine(a) : `${ascii(a.summary)}${a.details ? `\n\n${ascii(a.details)}` : ''}`; // the title carries TEST
  return {
    topic,
    title: truncate(renderTitle(a), 250),
    message: truncate(text, NTFY_MESSAGE_MAX),
    priority: resolve ? 2 : NTFY_PRIORITY[a.severity],
    tags: [resolve ? 'white_check_mark' : NTFY_TAG[a.severity], a.source],
    sequence_id: ntfySequenceId(a.dedup_key),
  };
}

/** Slack mrkdwn control characters (https://api.slack.com/reference/surfaces/formatting#escaping). */
function esc(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}

/** Escaped and within `max` characters (escaping lengthens the text). */
function escFit(raw: string, max: number): string {
  return fitTo(raw, max, esc, (s) => s.length);
}

/** Slack incoming webhook: `text` is the notification line; blocks carry the report. A recovery is text only. */
export function slackPayload(a: Alert) {
  const text = escFit(renderLine(a), 3_000);
  if (a.state === 'resolve') return { text };
  const blocks: object[] = [
    {
      type: 'section',
      text: { type: 'mrkdwn', text: `*${escFit(renderTitle(a), 200)}*\n${escFit(ascii(a.summary), 2_700)}` },
    },
  ];
  // A section holds at most 3000 characters; the fences take 6 of them.
  if (a.details) {
    blocks.push({
      type: 'section',
      text: { type: 'mrkdwn', text: `\`\`\`${escFit(ascii(a.details), 2_990)}\`\`\`` },
    });
  }
  blocks.push({
    type: 'context',
    elements: [{ type: 'mrkdwn', text: escFit(`${a.severity} | ${ascii(a.source)} | ${ascii(a.dedup_key)}`, 2_000) }],
  });
  return { text, blocks };
}
