import { existsSync } from 'node:fs';
import type { VigilConfig } from '../core/config-schema.ts';
import { type Logger, silentLogger } from '../core/logger.ts';
import { loadSensorSecret, sensorSecretFile, sessionKey } from '../core/session-key.ts';
import type { SessionStatsEvent } from '../core/wire.ts';
import type { NoProgressKnobs } from '../detectors/no-progress/knobs.ts';
import { type Collected, collectFromServer, type JudgedSession, judgeSessions, type LoadedSession } from './collect.ts';
import { collectFromDb, dbCachePath, readDbCache, writeDbCache } from './dbread.ts';
import { candidateServers, probeAll, short } from './discover.ts';
import { acquireLock, type LockInfo } from './lock.ts';
import { askModel, buildDigest, type SecondOpinion } from './opinion.ts';
import { resolvePaths, type WatchdogOptions } from './options.ts';
import {
  type Delivery,
  postHeartbeat,
  postStats,
  postVerdicts,
  type ServiceTarget,
  sendDirectAlert,
  type VerdictOut,
} from './report.ts';
import { readState, type TickResult, type TickStatus, type WatchdogState, writeState } from './state.ts';
import { collectTranscripts } from './transcripts.ts';

// One watchdog tick, start to end (docs/watchdog.md): lock, find opencode, read the
// sessions active since the last tick, judge them with the service's judge, ask the
// local model about the flagged ones, report to the service, record the tick. It
// reports and never acts: no abort, no compaction, no prompt.

export interface TickOptions {
  config: VigilConfig;
  env?: NodeJS.ProcessEnv;
  logger?: Logger;
  now?: () => number;
}

export interface TickOutcome extends TickResult {
  /** When the tick started; `last_tick_at` in the heartbeat and the state file. */
  at: number;
  /** Sessions reported non-ok, and recovered ones reported ok. */
  reported: VerdictOut[];
  /** Session-hygiene readings sent (one per active session whose bulk was read). */
  stats: number;
  /** Where the opencode sessions came from. */
  source: 'api' | 'db' | 'none';
  /** Other agents' transcript files read this tick (transcripts.ts). */
  transcripts: number;
  service: 'up' | 'down' | 'refused' | 'not contacted';
  /** A direct desktop alert went out (the service is down). */
  alerted: boolean;
  /** The tick that held the lock, when this one skipped. */
  holder?: LockInfo | null;
}

/** The judge's knobs: the progress section, read-only agents merged with the watchdog's own list. */
export function watchdogKnobs(cfg: VigilConfig): NoProgressKnobs {
  const progress = cfg.progress as NoProgressKnobs;
  const w = cfg.watchdog as WatchdogOptions;
  const ro = w.read_only_agents
    ? [...new Set([...progress.read_only_agents, ...w.read_only_agents])]
    : progress.read_only_agents;
  return { ...progress, read_only_agents: ro };
}

/**
 * The plugin's session keys (same user, same sensor secret), read each tick. Never made
 * here: without the file no sensor of this user has bound a session, so keyless
 * reports pass; an unreadable or bad file is logged and the reports go without keys.
 */
function sessionSigner(env: NodeJS.ProcessEnv, log: Logger): Pick<ServiceTarget, 'sessionKey'> {
  const file = sensorSecretFile(env);
  try {
    const secret = loadSensorSecret(file, { create: false });
    return { sessionKey: (id) => sessionKey(secret, id) };
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') {
      log.warn({ file, err: (err as Error).message }, 'sensor secret unreadable: reports go without session keys');
    }
    return {};
  }
}

const clip = (s: string) => s.replace(/[^\x20-\x7e]/g, '?').slice(0, 300);

