import { deflateRawSync, inflateRawSync } from 'node:zlib';
import type { HygieneState } from './judge.ts';

// A session's state as a shared store keeps it: a version byte, a flags byte, then the
// state's JSON deflated (a third of its size: the trend repeats the same keys 32 times).
// The flags byte says whether a resume waits for its first sign of life, so a tool call
// (the most frequent input, which matters only then) reads it without inflating.
// States written as plain JSON by earlier versions still decode.

const VERSION = 2;
const FLAG_RESUME = 1;
const JSON_OPEN = 0x7b; // '{': a state written as JSON

export function encodeHygiene(s: HygieneState): Uint8Array {
  const body = deflateRawSync(JSON.stringify(s));
  const out = new Uint8Array(2 + body.length);
  out[0] = VERSION;
  out[1] = s.resume_at !== null ? FLAG_RESUME : 0;
  out.set(body, 2);
  return out;
}

export function decodeHygiene(b: Uint8Array): HygieneState {
  if (b[0] === JSON_OPEN) return JSON.parse(Buffer.from(b.buffer, b.byteOffset, b.byteLength).toString('utf8'));
  if (b[0] !== VERSION) throw new Error(`unknown session-hygiene state version ${b[0]}`);
  return JSON.parse(inflateRawSync(b.subarray(2)).toString('utf8'));
}

/** Whether a resume waits for its first sign of life, read from the flags alone. */
export function resumePendingIn(b: Uint8Array): boolean {
  if (b[0] === JSON_OPEN) return decodeHygiene(b).resume_at !== null;
  return (b[1] & FLAG_RESUME) !== 0;
}
