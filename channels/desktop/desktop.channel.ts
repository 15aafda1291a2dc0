import { execFile } from 'node:child_process';
import { accessSync, constants, statSync } from 'node:fs';
import { delimiter, join } from 'node:path';
import { inject, injectable } from 'tsyringe';
import type { Alert } from '../../core/alert.ts';
import type { Channel } from '../../core/contracts.ts';
import { DeliveryError } from '../../core/errors.ts';
import { renderLine, renderTitle, truncate } from '../../core/render.ts';
import { TOKENS } from '../../core/tokens.ts';
import type { DesktopOptions } from './desktop.options.ts';

const URGENCY = { info: 'low', warning: 'normal', critical: 'critical' } as const;

/**
 * notify-send (libnotify). It needs the session D-Bus: when DBUS_SESSION_BUS_ADDRESS
 * is unset (a systemd user service, cron) use /run/user/<uid>/bus if that socket
 * exists. A missing binary or a nonzero exit is a failed delivery, never a crash.
 */
@injectable()
export class DesktopChannel implements Channel {
  readonly type = 'desktop';

  constructor(
    @inject(TOKENS.PluginOptions) private readonly opts: DesktopOptions,
    @inject(TOKENS.PluginName) readonly name: string,
    @inject(TOKENS.Env) private readonly env: NodeJS.ProcessEnv,
  ) {}

  ready(): string | undefined {
    if (!onPath(this.opts.command, this.env.PATH)) {
      return this.opts.command.includes('/')
        ? `${this.opts.command} is not an executable file`
        : `${this.opts.command} not found on PATH`;
    }
    if (!busEnv(this.env).DBUS_SESSION_BUS_ADDRESS) {
      return 'no D-Bus session bus (DBUS_SESSION_BUS_ADDRESS unset and no $XDG_RUNTIME_DIR/bus): a headless machine?';
    }
    return undefined;
  }

  send(alert: Alert, signal: AbortSignal): Promise<void> {
    const args = [
      `--app-name=${this.opts.app_name}`,
      `--urgency=${URGENCY[alert.severity]}`,
      '--',
      truncate(renderTitle(alert), 120),
      // The title carries a test alert's TEST mark; the body does not repeat it.
      truncate(renderLine(alert, { mark: false }), 400),
    ];
    return new Promise((resolve, reject) => {
      execFile(this.opts.command, args, { env: busEnv(this.env), signal, timeout: 0 }, (err, _out, stderr) => {
        if (!err) return resolve();
        const e = err as NodeJS.ErrnoException & { code?: string | number };
        if (e.code === 'ENOENT') {
          return reject(new DeliveryError(`${this.opts.command} not found on PATH`, { retryable: false }));
        }
        if (e.name === 'AbortError') return reject(new DeliveryError('notify-send aborted', { retryable: true }));
        const why = String(stderr).trim().split('\n')[0] || `exit ${e.code}`;
        reject(new DeliveryError(`notify-send failed: ${why.slice(0, 200)}`, { retryable: true }));
      });
    });
  }
}

/** Whether `command` (a name looked up on PATH, or a path) is an executable file. */
function onPath(command: string, path: string | undefined): boolean {
  const exec = (p: string) => {
    try {
      accessSync(p, constants.X_OK);
      return statSync(p).isFile();
    } catch {
      return false;
    }
  };
  if (command.includes('/')) return exec(command);
  return (path ?? '').split(delimiter).some((d) => d && exec(join(d, command)));
}

/** The environment for notify-send, with the session bus filled in when it can be found. */
export function busEnv(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  if (env.DBUS_SESSION_BUS_ADDRESS) return env;
  const uid = process.getuid?.();
  const candidates = [env.XDG_RUNTIME_DIR && `${env.XDG_RUNTIME_DIR}/bus`, uid !== undefined && `/run/user/${uid}/bus`];
  for (const p of candidates) {
    if (!p) continue;
    try {
      if (statSync(p).isSocket()) return { ...env, DBUS_SESSION_BUS_ADDRESS: `unix:path=${p}` };
    } catch {
      // not there: try the next
    }
  }
  return env;
}