export async function runTick(o: TickOptions): Promise<TickOutcome> {
  const cfg = o.config;
  const w = cfg.watchdog as WatchdogOptions;
  const env = o.env ?? process.env;
  const log = o.logger ?? silentLogger();
  const now = o.now ?? Date.now;
  const at = now();
  const service: ServiceTarget = {
    url: w.service_url,
    // A sensor: it sends the ingestion token, never the admin token (service/auth.ts).
    token: env[cfg.server.ingest_token_env] || undefined,
    ...sessionSigner(env, log),
    timeoutMs: w.request_timeout,
  };
  const base = {
    at,
    servers: 0,
    sessions: 0,
    flagged: 0,
    model_calls: 0,
    reported: [],
    stats: 0,
    transcripts: 0,
    alerted: false,
  };
  if (!w.enabled) {
    return { ...base, status: 'skipped', error: 'watchdog.enabled is false', source: 'none', service: 'not contacted' };
  }
  const paths = resolvePaths(w, env);

  const lock = acquireLock(paths.lock, at);
  if (!lock.acquired) {
    // another tick is still running: skip, do not stack; tell the service if it listens
    const result: TickResult = {
      status: 'skipped',
      servers: 0,
      sessions: 0,
      flagged: 0,
      model_calls: 0,
      duration_ms: now() - at,
      error: lock.holder ? `previous tick still running (pid ${lock.holder.pid})` : 'lock held',
    };
    const hb = await postHeartbeat(service, at, result);
    log.info({ holder: lock.holder?.pid }, 'watchdog tick skipped: previous tick still running');
    return { ...base, ...result, source: 'none', service: deliveryState(hb), holder: lock.holder };
  }
  try {
    return await body(cfg, w, env, log, now, at, paths, service);
  } catch (e) {
    // an unexpected failure still leaves a trace: heartbeat and state file say error
    const result: TickResult = {
      status: 'error',
      servers: 0,
      sessions: 0,
      flagged: 0,
      model_calls: 0,
      duration_ms: now() - at,
      error: clip(`tick failed: ${short(e)}`),
    };
    log.error({ err: result.error }, 'watchdog tick failed');
    const hb = await postHeartbeat(service, at, result).catch(() => ({ state: 'down' }) as Delivery);
    const prev = readState(paths.state);
    try {
      writeState(paths.state, { ...(prev ?? fresh()), version: 1, last_tick_at: at, result });
    } catch {
      // the state dir is unwritable: the heartbeat is all we have
    }
    return { ...base, ...result, source: 'none', service: deliveryState(hb) };
  } finally {
    lock.release();
  }
}

/**
 * `session_stats` readings of the active sessions: stored messages and bytes, the newest
 * model-side write, and `live` (the opencode server answered; false from the database
 * file alone, which can never conclude a restore stall).
 */
export function statsOf(sessions: readonly LoadedSession[], live: boolean, at: number): SessionStatsEvent[] {
  const out: SessionStatsEvent[] = [];
  for (const s of sessions) {
    const b = s.bulk;
    if (!s.active || !b) continue;
    out.push({
      kind: 'session_stats',
      session_id: s.id,
      ...(s.parent ? { parent_session_id: s.parent } : {}),
      ...(s.agent ? { agent: clip(s.agent).slice(0, 64) } : {}),
      messages: Math.min(b.messages, 100_000_000),
      stored_bytes: b.stored_bytes,
      ...(b.history_bytes !== null ? { history_bytes: b.history_bytes } : {}),
      ...(b.updated_at !== null ? { updated_at: b.updated_at } : {}),
      live,
      ts: at,
    });
  }
  return out;
}

function fresh(): WatchdogState {
  return {
    version: 1,
    last_tick_at: 0,
    result: { status: 'idle', servers: 0, sessions: 0, flagged: 0, model_calls: 0 },
    flagged: {},
    service_down: null,
  };
}

function deliveryState(d: Delivery): TickOutcome['service'] {
  return d.state === 'ok' ? 'up' : d.state;
}

