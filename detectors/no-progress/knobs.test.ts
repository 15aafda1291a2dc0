import { describe, expect, it } from 'vitest';
import { defaultKnobs, NoProgressKnobsSchema } from './knobs.ts';

describe('no-progress knobs', () => {
  it('defaults to the prototype thresholds and on', () => {
    expect(defaultKnobs()).toMatchObject({
      enabled: true,
      window: 60,
      dup_warn: 0.25,
      top_warn: 12,
      top_ro_warn: 8,
      session_repeat_warn: 15,
    });
    expect(defaultKnobs().read_only_agents).toContain('explore');
  });

  it('rejects an unknown key and names it', () => {
    const r = NoProgressKnobsSchema.safeParse({ dup_wran: 0.3 });
    expect(r.success).toBe(false);
    expect(r.error?.issues[0].code).toBe('unrecognized_keys');
  });

  it('rejects a loop threshold below its warn threshold, naming the loop knob', () => {
    const r = NoProgressKnobsSchema.safeParse({ top_warn: 30 });
    expect(r.success).toBe(false);
    expect(r.error?.issues[0].path).toEqual(['top_loop']);
  });

  it('rejects an unknown mode and out-of-range shares', () => {
    expect(NoProgressKnobsSchema.safeParse({ mode: 'nuke' }).success).toBe(false);
    expect(NoProgressKnobsSchema.safeParse({ dup_warn: 1.5 }).success).toBe(false);
    expect(NoProgressKnobsSchema.safeParse({ novelty_window: 100 }).success).toBe(false);
  });
});
