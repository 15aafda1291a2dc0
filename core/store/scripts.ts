import { readFileSync } from 'node:fs';
import { STAMP_BYTES, STAMP_MARK } from './stamps.ts';

// The store's Lua scripts live in lua/, one file each (the comment at the top
// of each says its keys, arguments and reply). Read once when their module loads.
export const luaScript = (name: string) =>
  readFileSync(new URL(`./lua/${name}.lua`, import.meta.url), 'utf8')
    .replaceAll('__STAMP_MARK__', `\\${STAMP_MARK[0]}\\${STAMP_MARK[1]}`)
    .replaceAll('__STAMP_BYTES__', String(STAMP_BYTES));
