import { execFileSync } from 'node:child_process';
import { existsSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { writeAtomic } from '../sensors/shared/hooks-file.ts';

// `vigil relay --install`: `vigil relay` kept running the way the platform keeps a
// user's background program running: a systemd user unit on Linux, a launchd agent on
// macOS. The unit runs this very node and this package's bin/vigil.mjs (absolute paths
// taken at install), so it survives a shell without PATH. The ingestion token, when the
// service has one, is read from ~/.config/vigil/env on Linux (systemd's EnvironmentFile,
// the same file the service's unit reads) and kept in the agent's plist (mode 0600) on
// macOS. Uninstall stops it and removes the file.

export interface RelayUnitOptions {
  to: string;
  port: number;
  home: string;
  env: NodeJS.ProcessEnv;
  platform: NodeJS.Platform;
  /** The node binary and the CLI script the unit runs. */
  node: string;
  script: string;
}

export interface RelayUnit {
  path: string;
  text: string;
  /** The commands that (re)start it now and at every login. */
  start: string[][];
  /** The commands that stop it and forget it. */
  stop: string[][];
  mode?: number;
}

export const SYSTEMD_NAME = 'vigil-relay.service';
export const LAUNCHD_LABEL = 'dev.vigil.relay';

const xmlEscape = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
/** A systemd ExecStart word: quoted when it needs it. */
const sdQuote = (s: string) => (/^[A-Za-z0-9_./:=@%+-]+$/.test(s) ? s : `"${s.replace(/(["\\])/g, '\\$1')}"`);

/** The unit of this platform, or undefined when it has none Vigil knows. */
export function relayUnit(o: RelayUnitOptions): RelayUnit | undefined {
  const args = [o.node, o.script, 'relay', '--to', o.to, '--port', String(o.port)];
  if (o.platform === 'linux') {
    const dir = join(
      o.env.XDG_CONFIG_HOME?.startsWith('/') ? o.env.XDG_CONFIG_HOME : join(o.home, '.config'),
      'systemd',
      'user',
    );
    return {
      path: join(dir, SYSTEMD_NAME),
      text: [
        '# Written by `vigil relay --install`; `vigil relay --uninstall` removes it.',
        '[Unit]',
        'Description=Vigil relay: the local hook endpoint for a Vigil service elsewhere',
        'After=network-online.target',
        '',
        '[Service]',
        'Type=simple',
        '# VIGIL_INGEST_TOKEN, when the service has one',
        'EnvironmentFile=-%h/.config/vigil/env',
        `ExecStart=${args.map(sdQuote).join(' ')}`,
        'Restart=on-failure',
        'RestartSec=2',
        '',
        '[Install]',
        'WantedBy=default.target',
        '',
      ].join('\n'),
      start: [
        ['systemctl', '--user', 'daemon-reload'],
        ['systemctl', '--user', 'enable', '--now', SYSTEMD_NAME],
      ],
      stop: [
        ['systemctl', '--user', 'disable', '--now', SYSTEMD_NAME],
        ['systemctl', '--user', 'daemon-reload'],
      ],
    };
  }
  if (o.platform === 'darwin') {
    const path = join(o.home, 'Library', 'LaunchAgents', `${LAUNCHD_LABEL}.plist`);
    const token = o.env.VIGIL_INGEST_TOKEN;
    return {
      path,
      mode: 0o600,
      text: [
        '<?xml version="1.0" encoding="UTF-8"?>',
        '<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">',
        '<plist version="1.0">',
        '<dict>',
        `  <key>Label</key><string>${LAUNCHD_LABEL}</string>`,
        '  <key>ProgramArguments</key>',
        '  <array>',
        ...args.map((a) => `    <string>${xmlEscape(a)}</string>`),
        '  </array>',
        ...(token
          ? [
              '  <key>EnvironmentVariables</key>',
              `  <dict><key>VIGIL_INGEST_TOKEN</key><string>${xmlEscape(token)}</string></dict>`,
            ]
          : []),
        '  <key>RunAtLoad</key><true/>',
        '  <key>KeepAlive</key><true/>',
        `  <key>StandardErrorPath</key><string>${xmlEscape(join(o.home, 'Library', 'Logs', 'vigil-relay.log'))}</string>`,
        '</dict>',
        '</plist>',
        '',
      ].join('\n'),
      start: [
        ['launchctl', 'unload', path],
        ['launchctl', 'load', '-w', path],
      ],
      stop: [['launchctl', 'unload', '-w', path]],
    };
  }
  return undefined;
}

/** Runs `cmds` in order; the first that fails (or is missing) stops there and is reported. */
function run(cmds: string[][], tolerate: (i: number) => boolean): { ok: boolean; failed?: string } {
  for (const [i, c] of cmds.entries()) {
    try {
      execFileSync(c[0], c.slice(1), { stdio: 'pipe', timeout: 15_000 });
    } catch (e) {
      if (tolerate(i)) continue;
      const msg = String((e as { stderr?: Buffer }).stderr ?? (e as Error).message)
        .trim()
        .split('\n')[0];
      return { ok: false, failed: `${c.join(' ')}: ${msg}` };
    }
  }
  return { ok: true };
}

/** Writes the unit and starts it; what happened, for the CLI to print. */
export function installRelayUnit(u: RelayUnit, o: { start: boolean }): string[] {
  writeAtomic(u.path, u.text, u.mode);
  const out = [`wrote ${u.path}`];
  if (!o.start) return [...out, `start it: ${u.start.map((c) => c.join(' ')).join(' && ')}`];
  // launchd: unloading a job that is not loaded yet fails, harmlessly
  const r = run(u.start, (i) => u.start[i][0] === 'launchctl' && u.start[i][1] === 'unload');
  return r.ok
    ? [...out, `started: ${u.start.at(-1)?.join(' ')}`]
    : [...out, `could not start it (${r.failed}); start it yourself: ${u.start.map((c) => c.join(' ')).join(' && ')}`];
}

/** Stops the unit and removes its file; what happened. */
export function uninstallRelayUnit(u: RelayUnit): string[] {
  if (!existsSync(u.path)) return [`nothing to remove: ${u.path} does not exist`];
  const r = run(u.stop, () => true);
  rmSync(u.path, { force: true });
  return [`removed ${u.path}${r.ok ? '' : ` (stopping it: ${r.failed})`}`];
}
