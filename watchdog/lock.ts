import { closeSync, mkdirSync, openSync, readFileSync, statSync, unlinkSync, writeSync } from 'node:fs';
import { dirname } from 'node:path';

// One tick at a time: a lock file created with O_EXCL holding {pid, started_at,
// proc_start}. A tick that finds a live holder skips instead of stacking behind it. A
// lock whose pid is dead (the tick crashed or was killed) is stale and taken over;
// proc_start (Linux: field 22 of /proc/<pid>/stat, in clock ticks since boot) tells a
// reused pid from the original holder.
//
// Takeover: the stale file is re-read right before it is removed and only removed if it
// is still the one judged stale, then the O_EXCL create is retried once. Two ticks
// racing for the same stale lock in that microsecond window could both remove it; the
// systemd timer never starts a oneshot unit twice, so only manual runs could meet it.

export interface LockInfo {
  pid: number;
  started_at: number;
  proc_start?: number;
}

export type LockResult =
  | { acquired: true; info: LockInfo; release(): void }
  | { acquired: false; holder: LockInfo | null };

/** Field 22 of /proc/<pid>/stat (start time in clock ticks since boot), or undefined off Linux. */
export function procStart(pid: number): number | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // the command name (field 2) may hold spaces and parentheses: count from the last ')'
    const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const v = Number(rest[19]);
    return Number.isFinite(v) ? v : undefined;
  } catch {
    return undefined;
  }
}

export function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    // EPERM: it exists but belongs to someone else
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

function readLock(path: string): { raw: string; info: LockInfo | null } | null {
  let raw: string;
  try {
    raw = readFileSync(path, 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw e;
  }
  try {
    const o = JSON.parse(raw) as Partial<LockInfo>;
    if (typeof o.pid === 'number' && Number.isInteger(o.pid) && o.pid > 0 && typeof o.started_at === 'number') {
      return {
        raw,
        info: {
          pid: o.pid,
          started_at: o.started_at,
          ...(typeof o.proc_start === 'number' ? { proc_start: o.proc_start } : {}),
        },
      };
    }
  } catch {
    // junk: judged below
  }
  return { raw, info: null };
}

/** A holder that no longer runs: dead pid, or the pid now belongs to another process. */
export function isStale(info: LockInfo): boolean {
  if (!pidAlive(info.pid)) return true;
  if (info.proc_start === undefined) return false;
  const cur = procStart(info.pid);
  return cur !== undefined && cur !== info.proc_start;
}

function create(path: string, info: LockInfo): boolean {
  let fd: number;
  try {
    fd = openSync(path, 'wx', 0o600);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'EEXIST') return false;
    throw e;
  }
  try {
    writeSync(fd, JSON.stringify(info));
  } finally {
    closeSync(fd);
  }
  return true;
}

/**
 * Take the lock or report its holder. A lock file that is empty or unreadable JSON
 * (a holder killed between create and write) counts as stale once it is older than
 * `junkGraceMs` by its own mtime; in that window it counts as held.
 */
export function acquireLock(path: string, now = Date.now(), junkGraceMs = 60_000): LockResult {
  mkdirSync(dirname(path), { recursive: true });
  const info: LockInfo = { pid: process.pid, started_at: now };
  const ps = procStart(process.pid);
  if (ps !== undefined) info.proc_start = ps;
  const mine = (): LockResult => ({
    acquired: true,
    info,
    release() {
      // only our own lock: never remove a lock another tick took over
      const cur = readLock(path);
      if (cur?.info && cur.info.pid === info.pid && cur.info.started_at === info.started_at) {
        try {
          unlinkSync(path);
        } catch {
          // already gone
        }
      }
    },
  });
  if (create(path, info)) return mine();
  const held = readLock(path);
  if (held === null) return create(path, info) ? mine() : { acquired: false, holder: null };
  const stale = held.info === null ? ageMs(path, now) >= junkGraceMs : isStale(held.info);
  if (!stale) return { acquired: false, holder: held.info };
  const again = readLock(path);
  if (again !== null && again.raw !== held.raw) return { acquired: false, holder: again.info };
  try {
    unlinkSync(path);
  } catch {
    // someone else removed it first
  }
  return create(path, info) ? mine() : { acquired: false, holder: readLock(path)?.info ?? null };
}

function ageMs(path: string, now: number): number {
  try {
    return now - statSync(path).mtimeMs;
  } catch {
    return Number.POSITIVE_INFINITY;
  }
}
