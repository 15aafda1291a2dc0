import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, describe, expect, it } from 'vitest';
import { eventually, finalRow } from './helpers/index.ts';

const FILE = new URL('./fixtures/readme-custom-channel.ts', import.meta.url);

describe('README: a custom channel in about 30 lines', () => {
  const bodies: { content: string }[] = [];
  const server = createServer((req, res) => {
    let b = '';
    req.on('data', (d) => (b += d));
    req.on('end', () => {
      bodies.push(JSON.parse(b));
      res.writeHead(204).end();
    });
  });
  afterAll(() => server.close());

  it('the README shows the example file verbatim', () => {
    const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
    expect(readme).toContain(readFileSync(FILE, 'utf8').trim());
  });

  it('the example registers, loads from config and delivers through the pipeline', async () => {
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    process.env.DISCORD_URL = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`;
    const { vigil } = await import('./fixtures/readme-custom-channel.ts');
    try {
      await vigil.notifier.notify({
        dedup_key: 'ses_1',
        severity: 'warning',
        title: 'stalling: build',
        summary: '40 turns, nothing landed',
        source: 'no-progress',
      });
      await eventually(() => bodies.length === 1);
      expect(bodies[0]).toEqual({ content: 'WARNING stalling: build: 40 turns, nothing landed' });
      const row = await finalRow(vigil);
      expect(row).toMatchObject({ channel: 'team', type: 'discord', outcome: 'delivered' });
    } finally {
      await vigil.close();
      delete process.env.DISCORD_URL;
    }
  });
});
