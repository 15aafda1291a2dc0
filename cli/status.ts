import type { Command } from 'commander';
import { z } from 'zod';
import { installers } from '../builtins.ts';
import type { Explained } from '../core/config.ts';
import type { ChannelStatus } from '../core/vigil.ts';
import { parseArgs } from './args.ts';
import { agentsText, type SensorLive } from './install.ts';
import { ago, call, channelLine, cut, DEFAULT_URL, type Remote, sourceLine, table, when } from './remote.ts';

// `vigil status` and `vigil sessions`: a running service at a glance, read over its HTTP API.
export function statusCommands(
  program: Command,
  env: NodeJS.ProcessEnv,
  out: (s: string) => void,
  remoteOf: (raw: { url?: string }, env: NodeJS.ProcessEnv, cmd: string) => Remote,
): void {
  program
    .command('status')
    .description('a running service at a glance: health, channels, sessions by verdict, open alerts, failed deliveries')
    .option('--url <url>', `the service (env VIGIL_URL; default ${DEFAULT_URL})`)
    .action(async (raw) => {
      const r = remoteOf(parseArgs(z.strictObject({ url: z.string().optional() }), raw, 'status'), env, 'status');
      out(await statusText(r, env));
    });

  program
    .command('sessions')
    .description('the Sessions readout of a running service as a table, worst first')
    .option('--url <url>', `the service (env VIGIL_URL; default ${DEFAULT_URL})`)
    .option('--verdict <level>', 'only sessions at this verdict: ok, stalling or looping')
    .option('--limit <n>', 'at most this many rows', '50')
    .option('--json', 'the rows as JSON, one per line')
    .action(async (raw) => {
      const a = parseArgs(
        z.strictObject({
          url: z.string().optional(),
          verdict: z.enum(['ok', 'stalling', 'looping']).optional(),
          limit: z.coerce.number().int().min(1).max(10_000),
          json: z.boolean().optional(),
        }),
        raw,
        'sessions',
      );
      const rows = await call<Row[]>(remoteOf(a, env, 'sessions'), 'GET', '/sessions?limit=10000');
      const shown = sortRows(rows)
        .filter((x) => !a.verdict || x.verdict === a.verdict)
        .slice(0, a.limit);
      if (a.json) for (const x of shown) out(`${JSON.stringify(x)}\n`);
      else out(sessionsTable(shown, rows.length));
    });
}

interface Row {
  session: string;
  agent: string | null;
  root: string;
  verdict: 'ok' | 'stalling' | 'looping';
  stage: number;
  reason: string;
  last_event_at: string | null;
  [k: string]: unknown;
}

const RANK = { looping: 0, stalling: 1, ok: 2 } as const;

function sortRows(rows: Row[]): Row[] {
  return [...rows].sort(
    (a, b) =>
      RANK[a.verdict] - RANK[b.verdict] || String(b.last_event_at ?? '').localeCompare(String(a.last_event_at ?? '')),
  );
}

function sessionsTable(rows: Row[], total: number): string {
  const num = (v: unknown, digits = 0) => (typeof v === 'number' ? v.toFixed(digits) : null);
  const out = table(
    ['SESSION', 'AGENT', 'VERDICT', 'STAGE', 'TURNS', 'USD', 'TOP REPEATED', 'LAST', 'REASON'],
    rows.map((r) => [
      cut(r.session, 32),
      cut(r.agent, 20),
      r.verdict,
      r.stage || null,
      num(r.turns_since_landed),
      num(r.usd_since_landed, 2),
      r.top_target ? `${cut(r.top_target, 30)} x${r.top_count}` : null,
      ago(r.last_event_at),
      cut(r.reason, 70),
    ]),
  );
  return `${out}${rows.length < total ? `(${rows.length} of ${total} sessions)\n` : ''}`;
}

interface Health {
  ok: boolean;
  version: string;
  backend: string;
  redis: string;
  mode: string;
  queue_depth?: number | null;
  channels: ChannelStatus[];
  knobs: Explained[];
  watchdog: { last_tick_at: string; age_s: number; result: { status: string } } | null;
  sensors?: SensorLive[];
}

async function statusText(r: Remote, env: NodeJS.ProcessEnv): Promise<string> {
  // A relay on this machine (vigil relay): say so, then show the service it forwards to.
  const first = await call<Health | { relay: true; to: string; service: string }>(r, 'GET', '/health');
  if ('relay' in first && first.relay) {
    return `vigil relay at ${r.url}: forwarding the hooks' events to ${first.to} (${first.service})\n${await statusText({ ...r, url: first.to }, env)}`;
  }
  const h = first as Health;
  const [rows, alerts, deliveries] = await Promise.all([
    call<Row[]>(r, 'GET', '/sessions?limit=10000'),
    call<{ dedup_key: string; severity: string; title: string; updated_at: number }[]>(r, 'GET', '/alerts'),
    call<{ at: number; channel: string; outcome: string; reason?: string; title: string; test?: boolean }[]>(
      r,
      'GET',
      '/deliveries?limit=200',
    ),
  ]);
  let out = `vigil ${h.version} at ${r.url}: ${h.ok ? 'ok' : 'DEGRADED'} (backend ${h.backend}, redis ${h.redis}, mode ${h.mode}, queue ${h.queue_depth ?? '-'})\n`;
  out += `watchdog: ${h.watchdog ? `${h.watchdog.result.status}, last tick ${ago(h.watchdog.last_tick_at)} ago` : 'never reported'}\n`;
  out += `\nagents\n${await agentsText(installers, h.sensors ?? [], env, ago)}`;
  out += '\nchannels\n';
  for (const c of h.channels) {
    const last = c.last_delivery ? `; last ${c.last_delivery.outcome} ${ago(c.last_delivery.at)} ago` : '';
    out += `  ${channelLine(c)}${last}\n`;
  }
  if (!h.channels.length) out += '  (none: alerts go nowhere)\n';
  if (h.knobs.length) {
    out += '\nknobs not at their default\n';
    for (const k of h.knobs) out += `  ${sourceLine(k)}\n`;
  }
  const n = (v: string) => rows.filter((x) => x.verdict === v).length;
  out += `\nsessions: ${rows.length} (${n('looping')} looping, ${n('stalling')} stalling, ${n('ok')} ok)\n`;
  const flagged = sortRows(rows).filter((x) => x.verdict !== 'ok');
  if (flagged.length) out += sessionsTable(flagged.slice(0, 10), flagged.length).replace(/^/gm, '  ');
  out += `\nopen alerts: ${alerts.length}\n`;
  if (alerts.length) {
    out += table(
      ['SEVERITY', 'SINCE', 'INCIDENT', 'TITLE'],
      alerts.slice(0, 10).map((a) => [a.severity, when(a.updated_at), cut(a.dedup_key, 40), cut(a.title, 60)]),
    ).replace(/^/gm, '  ');
  }
  const failed = deliveries.filter((d) => d.outcome === 'failed').slice(0, 5);
  out += `\nrecent failed deliveries: ${failed.length}\n`;
  if (failed.length) {
    out += table(
      ['AT', 'CHANNEL', 'TITLE', 'REASON'],
      failed.map((d) => [when(d.at), d.channel, cut(`${d.test ? '[test] ' : ''}${d.title}`, 40), cut(d.reason, 80)]),
    ).replace(/^/gm, '  ');
  }
  return out;
}
