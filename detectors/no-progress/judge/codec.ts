import { FP_SLOTS, FP_W, type LevelCode, RING_W, SessionState, TG_SLOTS, TG_W, U16 } from './state.ts';

// ---------------------------------------------------------------------------
// encode / decode (the Redis backend persists a session's state compactly)

// 2: the identical run, the landed run and the tree landings (after the v1 scalars and
// strings). Version 1 states (written before them) still decode, with those at zero.
// 3: the recoveries (one word after the v2 words) and the latest recovery time (in the
// fifth double, which versions 1 and 2 wrote as 0). Older states decode with none.
// 4: counters (the scalars and the table words that are not hashes) as varints (LEB128):
// most are small, so a full state is about a sixth smaller. Hashes stay 4 bytes.
const VERSION = 4;
const V2_U32 = 11;
const V3_U32 = 1;
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
  const strBytes = strs.map((x) => (x === undefined ? undefined : enc.encode(x)));
  for (const b of strBytes) size += 2 + (b?.length ?? 0);
  size += s.len * RING_W * 4;
  const fpUsed: number[] = [];
  for (let i = 0; i < FP_SLOTS; i++) if (s.buf[s.fpBase + i * FP_W + 2] & U16) fpUsed.push(i);
  const tgUsed: number[] = [];
  for (let i = 0; i < TG_SLOTS; i++) if (s.buf[s.tgBase + i * TG_W + 1] & U16) tgUsed.push(i);
  size += fpUsed.length * (1 + FP_W * 4) + tgUsed.length * (1 + TG_W * 4);
  const nameBytes = tgUsed.map((i) =>
    [names?.[i * 2], names?.[i * 2 + 1]].map((x) => (x === undefined ? undefined : enc.encode(x))),
  );
  for (const pair of nameBytes) for (const b of pair) size += 2 + (b?.length ?? 0);
  // A varint takes at most one byte more than its 4: an upper bound, trimmed at the end.
  size += 22 + V2_U32 + V3_U32 + fpUsed.length * 3 + tgUsed.length * 3;

  const out = new Uint8Array(size);
  const dv = new DataView(out.buffer);
  let o = 0;
  out[o++] = VERSION;
  const u32 = (v: number) => {
    dv.setUint32(o, v >>> 0);
    o += 4;
  };
  const f64 = (v: number) => {
    dv.setFloat64(o, v);
    o += 8;
  };
  const uv = (v: number) => {
    let x = v >>> 0;
    while (x > 0x7f) {
      out[o++] = (x & 0x7f) | 0x80;
      x >>>= 7;
    }
    out[o++] = x;
  };
  const bytes = (b: Uint8Array | undefined) => {
    if (b === undefined) {
      dv.setUint16(o, 0xffff);
      o += 2;
      return;
    }
    dv.setUint16(o, b.length);
    o += 2;
    out.set(b, o);
    o += b.length;
  };
  const flags = (s.sawRequest ? 1 : 0) | (s.readOnly ? 2 : 0) | (s.topDirty ? 4 : 0) | (names ? 8 : 0);
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
    (s.runNull ? 1 : 0) | (s.landedNow ? 2 : 0),
    s.recoveries,
  ])
    uv(v);
  for (const v of [s.usdSince, s.tokSince, s.usdTotal, s.lastTs, s.recoveredAt]) f64(v);
  dv.setUint16(o, 0);
  o += 2;
  for (const b of strBytes) bytes(b);
  // ring, oldest first
  const start = s.len === s.cap ? s.head : 0;
  for (let j = 0; j < s.len; j++) {
    const at = ((start + j) % s.cap) * RING_W;
    for (let w = 0; w < RING_W; w++) u32(s.buf[at + w]);
  }
  // fingerprint slot: hash hi, lo | count (low 16) and bound (high 16), failure streak, seq | target hash
  for (const i of fpUsed) {
    const at = s.fpBase + i * FP_W;
    out[o++] = i;
    u32(s.buf[at]);
    u32(s.buf[at + 1]);
    uv(s.buf[at + 2]);
    uv(s.buf[at + 3]);
    uv(s.buf[at + 4]);
    u32(s.buf[at + 5]);
  }
  // target slot: target hash | count and bound, failure streak, seq
  tgUsed.forEach((i, j) => {
    const at = s.tgBase + i * TG_W;
    out[o++] = i;
    u32(s.buf[at]);
    for (let w = 1; w < TG_W; w++) uv(s.buf[at + w]);
    bytes(nameBytes[j][0]);
    bytes(nameBytes[j][1]);
  });
  return out.slice(0, o);
}

