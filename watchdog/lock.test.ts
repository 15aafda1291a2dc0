import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { tempDir } from '../test/helpers/index.ts';
import { acquireLock, procStart } from './lock.ts';

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});
function lockPath(): string {
  const d = tempDir('vigil-wd-lock');
  dirs.push(d);
  return join(d, 'state', 'watchdog.lock');
}

/** The pid of a process that has exited (and been reaped). */
function deadPid(): number {
  const r = spawnSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))'], { encoding: 'utf8' });
  return Number(r.stdout);
}

describe('watchdog lock', () => {
  it('creates the lock with pid and start time, and release removes it', () => {
    const p = lockPath();
    const l = acquireLock(p, 1_000);
    expect(l.acquired).toBe(true);
    const info = JSON.parse(readFileSync(p, 'utf8'));
    expect(info).toMatchObject({ pid: process.pid, started_at: 1_000 });
    if (procStart(process.pid) !== undefined) expect(info.proc_start).toBe(procStart(process.pid));
    if (l.acquired) l.release();
    expect(existsSync(p)).toBe(false);
  });

  it('a live holder keeps it: the second tick is told who holds it', () => {
    const p = lockPath();
    const first = acquireLock(p);
    const second = acquireLock(p);
    expect(first.acquired).toBe(true);
    expect(second).toEqual({ acquired: false, holder: expect.objectContaining({ pid: process.pid }) });
    if (first.acquired) first.release();
    expect(acquireLock(p).acquired).toBe(true);
  });

  it('takes over a stale lock whose pid is dead', () => {
    const p = lockPath();
    acquireLock(p); // creates the directory
    const pid = deadPid();
    writeFileSync(p, JSON.stringify({ pid, started_at: 5 }));
    const l = acquireLock(p, 10);
    expect(l.acquired).toBe(true);
    expect(JSON.parse(readFileSync(p, 'utf8'))).toMatchObject({ pid: process.pid, started_at: 10 });
  });

  it('takes over a lock whose pid now belongs to another process (start time differs)', () => {
    const me = procStart(process.pid);
    if (me === undefined) return; // not Linux: pid liveness is all there is
    const p = lockPath();
    acquireLock(p);
    writeFileSync(p, JSON.stringify({ pid: process.pid, started_at: 5, proc_start: me + 12345 }));
    expect(acquireLock(p).acquired).toBe(true);
  });

  it('a junk lock (holder killed before it wrote) is held for a grace period, then taken over', () => {
    const p = lockPath();
    acquireLock(p);
    writeFileSync(p, '');
    expect(acquireLock(p, Date.now(), 60_000)).toEqual({ acquired: false, holder: null });
    const old = (Date.now() - 120_000) / 1000;
    utimesSync(p, old, old);
    expect(acquireLock(p, Date.now(), 60_000).acquired).toBe(true);
  });

  it('release never removes a lock another tick took over', () => {
    const p = lockPath();
    const l = acquireLock(p, 1);
    writeFileSync(p, JSON.stringify({ pid: process.pid, started_at: 2 }));
    if (l.acquired) l.release();
    expect(JSON.parse(readFileSync(p, 'utf8'))).toMatchObject({ started_at: 2 });
  });
});
