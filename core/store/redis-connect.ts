import { Cluster, type ClusterOptions, Redis, type RedisOptions } from 'ioredis';
import { AppError } from '../errors.ts';

// The three ways to reach Redis, from one URL (store.redis_url or $REDIS_URL):
//   redis://[[user]:password@]host[:port][/db]        one server (rediss:// for TLS)
//   redis+cluster://[[user]:password@]host:port[,host:port...]
//       a Redis Cluster: any of its nodes (ioredis finds the others); the key prefix
//       needs a hash tag ({vigil}) so every key, and so every multi-key command and
//       every BullMQ queue, is in one slot
//   redis+sentinel://[[user]:password@]host:port[,host:port...]/name[/db]
//       the primary named `name`, found through these Sentinels (no auth on them);
//       the password is the primary's. After a failover the clients follow the new one.
// Store and queue both connect through redisClient(), so the three behave alike.

export interface HostPort {
  host: string;
  port: number;
}

export type RedisTarget =
  | { kind: 'single'; url: string }
  | { kind: 'cluster'; nodes: HostPort[]; username?: string; password?: string }
  | { kind: 'sentinel'; sentinels: HostPort[]; name: string; db: number; username?: string; password?: string };

const MULTI = /^redis\+(cluster|sentinel):\/\/(?:([^@/]*)@)?([^/?#@]+)(\/[^?#]*)?$/;

const invalid = (why: string) =>
  new AppError('CONFIG_INVALID', `store.redis_url: ${why} (forms: redis://, redis+cluster://, redis+sentinel://)`);

function hosts(list: string, defaultPort: number): HostPort[] {
  return list.split(',').map((h) => {
    const m = /^(\[[0-9a-fA-F:.]+\]|[^:[\]]+)(?::(\d{1,5}))?$/.exec(h.trim());
    const port = m?.[2] === undefined ? defaultPort : Number(m[2]);
    if (!m || port < 1 || port > 65_535) throw invalid(`bad host:port "${h.trim()}"`);
    return { host: m[1].replace(/^\[|\]$/g, ''), port };
  });
}

function decode(s: string, what: string): string {
  try {
    return decodeURIComponent(s);
  } catch {
    throw invalid(`bad percent-encoding in the ${what}`);
  }
}

/** Which Redis a URL names. Errors name the part that is wrong, never the password. */
export function parseRedisUrl(url: string): RedisTarget {
  if (/^rediss?:\/\//.test(url)) return { kind: 'single', url };
  const m = MULTI.exec(url);
  if (!m) throw invalid('not a Redis URL');
  const [, kind, userinfo, list, path] = m;
  let username: string | undefined;
  let password: string | undefined;
  if (userinfo !== undefined) {
    const at = userinfo.indexOf(':');
    const user = decode(at < 0 ? userinfo : userinfo.slice(0, at), 'user name');
    username = user || undefined;
    password = at < 0 ? undefined : decode(userinfo.slice(at + 1), 'password') || undefined;
  }
  const auth = { ...(username ? { username } : {}), ...(password ? { password } : {}) };
  if (kind === 'cluster') {
    if (path && path !== '/') throw invalid('a cluster has no database number: nothing after the hosts');
    return { kind: 'cluster', nodes: hosts(list, 6379), ...auth };
  }
  const [name, db = '0', ...rest] = (path ?? '').replace(/^\//, '').split('/');
  if (!name) throw invalid('redis+sentinel:// needs the primary name: redis+sentinel://host:26379/mymaster');
  if (rest.length || !/^\d+$/.test(db)) throw invalid('after the primary name only a database number may follow');
  return {
    kind: 'sentinel',
    sentinels: hosts(list, 26_379),
    name: decode(name, 'primary name'),
    db: Number(db),
    ...auth,
  };
}

/** A Redis Cluster key prefix must carry a hash tag: `{vigil}`, `{vigil}:prod`. */
export const hashTagOf = (prefix: string): string | undefined => /\{([^{}]+)\}/.exec(prefix)?.[1];

/**
 * Refuses a prefix that would spread Vigil's keys over slots on a cluster: its
 * multi-key scripts and BullMQ's need every key they touch in one slot.
 */
export function checkPrefix(target: RedisTarget, prefix: string): void {
  if (target.kind === 'cluster' && hashTagOf(prefix) === undefined) {
    throw new AppError(
      'CONFIG_INVALID',
      `store.key_prefix: "${prefix}" has no hash tag; on Redis Cluster every key must share one slot: use {${prefix.replace(/[{}]/g, '')}}`,
    );
  }
}

/** A client for `target` with `o` applied to every connection it makes (each cluster node, the primary behind Sentinel). */
export function redisClient(target: RedisTarget, o: RedisOptions, cluster: ClusterOptions = {}): Redis | Cluster {
  if (target.kind === 'single') return new Redis(target.url, o);
  const auth = {
    ...(target.username ? { username: target.username } : {}),
    ...(target.password ? { password: target.password } : {}),
  };
  if (target.kind === 'cluster') {
    const { enableAutoPipelining, enableOfflineQueue, ...node } = o;
    return new Cluster(target.nodes, {
      ...(enableAutoPipelining !== undefined ? { enableAutoPipelining } : {}),
      ...(enableOfflineQueue !== undefined ? { enableOfflineQueue } : {}),
      redisOptions: { ...node, ...auth },
      // a slot moving or a node failing over: retry after the cluster settles
      retryDelayOnFailover: 200,
      retryDelayOnClusterDown: 200,
      ...cluster,
    });
  }
  return new Redis({
    ...o,
    ...auth,
    sentinels: target.sentinels,
    name: target.name,
    db: target.db,
    // leave the old primary as soon as the Sentinels announce a new one
    failoverDetector: true,
    // a primary demoted under us answers READONLY: reconnect (through the Sentinels) and resend
    reconnectOnError: (err) => (err.message.startsWith('READONLY') ? 2 : false),
  });
}

/** Every primary of a cluster (SCAN and FLUSH run per node), or the one server. */
export function primaries(c: Redis | Cluster): Redis[] {
  return c instanceof Cluster ? c.nodes('master') : [c];
}
