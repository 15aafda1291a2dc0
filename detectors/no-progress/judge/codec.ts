import { FP_SLOTS, FP_W, type LevelCode, RING_W, SessionState, TG_SLOTS, TG_W, U16 } from './state.ts';

// ---------------------------------------------------------------------------
// encode / decode (the Redis backend persists a session's state compactly)

// Counters (the scalars and the table words that are not hashes) are varints (LEB128):
// most are small. Hashes stay 4 bytes. A fingerprint slot's result tag (2 bytes after
// its failure streak) is written when the session saw result fingerprints (a bit of the
// flags). The first byte is the encoding's version, and only this version is read: a
// new encoding takes a new version and a new store key prefix (keys.ts), so states
// written before it are never decoded; they expire (7 days idle).
export const VERSION = 5;
const V2_U32 = 11;
const V3_U32 = 1;
/** v5 counters (varints) before the two text words */
const V5_N = 8;
const enc = new TextEncoder();
const dec = new TextDecoder();

/** A compact binary form: scalars, strings, the ring in order, used table slots only. */
export function encodeState(s: SessionState): Uint8Array {
  const strs = [
    s.agent,
    s.parent,
    s.topTool,
    s.topTarget,
    s.failTool,
    s.failTarget,
    s.runTool,
    s.runTarget,
    s.landTool,
    s.landTarget,
  ];
  const names = s.names;
  let size = 1 + 4 * (22 + V2_U32 + V3_U32) + 8 * 5 + 2;
  // A string takes at most 3 bytes per UTF-16 unit (the size is an upper bound, trimmed at the end).
  for (const x of strs) size += 2 + (x === undefined ? 0 : 3 * x.length);
  size += s.len * RING_W * 4;
  const fpUsed: number[] = [];
  for (let i = 0; i < FP_SLOTS; i++) if (s.buf[s.fpBase + i * FP_W + 2] & U16) fpUsed.push(i);
  const tgUsed: number[] = [];
  for (let i = 0; i < TG_SLOTS; i++) if (s.buf[s.tgBase + i * TG_W + 1] & U16) tgUsed.push(i);
  size += fpUsed.length * (1 + FP_W * 4) + tgUsed.length * (1 + TG_W * 4);
  if (names) for (const i of tgUsed) size += 4 + 3 * ((names[i * 2]?.length ?? 0) + (names[i * 2 + 1]?.length ?? 0));
  else size += 4 * tgUsed.length;
  // A varint takes at most one byte more than its 4: an upper bound, trimmed at the end.
  size += 22 + V2_U32 + V3_U32 + fpUsed.length * 3 + tgUsed.length * 3;
  // v5: counters (5 bytes each at most), the text words, result tags
  size += V5_N * 5 + 8 + (s.sawResult ? fpUsed.length * 2 : 0);

  const w = new Writer(size);
  w.u8(VERSION);
  const tags = s.sawResult;
  const flags =
    (s.sawRequest ? 1 : 0) | (s.readOnly ? 2 : 0) | (s.topDirty ? 4 : 0) | (names ? 8 : 0) | (tags ? 16 : 0);
  for (const v of [
    s.cap,
    s.len,
    s.dups,
    s.winTop,
    s.winTopHi,
    s.novelRecent,
    s.calls,
    s.landed,
    s.requests,
    s.continuations,
    s.compactions,
    s.reqSince,
    s.toolsSince,
    s.contSince,
    s.contextTokens,
    s.level,
    flags,
    fpUsed.length,
    tgUsed.length,
    s.touched,
    s.winTopLo,
    (Math.min(s.repUB, U16) << 16) | Math.min(s.failUB, U16),
    s.runLen,
    s.landRun,
    s.landSeq,
    s.landRepeats,
    s.treeLandings,
    s.runHi,
    s.runLo,
    s.runExit,
    s.landHi,
    s.landLo,
    (s.runNull ? 1 : 0) | (s.landedNow ? 2 : 0) | (s.runRes ? 4 : 0),
    s.recoveries,
    s.per2,
    s.per3,
    s.per4,
    s.monoRun,
    s.ownGapMax,
    s.childGapMax,
    s.callsAtLand,
    s.reqAtLand,
  ])
    w.uv(v);
  w.u32(s.monoHi);
  w.u32(s.monoLo);
  for (const v of [s.usdSince, s.tokSince, s.usdTotal, s.lastTs, s.recoveredAt]) w.f64(v);
  w.u16(0);
  for (const x of strs) w.str(x);
  // ring, oldest first
  const start = s.len === s.cap ? s.head : 0;
  for (let j = 0; j < s.len; j++) {
    const at = ((start + j) % s.cap) * RING_W;
    for (let x = 0; x < RING_W; x++) w.u32(s.buf[at + x]);
  }
  // fingerprint slot: hash hi, lo | count (low 16) and bound (high 16), failure streak, seq | target hash
  for (const i of fpUsed) {
    const at = s.fpBase + i * FP_W;
    w.u8(i);
    w.u32(s.buf[at]);
    w.u32(s.buf[at + 1]);
    w.uv(s.buf[at + 2]);
    w.uv(s.buf[at + 3] & U16);
    if (tags) w.u16(s.buf[at + 3] >>> 16);
    w.uv(s.buf[at + 4]);
    w.u32(s.buf[at + 5]);
  }
  // target slot: target hash | count and bound, failure streak, seq
  for (const i of tgUsed) {
    const at = s.tgBase + i * TG_W;
    w.u8(i);
    w.u32(s.buf[at]);
    for (let x = 1; x < TG_W; x++) w.uv(s.buf[at + x]);
    w.str(names?.[i * 2]);
    w.str(names?.[i * 2 + 1]);
  }
  return w.done();
}

