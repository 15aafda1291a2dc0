// A script's arguments as one value: a msgpack array whose items are all msgpack
// strings (raw bytes; Redis's Lua reads it back with `cmsgpack.unpack`, which knows no
// bin type, and a Lua string holds any bytes). ioredis spends about a microsecond per
// argument building a command (conversions, one buffer piece per argument, the
// automatic pipeline's copies), so a commit of 30 to 60 arguments sent as one costs the
// process noticeably less, and Redis parses one bulk string instead of many. Numbers
// are written as ioredis writes them (String(n)), text as UTF-8.

/** The Lua that turns the packed value (ARGV[1]) back into the argument list. */
export const UNPACK_ARGV = 'local ARGV = cmsgpack.unpack(ARGV[1])';

/** Every item's header is str32 (5 bytes): the length is known only once the text is written. */
const HEADER = 5;

export function packArgs(items: readonly (string | number | Uint8Array)[]): Buffer {
  // An upper bound: UTF-8 takes at most 3 bytes per UTF-16 unit.
  let bound = 5;
  for (const it of items) {
    bound += HEADER + (typeof it === 'string' ? it.length * 3 : typeof it === 'number' ? 24 : it.length);
  }
  const out = Buffer.allocUnsafe(bound);
  out[0] = 0xdd; // array32
  out.writeUInt32BE(items.length, 1);
  let o = 5;
  for (const it of items) {
    let n: number;
    if (typeof it === 'string') n = out.write(it, o + HEADER, 'utf8');
    else if (typeof it === 'number') n = out.write(String(it), o + HEADER, 'latin1');
    else {
      out.set(it, o + HEADER);
      n = it.length;
    }
    out[o] = 0xdb; // str32
    out.writeUInt32BE(n, o + 1);
    o += HEADER + n;
  }
  return out.subarray(0, o);
}
