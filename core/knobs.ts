import { z } from 'zod';
import { ConfigError, formatIssues, knobSchemas, mergeConfig, type VigilConfig } from './config.ts';
import type { Logger } from './logger.ts';
import type { Registry } from './registry.ts';
import { keys } from './store/keys.ts';
import type { Store } from './store/store.ts';

const KEY = keys.knobs;

/**
 * The live tuning knobs: every detector section (`progress`, `breaker`, ...) and the
 * `modes` section. They start from config, are overlaid by what an operator PATCHed
 * (persisted in the store, so a restart keeps them), and are validated by the same
 * zod schemas as the config file. Readers call get() per use, so a change is
 * effective at once.
 */
export class Knobs {
  private current: Record<string, unknown>;
  private readonly schemas: Record<string, z.ZodType>;
  private readonly listeners: ((k: Record<string, unknown>) => void)[] = [];

  constructor(
    registry: Registry,
    config: VigilConfig,
    private readonly store: Store,
    private readonly logger: Logger,
  ) {
    this.schemas = knobSchemas(registry);
    this.current = {};
    for (const s of Object.keys(this.schemas)) this.current[s] = structuredClone(config[s]);
  }

  sections(): string[] {
    return Object.keys(this.schemas);
  }

  get<T>(section: string): T {
    return this.current[section] as T;
  }

  all(): Record<string, unknown> {
    return this.current;
  }

  onChange(fn: (k: Record<string, unknown>) => void): void {
    this.listeners.push(fn);
  }

  /** Applies the persisted overlay (from an earlier PATCH). An overlay that no longer validates is ignored, loudly. */
  async load(): Promise<void> {
    const saved = await this.store.get<Record<string, unknown>>(KEY);
    if (!saved) return;
    try {
      this.current = this.validate(mergeConfig(this.current, saved) as Record<string, unknown>);
    } catch (e) {
      this.logger.warn({ problems: (e as ConfigError).problems }, 'persisted knobs no longer valid; using config');
    }
  }

  /**
   * Merges a partial update (objects key by key, lists replace), validates every
   * section, persists the operator's overlay and applies it. Throws ConfigError naming
   * each bad path; nothing changes then.
   */
  async patch(body: unknown): Promise<Record<string, unknown>> {
    if (body === null || typeof body !== 'object' || Array.isArray(body)) {
      throw new ConfigError(['(root): expected an object of knob sections']);
    }
    const unknown = Object.keys(body).filter((k) => !(k in this.schemas));
    if (unknown.length) {
      throw new ConfigError(unknown.map((k) => `${k}: unknown knob section (known: ${this.sections().join(', ')})`));
    }
    const next = this.validate(mergeConfig(this.current, body) as Record<string, unknown>);
    const saved = (await this.store.get<Record<string, unknown>>(KEY)) ?? {};
    await this.store.set(KEY, mergeConfig(saved, body));
    this.current = next;
    for (const l of this.listeners) l(next);
    return next;
  }

  private validate(raw: Record<string, unknown>): Record<string, unknown> {
    const out: Record<string, unknown> = {};
    const problems: string[] = [];
    for (const [section, schema] of Object.entries(this.schemas)) {
      const r = schema.safeParse(raw[section] ?? {});
      if (r.success) out[section] = r.data;
      else problems.push(...formatIssues(r.error.issues.map((i) => ({ ...i, path: [section, ...i.path] }))));
    }
    if (problems.length) throw new ConfigError(problems);
    return out;
  }
}