export function decodeState(bytes: Uint8Array): SessionState {
  const r = new Reader(bytes);
  if (r.u8() !== VERSION) throw new Error(`unknown judge state version ${bytes[0]}`);
  const cnt = () => r.uv();
  const v: number[] = [];
  for (let i = 0; i < 22; i++) v.push(cnt());
  const s = new SessionState(v[0]);
  [, s.len, s.dups, s.winTop, s.winTopHi, s.novelRecent, s.calls, s.landed, s.requests] = v;
  s.winTopLo = v[20];
  s.repUB = v[21] >>> 16;
  s.failUB = v[21] & U16;
  [s.continuations, s.compactions, s.reqSince, s.toolsSince, s.contSince, s.contextTokens] = v.slice(9, 15);
  s.level = v[15] as LevelCode;
  const flags = v[16];
  const fpN = v[17];
  const tgN = v[18];
  s.touched = v[19];
  s.sawRequest = (flags & 1) !== 0;
  s.readOnly = (flags & 2) !== 0;
  s.topDirty = (flags & 4) !== 0;
  const w: number[] = [];
  for (let i = 0; i < V2_U32; i++) w.push(cnt());
  [s.runLen, s.landRun, s.landSeq, s.landRepeats, s.treeLandings] = w;
  [s.runHi, s.runLo, s.runExit, s.landHi, s.landLo] = w.slice(5, 10);
  s.runNull = (w[10] & 1) !== 0;
  s.landedNow = (w[10] & 2) !== 0;
  s.runRes = (w[10] & 4) !== 0;
  s.recoveries = cnt();
  const tags = (flags & 16) !== 0;
  s.sawResult = tags;
  const x: number[] = [];
  for (let i = 0; i < V5_N; i++) x.push(r.uv());
  [s.per2, s.per3, s.per4, s.monoRun, s.ownGapMax, s.childGapMax, s.callsAtLand, s.reqAtLand] = x;
  s.monoHi = r.u32();
  s.monoLo = r.u32();
  s.usdSince = r.f64();
  s.tokSince = r.f64();
  s.usdTotal = r.f64();
  s.lastTs = r.f64();
  s.recoveredAt = r.f64();
  r.u16();
  s.agent = r.str();
  s.parent = r.str();
  s.topTool = r.str();
  s.topTarget = r.str();
  s.failTool = r.str();
  s.failTarget = r.str();
  s.runTool = r.str();
  s.runTarget = r.str();
  s.landTool = r.str();
  s.landTarget = r.str();
  for (let j = 0, n = s.len * RING_W; j < n; j++) s.buf[j] = r.u32();
  s.head = s.len === s.cap ? 0 : s.len;
  for (let j = 0; j < fpN; j++) {
    const at = s.fpBase + r.u8() * FP_W;
    s.buf[at] = r.u32();
    s.buf[at + 1] = r.u32();
    s.buf[at + 2] = cnt();
    const streak = cnt();
    s.buf[at + 3] = tags ? ((r.u16() << 16) | streak) >>> 0 : streak;
    s.buf[at + 4] = cnt();
    s.buf[at + 5] = r.u32();
  }
  if (flags & 8) s.names = new Array(TG_SLOTS * 2).fill(undefined);
  for (let j = 0; j < tgN; j++) {
    const i = r.u8();
    const at = s.tgBase + i * TG_W;
    s.buf[at] = r.u32();
    for (let w = 1; w < TG_W; w++) s.buf[at + w] = cnt();
    const tool = r.str();
    const target = r.str();
    if (s.names) {
      s.names[i * 2] = tool;
      s.names[i * 2 + 1] = target;
    }
  }
  return s;
}

