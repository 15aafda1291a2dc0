import { keys, TTL } from '../../core/store/keys.ts';
import { VERSION } from './judge/codec.ts';

// The no-progress detector's store keys, under its own namespace.
const NS = keys.plugin('no-progress');

/**
 * The judge state's key prefix names its encoding's version (judge/codec.ts VERSION): a
 * new encoding is a new prefix, and the states of the one before are never read.
 */
const STATE = `${NS}s${VERSION}:`;

export const npKeys = {
  /** A session's judge state (compact bytes on Redis). */
  state: (id: string) => `${STATE}${id}`,
  statePrefix: STATE,
  /** The latest verdict from an outside sensor (the watchdog). */
  external: (id: string) => `${NS}x:${id}`,
} as const;

export const NP_TTL = {
  /** A session idle this long is dropped. */
  state: TTL.session,
  /** An external verdict counts for this long unless renewed. */
  external: 30 * 60_000,
} as const;
