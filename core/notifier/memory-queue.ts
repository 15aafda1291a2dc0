import { existsSync, mkdirSync, readFileSync, renameSync, unlinkSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { z } from 'zod';
import { ALERT_STATES, SeveritySchema } from '../alert.ts';
import type { Logger } from '../logger.ts';
import type { Deliverer, DeliverJob } from './deliverer.ts';
import type { AlertQueue, QueueTiming } from './queue.ts';

/** How long a clean stop waits for cut deliveries to come back after the drain (they abort at once). */
const CUT_MS = 2_000;

/** The spool file: what a clean stop could not deliver, read back (and deleted) by the next start. */
const SpoolSchema = z.object({
  version: z.literal(1),
  saved_at: z.number(),
  jobs: z
    .array(
      z.object({
        attempt: z.number().int().min(1),
        job: z.object({
          id: z.string().min(1),
          channel: z.string().min(1),
          alert: z
            .object({
              dedup_key: z.string().min(1),
              severity: SeveritySchema,
              state: z.enum(ALERT_STATES),
              title: z.string(),
              summary: z.string(),
              details: z.string(),
              source: z.string(),
              at: z.number(),
              seq: z.number(),
              test: z.boolean().optional(),
            })
            .loose(),
        }),
      }),
    )
    .max(100_000),
});

interface Lane {
  pending: { job: DeliverJob; attempt: number }[];
  active: number;
}

/**
 * In-process queue for the embedded default: the BullMQ contract in one process. A
 * job waiting for its retry sits on a timer, not in its lane, so the channel's other
 * alerts go on. Not durable across a crash. On a clean stop it drains what it can
 * within the drain timeout, then cuts the deliveries still running and writes every
 * alert not delivered to the spool file (`spoolFile`), which the next start delivers;
 * without a spool file (or when it cannot be written) each is logged as lost.
 */
export class MemoryQueue implements AlertQueue {
  readonly kind = 'memory' as const;
  private readonly lanes = new Map<string, Lane>();
  /** Ids already accepted (bounded, oldest forgotten first), the in-process dedup. */
  private readonly seen = new Set<string>();
  private readonly waiting = new Map<NodeJS.Timeout, { job: DeliverJob; attempt: number }>();
  private readonly running = new Set<DeliverJob>();
  private deliverer?: Deliverer;
  private inflight = 0;
  private draining = false;
  private closed = false;
  private readonly waiters: (() => void)[] = [];
  /** Cuts the deliveries still running when the drain times out. */
  private readonly cut = new AbortController();
  /** Deliveries cut or retried during the drain, with their next attempt: spooled. */
  private readonly unsent: { job: DeliverJob; attempt: number }[] = [];
  private readonly runs = new Set<Promise<void>>();
  /** Ids read from the spool at start and not finished yet (/health). */
  private readonly restored = new Set<string>();

  constructor(
    private readonly timing: QueueTiming,
    private readonly logger?: Logger,
    private readonly seenCap = 10_000,
  ) {}

  async enqueue(job: DeliverJob): Promise<boolean> {
    if (this.seen.has(job.id)) return false;
    this.seen.add(job.id);
    if (this.seen.size > this.seenCap) this.seen.delete(this.seen.values().next().value as string);
    this.inflight++;
    this.push(job, 1);
    return true;
  }

  async start(deliverer: Deliverer): Promise<void> {
    this.deliverer = deliverer;
    this.restore();
    for (const name of this.lanes.keys()) this.pump(name);
  }

  /** Alerts the last clean stop spooled that are not delivered (or failed) yet. */
  spooled(): number {
    return this.restored.size;
  }

  async depth(): Promise<number> {
    return this.inflight;
  }

  async oldestAt(): Promise<number | undefined> {
    let min: number | undefined;
    const see = (j: DeliverJob) => {
      if (min === undefined || j.alert.at < min) min = j.alert.at;
    };
    for (const l of this.lanes.values()) for (const p of l.pending) see(p.job);
    for (const w of this.waiting.values()) see(w.job);
    for (const j of this.running) see(j);
    return min;
  }

  async idle(timeoutMs = 30_000): Promise<boolean> {
    const done =
      this.inflight === 0 ||
      (await Promise.race([
        new Promise<boolean>((r) => this.waiters.push(() => r(true))),
        sleep(timeoutMs, false, { ref: false }),
      ]));
    // The last deliveries' log rows too.
    if (done) await this.deliverer?.settled();
    return done;
  }

  /**
   * Stops taking new work and drains: jobs waiting for a retry get their attempt now,
   * everything runs until done or `drain_timeout`. Then deliveries still running are
   * cut (their row says retried) and every alert not delivered goes to the spool file,
   * or, without one, is logged one line per alert, so nothing is lost silently.
   */
  async close(): Promise<void> {
    if (this.draining) return;
    this.draining = true;
    for (const [t, w] of this.waiting) {
      clearTimeout(t);
      this.push(w.job, w.attempt);
    }
    this.waiting.clear();
    const drained = await this.idle(this.timing.drainTimeoutMs ?? 0);
    this.closed = true;
    if (!drained && this.runs.size) {
      this.cut.abort();
      await Promise.race([Promise.allSettled([...this.runs]), sleep(CUT_MS, undefined, { ref: false })]);
    }
    const left = [...this.unsent.splice(0)];
    for (const lane of this.lanes.values()) left.push(...lane.pending.splice(0));
    if (left.length) this.spool(left);
  }

  /** Writes what is left to the spool file (atomically: a temp file renamed), or logs each alert as lost. */
  private spool(left: { job: DeliverJob; attempt: number }[]): void {
    const file = this.timing.spoolFile;
    if (file) {
      try {
        mkdirSync(dirname(file), { recursive: true, mode: 0o700 });
        const tmp = `${file}.${process.pid}.tmp`;
        writeFileSync(tmp, JSON.stringify({ version: 1, saved_at: Date.now(), jobs: left }), { mode: 0o600 });
        renameSync(tmp, file);
        this.logger?.warn(
          { spooled: left.length, file },
          `${left.length} alert${left.length === 1 ? '' : 's'} not delivered before shutdown, spooled: delivered at the next start`,
        );
        return;
      } catch (e) {
        this.logger?.error({ err: (e as Error).message, file }, 'cannot write the alert spool file');
      }
    }
    for (const { job } of left) this.lost(job);
  }

  /** Reads the spool file a clean stop left (and deletes it): its alerts are queued first. */
  private restore(): void {
    const file = this.timing.spoolFile;
    if (!file || !existsSync(file)) return;
    let jobs: { job: DeliverJob; attempt: number }[];
    try {
      const parsed = SpoolSchema.safeParse(JSON.parse(readFileSync(file, 'utf8')));
      unlinkSync(file);
      if (!parsed.success) {
        this.logger?.error(
          { file, err: z.prettifyError(parsed.error).slice(0, 300) },
          'alert spool file unreadable: dropped',
        );
        return;
      }
      jobs = parsed.data.jobs as { job: DeliverJob; attempt: number }[];
    } catch (e) {
      this.logger?.error({ file, err: (e as Error).message }, 'alert spool file unreadable');
      return;
    }
    for (const { job, attempt } of jobs) {
      if (this.seen.has(job.id)) continue;
      this.seen.add(job.id);
      this.restored.add(job.id);
      this.inflight++;
      this.push(job, attempt);
    }
    this.logger?.info({ restored: jobs.length, file }, 'alerts spooled at the last stop: delivering them');
  }

  private lost(job: DeliverJob): void {
    this.logger?.error(
      { channel: job.channel, dedup_key: job.alert.dedup_key, state: job.alert.state, job_id: job.id },
      'alert not delivered before shutdown',
    );
  }

  private push(job: DeliverJob, attempt: number): void {
    this.lane(job.channel).pending.push({ job, attempt });
    this.pump(job.channel);
  }

  private lane(name: string): Lane {
    let l = this.lanes.get(name);
    if (!l) {
      l = { pending: [], active: 0 };
      this.lanes.set(name, l);
    }
    return l;
  }

  private pump(name: string): void {
    const d = this.deliverer;
    const lane = this.lane(name);
    while (d && !this.closed && lane.active < this.timing.concurrency && lane.pending.length) {
      const next = lane.pending.shift()!;
      lane.active++;
      const run: Promise<void> = this.run(d, next.job, next.attempt).finally(() => {
        this.runs.delete(run);
        lane.active--;
        this.pump(name);
      });
      this.runs.add(run);
    }
  }

  private async run(d: Deliverer, job: DeliverJob, attempt: number): Promise<void> {
    this.running.add(job);
    const out = await d
      .attempt(job, attempt, this.cut.signal)
      .catch((e) => ({ ok: false, final: true, reason: (e as Error).message }) as const)
      .finally(() => this.running.delete(job));
    if (!out.ok && !out.final && this.draining) this.unsent.push({ job, attempt: attempt + 1 });
    else if (!out.ok && !out.final) {
      const t = setTimeout(() => {
        this.waiting.delete(t);
        this.push(job, attempt + 1);
      }, out.delayMs);
      t.unref();
      this.waiting.set(t, { job, attempt: attempt + 1 });
      return;
    }
    this.inflight--;
    this.restored.delete(job.id);
    if (this.inflight === 0) for (const w of this.waiters.splice(0)) w();
  }
}