/**
 * One scratch buffer for every encoding (this runs per event, one at a time), grown when
 * a state needs more: a fresh buffer per encoding was an allocation (and GC work) of its
 * own beside the copy `done()` hands out.
 */
let scratch = new Uint8Array(8192);
let scratchView = new DataView(scratch.buffer);

/** Writes the encoding into a buffer of a known upper bound (methods, not closures: this runs per event). */
class Writer {
  private readonly out: Uint8Array;
  private readonly dv: DataView;
  private o = 0;

  constructor(size: number) {
    if (scratch.length < size) {
      scratch = new Uint8Array(Math.max(size, scratch.length * 2));
      scratchView = new DataView(scratch.buffer);
    }
    this.out = scratch;
    this.dv = scratchView;
  }

  u8(v: number): void {
    this.out[this.o++] = v;
  }

  u16(v: number): void {
    this.dv.setUint16(this.o, v);
    this.o += 2;
  }

  u32(v: number): void {
    this.dv.setUint32(this.o, v >>> 0);
    this.o += 4;
  }

  /** LEB128: 7 bits a byte, low first. */
  uv(v: number): void {
    let x = v >>> 0;
    while (x > 0x7f) {
      this.out[this.o++] = (x & 0x7f) | 0x80;
      x >>>= 7;
    }
    this.out[this.o++] = x;
  }

  f64(v: number): void {
    this.dv.setFloat64(this.o, v);
    this.o += 8;
  }

  /**
   * A length (0xffff: absent) and the string's UTF-8 bytes. Tool names and targets are
   * almost always ASCII: those are copied a char at a time (TextEncoder's call per
   * string was about half of an encoding's time); any other goes through encodeInto.
   */
  str(x: string | undefined): void {
    if (x === undefined) {
      this.u16(0xffff);
      return;
    }
    const out = this.out;
    const at = this.o + 2;
    let n = 0;
    for (; n < x.length; n++) {
      const c = x.charCodeAt(n);
      if (c >= 0x80) break;
      out[at + n] = c;
    }
    if (n < x.length) n = enc.encodeInto(x, out.subarray(at)).written;
    this.u16(n);
    this.o += n;
  }

  /** The encoding, as a copy of its own (the scratch buffer is the next encoding's). */
  done(): Uint8Array {
    return this.out.slice(0, this.o);
  }
}

class Reader {
  private readonly dv: DataView;
  private o = 0;

  constructor(private readonly b: Uint8Array) {
    this.dv = new DataView(b.buffer, b.byteOffset, b.byteLength);
  }

  u8(): number {
    if (this.o >= this.b.length) throw new Error('judge state truncated');
    return this.b[this.o++];
  }

  u16(): number {
    const v = this.dv.getUint16(this.o);
    this.o += 2;
    return v;
  }

  u32(): number {
    const v = this.dv.getUint32(this.o);
    this.o += 4;
    return v;
  }

  /** LEB128 (Writer.uv). A multiplier, not 2 ** shift: this was half of a decode's time. */
  uv(): number {
    const b = this.b;
    let o = this.o;
    if (o >= b.length) throw new Error('judge state truncated');
    let x = b[o++];
    let v = x & 0x7f;
    let mul = 128;
    while (x >= 0x80) {
      if (o >= b.length) throw new Error('judge state truncated');
      x = b[o++];
      v += (x & 0x7f) * mul;
      mul *= 128;
    }
    this.o = o;
    return v >>> 0;
  }

  f64(): number {
    const v = this.dv.getFloat64(this.o);
    this.o += 8;
    return v;
  }

  /** A string written by Writer.str: ASCII (almost always) is read a byte at a time, anything else by TextDecoder. */
  str(): string | undefined {
    const n = this.u16();
    if (n === 0xffff) return undefined;
    const b = this.b;
    const at = this.o;
    if (at + n > b.length) throw new Error('judge state truncated');
    this.o += n;
    let v = '';
    for (let i = at; i < at + n; i++) {
      const c = b[i];
      if (c >= 0x80) return dec.decode(b.subarray(at, at + n));
      v += String.fromCharCode(c);
    }
    return v;
  }
}
