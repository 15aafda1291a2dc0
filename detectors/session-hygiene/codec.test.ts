import { describe, expect, it } from 'vitest';
import { decodeHygiene, encodeHygiene, resumePendingIn } from './codec.ts';
import { newHygieneState } from './judge.ts';

/** A state with its trend full (32 turns) and request ids remembered, as a long session has. */
function fullState() {
  const s = newHygieneState('ses_codec');
  s.turns = 41;
  s.trend = Array.from({ length: 32 }, (_, i) => ({
    at: 1_796_056_857_958 + i * 7000,
    calls: 1 + (i % 3),
    per_call: 24_500 + i * 500,
  }));
  s.model = 'provider/model-a';
  s.last_prompt_tokens = 34_500;
  return s;
}

describe('session-hygiene state codec', () => {
  it('round-trips a state, and is a third of its JSON or less', () => {
    const s = fullState();
    const b = encodeHygiene(s);
    expect(decodeHygiene(b)).toEqual(s);
    expect(b.length).toBeLessThan(Buffer.byteLength(JSON.stringify(s)) / 3);
  });

  it('says whether a resume is pending from the flags byte alone', () => {
    const s = fullState();
    expect(resumePendingIn(encodeHygiene(s))).toBe(false);
    s.resume_at = 1_796_056_900_000;
    const b = encodeHygiene(s);
    expect(resumePendingIn(b)).toBe(true);
    // The flag is read without inflating: a body that cannot inflate still answers.
    const broken = new Uint8Array(b.subarray(0, 3));
    expect(resumePendingIn(broken)).toBe(true);
  });

  it('reads a state an earlier version wrote as JSON', () => {
    const s = fullState();
    s.resume_at = 5;
    const legacy = new TextEncoder().encode(JSON.stringify(s));
    expect(decodeHygiene(legacy)).toEqual(s);
    expect(resumePendingIn(legacy)).toBe(true);
  });

  it('refuses bytes of an unknown version, naming it', () => {
    expect(() => decodeHygiene(new Uint8Array([9, 0, 1]))).toThrow(/version 9/);
  });
});
