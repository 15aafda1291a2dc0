import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { createLogger, registerSecret } from './logger.ts';

function capture() {
  const lines: string[] = [];
  const destination = new Writable({
    write(chunk, _enc, cb) {
      lines.push(String(chunk));
      cb();
    },
  });
  return { lines, log: createLogger({ destination, level: 'info' }) };
}

describe('logger redaction', () => {
  it('redacts secret keys', () => {
    const { lines, log } = capture();
    log.info({ token: 'abc', headers: { authorization: 'Bearer xyz' }, ok: 1 }, 'hello');
    expect(lines.join('')).not.toMatch(/abc|xyz/);
    expect(lines.join('')).toContain('[REDACTED]');
  });

  it('scrubs known secret values wherever they appear', () => {
    const { lines, log } = capture();
    registerSecret('whsec_supersecretvalue');
    log.warn(
      { err: 'POST http://x/?k=whsec_supersecretvalue failed', nested: { deep: 'whsec_supersecretvalue' } },
      'failed with whsec_supersecretvalue',
    );
    const out = lines.join('');
    expect(out).not.toContain('whsec_supersecretvalue');
    expect(out.match(/\[REDACTED\]/g)?.length).toBe(3);
  });
});
