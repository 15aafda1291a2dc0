// Every store key the kernel writes, and how long each lives: the only place a kernel
// key is spelled. The store prepends its own namespace (`store.key_prefix`). A plugin
// keeps its keys under its own type (`plugin(type)`), spelled in its own keys module.

const DAY = 86_400_000;

/** Time to live of each kind of key, in ms (undefined: kept until replaced). */
export const TTL = {
  /** An incident's lifecycle record (per dedup_key). */
  incident: 30 * DAY,
  /** What a channel was told of an incident (admit marks): as long as the incident is kept. */
  notified: 30 * DAY,
  /** The last transition a channel delivered per incident (the superseded check). */
  sent: 30 * DAY,
  /** A tree's mode state (stage, refusals, caps, recoveries). */
  tree: 30 * DAY,
  /** Directives waiting for the plugin's acknowledgement. */
  directives: 7 * DAY,
  /** Parent links and session metadata: dropped a week after the session went quiet. */
  session: 7 * DAY,
  /** A session's sensor key binding: as long as the tree state it guards (renewed while in use). */
  binding: 30 * DAY,
} as const;

export const keys = {
  incident: (dedupKey: string) => `alert:${dedupKey}`,
  incidentPrefix: 'alert:',
  notified: (channel: string, dedupKey: string) => `notified:${channel}:${dedupKey}`,
  /** The incidents opened on a channel, per severity rank (the rate limit counts them). */
  rate: (channel: string, rank: number) => `rl2:${channel}:${rank}`,
  sent: (channel: string, dedupKey: string) => `sent:${channel}:${dedupKey}`,
  /** The last transition (seq) of an incident handed to every channel: the next waits for it. */
  handed: (dedupKey: string) => `handed:${dedupKey}`,
  deliveries: 'deliveries',
  tree: (root: string) => `tree:${root}`,
  treePrefix: 'tree:',
  directives: (root: string) => `dir:${root}`,
  parent: (session: string) => `parent:${session}`,
  meta: (session: string) => `meta:${session}`,
  metaPrefix: 'meta:',
  /** A hash of the sensor key a session is bound to (core/binding.ts). */
  binding: (session: string) => `bind:${session}`,
  /** Every tracked session, scored by its last activity: the cap evicts the least recently active. */
  sessions: 'sessions',
  /** Runtime knob changes (PATCH /knobs). */
  knobs: 'knobs',
  /** Runtime channel toggles (PATCH /channels/:name), by channel name. */
  channelToggles: 'channel-toggles',
  watchdog: 'watchdog:last',
  /** The namespace of a plugin's own keys: `p:<type>:`. */
  plugin: (type: string) => `p:${type}:`,
} as const;