export function decodeState(bytes: Uint8Array): SessionState {
  const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let o = 0;
  const version = bytes[o++];
  if (version < 1 || version > VERSION) throw new Error(`unknown judge state version ${bytes[0]}`);
  const u32 = () => {
    const v = dv.getUint32(o);
    o += 4;
    return v;
  };
  const f64 = () => {
    const v = dv.getFloat64(o);
    o += 8;
    return v;
  };
  const uv = () => {
    let v = 0;
    let shift = 0;
    for (;;) {
      const b = bytes[o++];
      if (b === undefined) throw new Error('judge state truncated');
      v += (b & 0x7f) * 2 ** shift;
      if (b < 0x80) return v >>> 0;
      shift += 7;
    }
  };
  // Version 4 writes counters as varints; earlier versions as 4 bytes.
  const cnt = version >= 4 ? uv : u32;
  const str = (): string | undefined => {
    const n = dv.getUint16(o);
    o += 2;
    if (n === 0xffff) return undefined;
    const v = dec.decode(bytes.subarray(o, o + n));
    o += n;
    return v;
  };
  const v = Array.from({ length: 22 }, cnt);
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
  if (version >= 2) {
    const w = Array.from({ length: V2_U32 }, cnt);
    [s.runLen, s.landRun, s.landSeq, s.landRepeats, s.treeLandings] = w;
    [s.runHi, s.runLo, s.runExit, s.landHi, s.landLo] = w.slice(5, 10);
    s.runNull = (w[10] & 1) !== 0;
    s.landedNow = (w[10] & 2) !== 0;
  }
  if (version >= 3) s.recoveries = cnt();
  s.usdSince = f64();
  s.tokSince = f64();
  s.usdTotal = f64();
  s.lastTs = f64();
  s.recoveredAt = f64();
  o += 2;
  s.agent = str();
  s.parent = str();
  s.topTool = str();
  s.topTarget = str();
  s.failTool = str();
  s.failTarget = str();
  if (version >= 2) {
    s.runTool = str();
    s.runTarget = str();
    s.landTool = str();
    s.landTarget = str();
  }
  for (let j = 0; j < s.len; j++) for (let w = 0; w < RING_W; w++) s.buf[j * RING_W + w] = u32();
  s.head = s.len === s.cap ? 0 : s.len;
  for (let j = 0; j < fpN; j++) {
    const at = s.fpBase + bytes[o++] * FP_W;
    s.buf[at] = u32();
    s.buf[at + 1] = u32();
    s.buf[at + 2] = cnt();
    s.buf[at + 3] = cnt();
    s.buf[at + 4] = cnt();
    s.buf[at + 5] = u32();
  }
  if (flags & 8) s.names = new Array(TG_SLOTS * 2).fill(undefined);
  for (let j = 0; j < tgN; j++) {
    const i = bytes[o++];
    const at = s.tgBase + i * TG_W;
    s.buf[at] = u32();
    for (let w = 1; w < TG_W; w++) s.buf[at + w] = cnt();
    const tool = str();
    const target = str();
    if (s.names) {
      s.names[i * 2] = tool;
      s.names[i * 2 + 1] = target;
    }
  }
  return s;
}
