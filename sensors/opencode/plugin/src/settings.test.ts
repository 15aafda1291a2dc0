import { describe, expect, it } from 'vitest';
import { DEFAULT_URL, settingsOf, troubleMessage } from './settings.ts';

// Where the plugin reports: the plugin option, else VIGIL_URL, else vigil serve's address.

describe('plugin settings', () => {
  it('the option wins over VIGIL_URL, which wins over the default', () => {
    const env = { VIGIL_URL: 'http://127.0.0.1:8080/vigil/', VIGIL_INGEST_TOKEN: 't0k' };
    expect(settingsOf(undefined, {})).toEqual({ url: DEFAULT_URL, token: undefined, from: 'default' });
    expect(settingsOf(undefined, env)).toEqual({ url: 'http://127.0.0.1:8080/vigil', token: 't0k', from: 'env' });
    expect(settingsOf({ url: 'https://vigil.example/x', token_env: 'MY_TOKEN' }, { ...env, MY_TOKEN: 'mine' })).toEqual(
      { url: 'https://vigil.example/x', token: 'mine', from: 'option' },
    );
  });

  it('names the bad option or variable', () => {
    expect(() => settingsOf({ url: 'ftp://x' }, {})).toThrow('vigil plugin option "url": not an http(s) URL');
    expect(() => settingsOf({ url: 3 }, {})).toThrow('vigil plugin option "url": not a string');
    expect(() => settingsOf({ token: 'secret' }, {})).toThrow('vigil plugin option "token": unknown');
    expect(() => settingsOf({ token_env: 'not a name' }, {})).toThrow('"token_env"');
    expect(() => settingsOf(undefined, { VIGIL_URL: 'nonsense' })).toThrow('VIGIL_URL: not a URL');
    expect(() => settingsOf(undefined, { VIGIL_URL: 'http://u:p@h' })).toThrow('VIGIL_URL: no credentials');
  });

  it('the warning says what to set', () => {
    const m = troubleMessage({ kind: 'unreachable', url: DEFAULT_URL, detail: 'connection refused' }, 'default');
    expect(m).toContain(`Vigil at ${DEFAULT_URL} does not answer (connection refused)`);
    expect(m).toContain('Set VIGIL_URL (unset)');
    expect(troubleMessage({ kind: 'not_vigil', url: 'http://h/x', detail: 'answered 404' }, 'option')).toContain(
      'is not Vigil (answered 404): tool calls are not being judged. Set the plugin option url',
    );
    // A session bound to another key is not a token problem: it says which.
    const bound = troubleMessage(
      { kind: 'unauthorized', url: DEFAULT_URL, detail: 'answered 403 SESSION_KEY_MISMATCH' },
      'default',
    );
    expect(bound).toContain('bound to another sensor key (SESSION_KEY_MISMATCH)');
    expect(bound).not.toContain('VIGIL_INGEST_TOKEN');
  });
});
