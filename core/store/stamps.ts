import { randomBytes } from 'node:crypto';

// Binary values (the judges' states, a few KB each) are stored behind a stamp: two marker
// bytes and six random ones, new on every write. A unit's commit then checks that a key
// still holds what the unit read by comparing the stamp (GETRANGE of 8 bytes) instead of
// sending the whole value back to be compared (that was a third of the bytes a progress
// event sent, and Redis's work to read and compare them). Readers strip the stamp;
// values written before stamps (no marker) still read, and are compared whole. Strings
// (JSON) are not stamped. Six random bytes: a stale stamp matching a newer write's is a
// 2^-48 chance per write.
export const STAMP_MARK = [0xff, 0xfe] as const;
export const STAMP_BYTES = 8;
const STAMP_POOL = 6 * 1024;
let pool = Buffer.alloc(0);
let poolAt = STAMP_POOL;

/** The stored form of a binary value: a fresh stamp, then the value. */
export function stamped(value: Uint8Array): Buffer {
  if (poolAt + 6 > pool.length) {
    pool = randomBytes(STAMP_POOL);
    poolAt = 0;
  }
  const out = Buffer.allocUnsafe(STAMP_BYTES + value.length);
  out[0] = STAMP_MARK[0];
  out[1] = STAMP_MARK[1];
  pool.copy(out, 2, poolAt, poolAt + 6);
  poolAt += 6;
  out.set(value, STAMP_BYTES);
  return out;
}

/** Whether a stored binary value carries a stamp. */
export function hasStamp(b: Uint8Array): boolean {
  return b.length >= STAMP_BYTES && b[0] === STAMP_MARK[0] && b[1] === STAMP_MARK[1];
}

/** The value of a stored binary value, as a copy (a caller may decode views over it and change them). */
export function unstamped(b: Uint8Array): Uint8Array {
  return new Uint8Array(hasStamp(b) ? b.subarray(STAMP_BYTES) : b);
}
