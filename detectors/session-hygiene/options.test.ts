import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { defaultHygieneOptions, HygieneOptionsSchema } from './options.ts';

describe('hygiene options', () => {
  it('defaults to the thresholds the two dead sessions gave', () => {
    expect(defaultHygieneOptions()).toEqual({
      enabled: true,
      auto_fresh: false,
      info_alerts: false,
      empty_refusal: 1_800_000,
      per_call_warn: 150_000,
      per_call_retire: 200_000,
      trend_turns: 32,
      retry_warn: 3,
      first_token_timeout: 120_000,
      message_ceiling: 3_600,
      bytes_ceiling: 18_000_000,
      nominal_context: {},
      envelope_min_tokens: 100_000,
      envelope_min_clean: 20,
      max_models: 256,
      image_context_tokens: 100_000,
      resume_info: 4,
      resume_window: 86_400_000,
      history_bytes_info: 1_000_000,
      max_sessions: 100_000,
    });
  });

  it('takes durations as strings and a nominal window per model', () => {
    const o = HygieneOptionsSchema.parse({
      first_token_timeout: '90s',
      resume_window: '12h',
      nominal_context: { 'openrouter/x-ai/grok-4.6': 2_000_000 },
    });
    expect([o.first_token_timeout, o.resume_window]).toEqual([90_000, 43_200_000]);
    expect(o.nominal_context['openrouter/x-ai/grok-4.6']).toBe(2_000_000);
  });

  it.each([
    [{ per_call_wran: 1 }, [], 'unrecognized_keys'],
    [{ per_call_warn: 250_000 }, ['per_call_retire'], 'custom'],
    [{ first_token_timeout: 'soon' }, ['first_token_timeout'], 'custom'],
    [{ resume_info: 17 }, ['resume_info'], 'too_big'],
    [{ nominal_context: { 'has space': 1 } }, ['nominal_context', 'has space'], 'invalid_key'],
    [{ retry_warn: 0 }, ['retry_warn'], 'too_small'],
  ])('refuses %j at %j', (input, path, code) => {
    const issue = HygieneOptionsSchema.safeParse(input).error?.issues[0];
    expect(issue?.path).toEqual(path);
    expect(issue?.code).toBe(code);
  });
});

describe('the documented `hygiene:` section', () => {
  const md = readFileSync(new URL('../../docs/session-hygiene.md', import.meta.url), 'utf8');
  const block = /```yaml\n(hygiene:\n[\s\S]*?)```/.exec(md)?.[1] ?? '';

  it('is the defaults, every knob with a one-line comment', () => {
    expect(HygieneOptionsSchema.parse(parse(block).hygiene)).toEqual(defaultHygieneOptions());
    const knobs = block.split('\n').slice(1).filter(Boolean);
    expect(knobs).toHaveLength(Object.keys(defaultHygieneOptions()).length);
    for (const l of knobs) expect(l).toMatch(/^ {2}[a-z_]+: \S.* # [\x20-\x7e]+$/);
  });
});
