import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { tempDir } from '../test/helpers/index.ts';
import { type FakeServer, fakeServer, json } from '../test/helpers/opencode.ts';
import { candidateServers, normalizeUrl, parseRcServers, probe, readRcServers } from './discover.ts';

const cleanup: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanup.splice(0)) await c();
});
function dir(): string {
  const d = tempDir('vigil-wd');
  cleanup.push(() => rmSync(d, { recursive: true, force: true }));
  return d;
}
async function server(h: Parameters<typeof fakeServer>[0]): Promise<FakeServer> {
  const s = await fakeServer(h);
  cleanup.push(() => s.close());
  return s;
}

describe('rc-servers.json parsing', () => {
  it('accepts [{serverUrl}], {servers: [...]}, a map of entries and plain strings', () => {
    expect(parseRcServers([{ serverUrl: 'http://127.0.0.1:4096/' }, { serverUrl: 'http://127.0.0.1:5000' }])).toEqual([
      'http://127.0.0.1:4096',
      'http://127.0.0.1:5000',
    ]);
    expect(parseRcServers({ servers: [{ serverUrl: 'http://localhost:4100' }] })).toEqual(['http://localhost:4100']);
    expect(
      parseRcServers({ servers: { a: { url: 'http://127.0.0.1:1' }, b: { serverURL: 'http://127.0.0.1:2' } } }),
    ).toEqual(['http://127.0.0.1:1', 'http://127.0.0.1:2']);
    expect(
      parseRcServers({ ses_a: { serverUrl: 'http://127.0.0.1:7' }, ses_b: { serverUrl: 'http://127.0.0.1:7' } }),
    ).toEqual(['http://127.0.0.1:7']);
    expect(parseRcServers(['http://127.0.0.1:4096', { hostname: '127.0.0.1', port: 4200 }])).toEqual([
      'http://127.0.0.1:4096',
      'http://127.0.0.1:4200',
    ]);
    expect(parseRcServers({ serverUrl: 'http://127.0.0.1:9' })).toEqual(['http://127.0.0.1:9']);
  });

  it('tolerates junk: wrong types, bad URLs, other schemes, credentials, null', () => {
    expect(
      parseRcServers([
        null,
        42,
        'not a url',
        { serverUrl: 12 },
        { serverUrl: 'ftp://127.0.0.1:21' },
        { serverUrl: 'file:///etc/passwd' },
        { serverUrl: 'http://user:secret@127.0.0.1:4096' },
        { port: 'x' },
        { serverUrl: 'http://127.0.0.1:4096' },
      ]),
    ).toEqual(['http://127.0.0.1:4096']);
    for (const junk of [null, 7, true, 'x', {}, { servers: 5 }, [[]]]) expect(parseRcServers(junk)).toEqual([]);
  });

  it('bounds the list', () => {
    const many = Array.from({ length: 100 }, (_, i) => ({ serverUrl: `http://127.0.0.1:${1000 + i}` }));
    expect(parseRcServers(many)).toHaveLength(32);
  });

  it('a missing or non-JSON file is no servers; configured URLs come first, without duplicates', () => {
    const d = dir();
    expect(readRcServers(join(d, 'missing.json'))).toEqual([]);
    writeFileSync(join(d, 'bad.json'), '{not json');
    expect(readRcServers(join(d, 'bad.json'))).toEqual([]);
    writeFileSync(
      join(d, 'rc.json'),
      JSON.stringify([{ serverUrl: 'http://127.0.0.1:4096/' }, { serverUrl: 'http://127.0.0.1:5000' }]),
    );
    expect(candidateServers(['http://127.0.0.1:4096', 'http://127.0.0.1:6000'], join(d, 'rc.json'))).toEqual([
      'http://127.0.0.1:4096',
      'http://127.0.0.1:6000',
      'http://127.0.0.1:5000',
    ]);
    expect(normalizeUrl('http://[::1]:4096/')).toBe('http://[::1]:4096');
  });
});

describe('probe', () => {
  it('up: GET /global/health answers {healthy: true, version}', async () => {
    const s = await server((_req, _b, res) => json(res, 200, { healthy: true, version: '1.18.33', extra: 1 }));
    expect(await probe(s.url, 2_000)).toEqual({ url: s.url, state: 'up', version: '1.18.33' });
  });

  it('down: nothing listens', async () => {
    const s = await server(() => {});
    const url = s.url;
    await s.close();
    expect(await probe(url, 2_000)).toEqual({ url, state: 'down' });
  });

  it('down: a server that accepts and never answers gives up after the timeout', async () => {
    const s = await server(() => new Promise(() => {}));
    expect(await probe(s.url, 300)).toEqual({ url: s.url, state: 'down' });
  });

  it('odd: answers, but not like opencode (404, another shape, not JSON)', async () => {
    const a = await server((_req, _b, res) => json(res, 404, { error: 'no' }));
    expect(await probe(a.url, 2_000)).toMatchObject({ state: 'odd', why: 'GET /global/health answered 404' });
    const b = await server((_req, _b, res) => json(res, 200, { ok: true, v: 2 }));
    const pb = await probe(b.url, 2_000);
    expect(pb).toMatchObject({ state: 'odd' });
    expect(pb.state === 'odd' && pb.why).toMatch(/unexpected shape \(healthy/);
    const c = await server((_req, _b, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('SECRET-BODY{');
    });
    const pc = await probe(c.url, 2_000);
    expect(pc).toEqual({ url: c.url, state: 'odd', why: 'GET /global/health: not JSON' });
  });
});
