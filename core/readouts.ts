import { inject, injectable } from 'tsyringe';
import type { Clock } from './clock.ts';
import type { VigilConfig } from './config-schema.ts';
import type { Mode, SessionReadout, TreeState } from './contracts.ts';
import { type Driven, RANK } from './dispatch.ts';
import { gapLine, gapsOf, type SensorDescriptor, sensorNameOf } from './sensor.ts';
import { keys } from './store/keys.ts';
import type { Store } from './store/store.ts';
import { TOKENS } from './tokens.ts';
import type { SessionTree } from './tree.ts';
import type { VerdictLevel } from './wire.ts';

/** One row of the Sessions readout: the tree's facts, the mode's state, each detector's verdict. */
export interface SessionRow {
  session: string;
  agent: string | null;
  parent: string | null;
  root: string;
  /** The worst level any detector gives the session, with that detector's reason. */
  verdict: VerdictLevel;
  reason: string;
  source: string;
  stage: number;
  /** The gate refuses it (a scoped refusal or the tree's hard stop). */
  refused: boolean;
  /**
   * No sensor reported on any session of its tree for `detection.stale_after` (an
   * opencode server long gone): readouts show it as stale rather than refused or live.
   */
  stale: boolean;
  models: string[];
  plugin_live: boolean;
  plugin_version: string | null;
  /** The sensor that reports it (from its plugin header), when it declared itself. */
  sensor?: string | null;
  /**
   * The actions the configured mode asks that this sensor does not take itself, and how
   * they are done instead (`compact via inject; toast none`); empty when all are native.
   */
  cannot_act?: string;
  last_event_at: string | null;
  /** Every detector's verdict on the session. */
  detectors: Record<string, { level: VerdictLevel; reason: string; source: string }>;
  /** Sparkline series, oldest first. */
  series: Record<string, readonly number[]>;
  /** The columns detectors add (turns_since_landed, top_target, ...). */
  [field: string]: unknown;
}

/**
 * The readouts: the Sessions table, one session's row, its incident report. Reads only:
 * the tree's facts, the mode's state and what each detector says.
 */
@injectable()
export class Readouts {
  /** detection.stale_after: a tree this long without sensor input reads as stale. */
  private readonly staleAfterMs: number;

  constructor(
    @inject(TOKENS.Driven) private readonly driven: readonly Driven[],
    @inject(TOKENS.Mode) private readonly mode: () => Mode,
    @inject(TOKENS.Tree) private readonly tree: SessionTree,
    @inject(TOKENS.Store) private readonly store: Store,
    @inject(TOKENS.Clock) private readonly clock: Clock,
    @inject(TOKENS.Config) config: VigilConfig,
    /** What each sensor can carry out (core/sensor.ts), by name. */
    @inject(TOKENS.Sensors) private readonly sensors: ReadonlyMap<string, SensorDescriptor>,
  ) {
    this.staleAfterMs = config.detection.stale_after as number;
  }

  async treeState(root: string): Promise<TreeState | undefined> {
    return this.store.get<TreeState>(keys.tree(root));
  }

  /** One session's row of the Sessions readout. */
  async sessionRow(id: string): Promise<SessionRow | undefined> {
    const [meta, info] = await Promise.all([this.tree.meta(id), this.tree.info(id)]);
    const readouts: [string, SessionReadout][] = [];
    for (const x of this.driven) {
      if (!x.detector.session) continue;
      const r = await x.detector.session(id);
      if (r) readouts.push([x.detector.type, r]);
    }
    if (!meta && readouts.length === 0) return undefined;
    const tree = await this.treeState(info.root);
    let worst: SessionReadout | undefined;
    for (const [, r] of readouts) if (!worst || RANK[r.level] > RANK[worst.level]) worst = r;
    const row: SessionRow = {
      session: id,
      agent: meta?.agent ?? null,
      parent: info.parent ?? null,
      root: info.root,
      verdict: worst?.level ?? 'ok',
      reason: worst?.reason ?? '',
      source: worst?.source ?? '',
      stage: tree?.stage ?? 0,
      refused: Boolean(tree?.refuse_all || tree?.refused[id]),
      stale: false,
      models: meta?.models ?? [],
      plugin_live: this.tree.pluginLive(meta),
      plugin_version: meta?.plugin_version ?? null,
      ...this.sensorFields(meta?.plugin_version),
      last_event_at: null,
      detectors: {},
      series: {},
    };
    let last = meta?.last_seen ?? 0;
    for (const [type, r] of readouts) {
      row.detectors[type] = { level: r.level, reason: r.reason, source: r.source };
      for (const [k, v] of Object.entries(r.fields ?? {})) if (!(k in row)) row[k] = v;
      Object.assign(row.series, r.series);
      if ((r.last_event_at ?? 0) > last) last = r.last_event_at ?? 0;
    }
    row.last_event_at = last ? new Date(last).toISOString() : null;
    return this.withStaleness([row])[0];
  }

  /** The session's sensor and the actions the mode asks that it cannot take itself. */
  private sensorFields(pluginVersion: string | undefined): { sensor: string | null; cannot_act: string } {
    const name = sensorNameOf(pluginVersion);
    const s = name === undefined ? undefined : this.sensors.get(name);
    return { sensor: name ?? null, cannot_act: s ? gapLine(gapsOf(s, this.mode().asks ?? [])) : '' };
  }

  /** Marks the rows of trees no sensor reported on for staleAfterMs (their plugin is not live then). */
  private withStaleness(rows: SessionRow[]): SessionRow[] {
    const lastOf = new Map<string, number>();
    for (const r of rows) {
      const t = r.last_event_at ? Date.parse(r.last_event_at) : 0;
      lastOf.set(r.root, Math.max(lastOf.get(r.root) ?? 0, t));
    }
    const now = this.clock.now();
    for (const r of rows) {
      r.stale = now - (lastOf.get(r.root) ?? 0) > this.staleAfterMs;
      if (r.stale) r.plugin_live = false;
    }
    return rows;
  }

  /** Every tracked session, most recent activity first. */
  async sessionRows(limit = 1000): Promise<SessionRow[]> {
    const ids = new Set(await this.tree.ids());
    for (const x of this.driven) for (const id of (await x.detector.sessions?.()) ?? []) ids.add(id);
    const rows: SessionRow[] = [];
    for (const id of ids) {
      const r = await this.sessionRow(id);
      if (r) rows.push(r);
    }
    // Staleness is the tree's: a quiet child of a busy root is not stale.
    this.withStaleness(rows);
    return rows.sort((a, b) => (b.last_event_at ?? '').localeCompare(a.last_event_at ?? '')).slice(0, limit);
  }

  /** The incident reports of a session, the worst detector's first; undefined when nobody knows it. */
  async report(id: string): Promise<string | undefined> {
    const parts: { rank: number; text: string }[] = [];
    for (const x of this.driven) {
      if (!x.detector.report) continue;
      const text = await x.detector.report(id);
      if (text === undefined) continue;
      const r = await x.detector.session?.(id);
      parts.push({ rank: r ? RANK[r.level] : 0, text });
    }
    if (!parts.length) return undefined;
    return parts
      .sort((a, b) => b.rank - a.rank)
      .map((p) => p.text)
      .join('\n\n');
  }
}
