import { keys } from '../../core/store/keys.ts';

// The behavior breaker's store keys, under its own namespace. Every value is JSON and
// every write a compare-and-set, so instances agree:
//   models          model -> last request seen (the index of models)
//   served:<model>  session -> its latest request from that model, in the window
//   stalls          session -> stall mark (level, when, reason, attributed models)
//   trip:<model>    routing skip, cooldown, backoff level, the latest comparison
//   evidence        list, newest first: the trips
//   held            list, newest first: comparisons that held a model back
//   pending         model -> until when its held comparison is made again (a recheck)
// Held comparisons have their own list so they never push a trip's record out.
// Per-model served keys keep the per-request write small and uncontended; stall
// transitions are rare, so one key holds them all. TTLs are set where written, from
// the breaker's own window and backoff knobs.
const NS = keys.plugin('behavior-breaker');

export const INDEX = `${NS}models`;
export const STALLS = `${NS}stalls`;
export const EVIDENCE = `${NS}evidence`;
export const HELD = `${NS}held`;
export const PENDING = `${NS}pending`;
export const servedKey = (model: string) => `${NS}served:${model}`;
export const tripKey = (model: string) => `${NS}trip:${model}`;
