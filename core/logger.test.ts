import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { createLogger, registerSecret, scrub, significantParts } from './logger.ts';

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

  it("redacts the sensor routes' token and session key headers", () => {
    const { lines, log } = capture();
    const headers = { 'x-vigil-session-key': 'ses_a=k3y-of-ses-a', 'x-vigil-token': 't0ken' };
    log.info({ req: { headers }, headers, res: { headers } }, 'request');
    expect(lines.join('')).not.toMatch(/k3y-of-ses-a|t0ken/);
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

  it("scrubs a secret URL's path and query wherever they appear without the rest", () => {
    const url = 'https://hooks.slack.com/services/T0ABCDEFG/B0ABCDEFG/abcdefghijklmnopqrstuvwx?token=q-s3cret';
    registerSecret(url);
    expect(scrub(`POST ${url} failed`)).toBe('POST [REDACTED] failed');
    expect(scrub('400: no hook /services/T0ABCDEFG/B0ABCDEFG/abcdefghijklmnopqrstuvwx')).toBe(
      '400: no hook [REDACTED]',
    );
    expect(scrub('bad: services/T0ABCDEFG/B0ABCDEFG/abcdefghijklmnopqrstuvwx')).toBe('bad: [REDACTED]');
    expect(scrub('token abcdefghijklmnopqrstuvwx revoked')).toBe('token [REDACTED] revoked');
    expect(scrub('query was token=q-s3cret')).toBe('query was [REDACTED]');
    // The host names a provider, not a secret; short segments are ordinary words.
    expect(scrub('hooks.slack.com answered 400 for services')).toBe('hooks.slack.com answered 400 for services');
  });

  it('finds no parts in a value that is not a URL, and none shorter than 6 characters', () => {
    expect(significantParts('whsec_abcdefgh')).toEqual([]);
    expect(significantParts('https://ntfy.sh/ab')).toEqual([]);
    expect(significantParts('https://ntfy.sh/my-topic-1')).toEqual(['/my-topic-1']);
  });
});