async function body(
  cfg: VigilConfig,
  w: WatchdogOptions,
  env: NodeJS.ProcessEnv,
  log: Logger,
  now: () => number,
  at: number,
  paths: ReturnType<typeof resolvePaths>,
  service: ServiceTarget,
): Promise<TickOutcome> {
  const prev = readState(paths.state);
  const since = prev?.since ?? at - w.interval;

  // 1. find opencode
  const probes = await probeAll(candidateServers(w.servers, paths.rcServers), w.probe_timeout);
  const up = probes.filter((p) => p.state === 'up');
  const issues: string[] = [];
  for (const p of probes) if (p.state === 'odd') issues.push(`${p.url} ${p.why}`);

  // 2. sessions active since the last tick: through the API, else from opencode.db
  const copts = { since, maxSessions: w.max_sessions, timeoutMs: w.request_timeout, seen: new Set<string>() };
  let source: TickOutcome['source'] = 'none';
  const collected: Collected = { sessions: [], issues: [], errors: [], truncated: false };
  if (up.length) {
    source = 'api';
    for (const p of up) {
      const c = await collectFromServer(p.url, copts);
      collected.sessions.push(...c.sessions);
      collected.issues.push(...c.issues);
      collected.errors.push(...c.errors);
      collected.truncated ||= c.truncated;
    }
  } else if (existsSync(paths.db)) {
    source = 'db';
    // what the last DB read kept: only rows changed since are read
    const cachePath = dbCachePath(paths.state);
    const cache = readDbCache(cachePath);
    const c = await collectFromDb(paths.db, { ...copts, cache, logger: log });
    collected.sessions = c.sessions;
    collected.issues = c.issues;
    collected.errors = c.errors;
    collected.truncated = c.truncated;
    if (c.cache !== null && c.cache !== cache) {
      try {
        writeDbCache(cachePath, c.cache);
      } catch (e) {
        // the next tick reads these sessions in full again: slower, not wrong
        log.warn({ err: clip(short(e)) }, 'watchdog: cannot write the opencode.db read cache');
      }
    }
  }
  // 2b. other agents' transcripts changed in the same window, read from disk (no hook needed)
  let transcriptFiles = 0;
  if (w.transcripts) {
    const t = collectTranscripts(paths, { since, maxFiles: w.transcript_max_files, maxBytes: w.transcript_max_bytes });
    collected.sessions.push(...t.sessions);
    transcriptFiles = t.files;
    if (t.truncated)
      log.warn({ max_files: w.transcript_max_files }, 'more transcripts changed than watchdog.transcript_max_files');
  }
  issues.push(...collected.issues);
  if (collected.truncated)
    log.warn({ max_sessions: w.max_sessions }, 'more active sessions than watchdog.max_sessions');

  // 3. the judge, on every active session
  const judged = judgeSessions(collected.sessions, watchdogKnobs(cfg));
  const flagged = judged.filter((j) => j.verdict.level !== 'ok');

  // 4. second opinion, flagged sessions only
  let modelCalls = 0;
  const opinions = new Map<string, SecondOpinion>();
  if (cfg.local_compute.enabled && w.local_llm_enabled) {
    for (const j of flagged.slice(0, w.max_opinions)) {
      modelCalls++;
      const r = await askModel(buildDigest(j.events), {
        host: w.ollama_url,
        model: w.model,
        timeoutMs: w.opinion_timeout,
      });
      if (r.ok) opinions.set(j.id, r.opinion);
      else
        log.warn({ session: j.id, model: w.model, err: r.error }, 'second opinion failed; verdict goes out without it');
    }
  }

  // 5. report: flagged sessions, and the ones this watchdog flagged before that are ok now
  const outOf = (j: JudgedSession): VerdictOut => {
    const op = opinions.get(j.id);
    return {
      session_id: j.id,
      ...(j.parent ? { parent_session_id: j.parent } : {}),
      ...(j.agent ? { agent: clip(j.agent).slice(0, 64) } : {}),
      level: j.verdict.level,
      reason: clip(j.verdict.reason),
      source: 'watchdog',
      ...(op ? { second_opinion: { ...op, reason: clip(op.reason) } } : {}),
    };
  };
  const prevFlagged = prev?.flagged ?? {};
  const recovered = judged.filter((j) => j.verdict.level === 'ok' && prevFlagged[j.id] !== undefined);
  const reported = [...flagged, ...recovered].map(outOf);

  const servers = up.length;
  const status: TickStatus = issues.length
    ? 'blind'
    : collected.errors.length
      ? 'error'
      : flagged.length
        ? 'flagged'
        : servers === 0 && judged.length === 0
          ? 'idle'
          : 'ok';
  const result: TickResult = {
    status,
    servers,
    sessions: judged.length,
    flagged: flagged.length,
    model_calls: modelCalls,
    ...(issues.length || collected.errors.length ? { error: clip([...issues, ...collected.errors][0]) } : {}),
  };

  // session hygiene: each active session's bulk, live when its server answered
  const stats = statsOf(collected.sessions, source === 'api', at);

  let delivery: Delivery = { state: 'ok' };
  if (reported.length) delivery = await postVerdicts(service, reported);
  if (delivery.state === 'ok' && stats.length) delivery = await postStats(service, stats);
  const refused = (d: Delivery) => {
    // a 4xx is a bug between watchdog and service, not an outage: the tick failed
    if (d.state !== 'refused') return;
    result.status = 'error';
    result.error = clip(`the service refused the report: ${d.why}`);
    log.error({ err: d.why }, 'the service refused the watchdog report');
  };
  refused(delivery);
  result.duration_ms = now() - at;
  const hb = await postHeartbeat(service, at, result);
  if (delivery.state === 'ok' && hb.state !== 'ok') {
    delivery = hb;
    refused(hb);
  }

  // the service is down: one direct alert per outage, again only when a new session is flagged
  let alerted = false;
  let down: WatchdogState['service_down'] = null;
  let alertError: string | undefined;
  if (delivery.state === 'down') {
    // with no opencode to watch there is nothing to tell anyone
    const watching = servers > 0 || judged.length > 0;
    const before = prev?.service_down ?? null;
    const named = new Set(before?.alerted ?? []);
    const fresh = flagged.filter((f) => !named.has(f.id));
    down = watching ? { since: before?.since ?? at, alerted: [...named] } : before;
    if (watching && (before === null || fresh.length > 0)) {
      try {
        await sendDirectAlert(cfg, env, {
          serviceUrl: w.service_url,
          why: delivery.why,
          flagged: flagged.length,
          sample: flagged.slice(0, 3).map((f) => ({ session_id: f.id, agent: f.agent, level: f.verdict.level })),
        });
        alerted = true;
        down = { since: before?.since ?? at, alerted: [...named, ...fresh.map((f) => f.id)] };
      } catch (e) {
        alertError = clip(`service down and the desktop alert failed: ${short(e)}`);
        down = before; // try again next tick
        log.error({ err: alertError }, 'direct alert failed');
      }
    }
  }

  // 6. record the tick. The window moves on only when the service took the report.
  const delivered = delivery.state === 'ok';
  const nextFlagged = { ...prevFlagged };
  if (delivered) {
    for (const r of reported) {
      if (r.level === 'ok') delete nextFlagged[r.session_id];
      else nextFlagged[r.session_id] = r.level;
    }
  }
  if (alertError) {
    result.status = 'error';
    result.error = alertError;
  }
  result.duration_ms = now() - at;
  const moved = delivered && (status === 'ok' || status === 'flagged' || status === 'idle');
  writeState(paths.state, {
    version: 1,
    last_tick_at: at,
    result,
    since: moved ? at : since,
    flagged: nextFlagged,
    service_down: down,
  });
  log.info(
    {
      status: result.status,
      servers,
      source,
      transcripts: transcriptFiles,
      sessions: judged.length,
      flagged: flagged.map((f) => ({ session: f.id, level: f.verdict.level })),
      model_calls: modelCalls,
      service: deliveryState(delivery),
      alerted,
      ...(result.error ? { err: result.error } : {}),
    },
    `watchdog tick: ${result.status}`,
  );
  return {
    ...result,
    at,
    reported,
    stats: delivered ? stats.length : 0,
    transcripts: transcriptFiles,
    source,
    service: deliveryState(delivery),
    alerted,
  };
}
