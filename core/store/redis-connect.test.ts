import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { checkPrefix, hashTagOf, parseRedisUrl } from './redis-connect.ts';

describe('Redis URL forms', () => {
  it('one server, a cluster, a Sentinel-managed primary', () => {
    expect(parseRedisUrl('redis://:pw@127.0.0.1:6380/2')).toEqual({
      kind: 'single',
      url: 'redis://:pw@127.0.0.1:6380/2',
    });
    expect(parseRedisUrl('redis+cluster://u:p%40ss@10.0.0.1:7000,10.0.0.2,[::1]:7002')).toEqual({
      kind: 'cluster',
      nodes: [
        { host: '10.0.0.1', port: 7000 },
        { host: '10.0.0.2', port: 6379 },
        { host: '::1', port: 7002 },
      ],
      username: 'u',
      password: 'p@ss',
    });
    expect(parseRedisUrl('redis+sentinel://:pw@s1:26380,s2/mymaster/3')).toEqual({
      kind: 'sentinel',
      sentinels: [
        { host: 's1', port: 26380 },
        { host: 's2', port: 26379 },
      ],
      name: 'mymaster',
      db: 3,
      password: 'pw',
    });
  });

  it('a bad URL names store.redis_url and what is wrong, never the password', () => {
    const bad = [
      ['http://x', 'not a Redis URL'],
      ['redis+sentinel://:hunter2@s1:26379', 'needs the primary name'],
      ['redis+sentinel://:hunter2@s1/m/x', 'only a database number'],
      ['redis+cluster://:hunter2@a:1/0', 'no database number'],
      ['redis+cluster://:hunter2@a:99999', 'bad host:port'],
    ];
    for (const [url, why] of bad) {
      expect(() => parseRedisUrl(url), url).toThrow(/^store\.redis_url: /);
      expect(() => parseRedisUrl(url), url).toThrow(why);
      try {
        parseRedisUrl(url);
      } catch (e) {
        expect((e as Error).message).not.toContain('hunter2');
      }
    }
  });

  it('any string either parses or is a CONFIG_INVALID that does not echo the userinfo', () => {
    fc.assert(
      fc.property(
        fc.constantFrom('redis+cluster://', 'redis+sentinel://'),
        fc.string(),
        fc.string(),
        (scheme, secret, rest) => {
          const s = `S3CR3T${secret.replace(/[@/]/g, '')}`;
          try {
            parseRedisUrl(`${scheme}:${s}@${rest}`);
          } catch (e) {
            expect((e as { code?: string }).code).toBe('CONFIG_INVALID');
            expect((e as Error).message).not.toContain(s);
          }
        },
      ),
    );
  });

  it('a cluster prefix needs a hash tag', () => {
    const cluster = parseRedisUrl('redis+cluster://a:1');
    expect(hashTagOf('{vigil}:prod')).toBe('vigil');
    expect(() => checkPrefix(cluster, '{vigil}')).not.toThrow();
    expect(() => checkPrefix(cluster, 'vigil')).toThrow(/store\.key_prefix: "vigil" has no hash tag.*\{vigil\}/);
    expect(() => checkPrefix(parseRedisUrl('redis://a'), 'vigil')).not.toThrow();
  });
});
