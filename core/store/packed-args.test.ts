import fc from 'fast-check';
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { REDIS_URL, withRedis } from '../../test/helpers/index.ts';
import { packArgs, UNPACK_ARGV } from './packed-args.ts';

// The packed arguments as the real Redis's Lua reads them back: each one the bytes
// ioredis would have sent for it as an argument of its own.
describe.runIf(withRedis)('packed script arguments (real Redis)', () => {
  const r = new Redis(REDIS_URL);
  afterAll(() => r.quit());
  const ECHO = `${UNPACK_ARGV}\nreturn ARGV`;
  const roundTrip = async (items: (string | number | Uint8Array)[]) =>
    (await r.callBuffer('EVAL', ECHO, 0, packArgs(items))) as Buffer[];
  // What ioredis writes for one argument.
  const asSent = (it: string | number | Uint8Array) =>
    typeof it === 'string' ? Buffer.from(it) : typeof it === 'number' ? Buffer.from(String(it)) : Buffer.from(it);

  it('gives back any list of text, numbers and bytes, byte for byte', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(
          fc.oneof(
            fc.string({ unit: 'binary' }),
            fc.string({ unit: 'grapheme', maxLength: 40 }),
            fc.integer(),
            fc.double(),
            fc.uint8Array({ maxLength: 300 }),
          ),
          { maxLength: 60 },
        ),
        async (items) => {
          const back = await roundTrip(items);
          expect(back.map((b) => b.toString('hex'))).toEqual(items.map((it) => asSent(it).toString('hex')));
        },
      ),
      { numRuns: 200 },
    );
  });

  it('keeps every byte value and long values (each length header size)', async () => {
    const all = new Uint8Array(256).map((_, i) => i);
    const items = [
      all,
      '',
      'x'.repeat(31),
      'x'.repeat(32),
      'y'.repeat(255),
      'y'.repeat(256),
      'z'.repeat(70_000),
      0,
      -1.5,
    ];
    const back = await roundTrip(items);
    expect(back.map((b) => b.length)).toEqual(items.map((it) => asSent(it).length));
    expect(back.map((b) => b.toString('hex'))).toEqual(items.map((it) => asSent(it).toString('hex')));
  });

  it('an empty list is an empty list', async () => {
    expect(await roundTrip([])).toEqual([]);
  });
});
