import { createRequire } from 'node:module';
import { SEVERITIES } from '../alert.ts';
import type { Logger } from '../logger.ts';
import { ADMIT_FN, admitReply, OUTBOX_KEY, RedisStore, storeError } from '../store/redis.ts';
import type { AdmitRequest, AdmitResult, Store } from '../store/store.ts';
import { UnitStore } from '../unit.ts';
import { BullQueue, type PreparedAdd } from './bullmq-queue.ts';
import type { DeliverJob } from './deliverer.ts';
import type { AlertQueue } from './queue.ts';

// The notifier's way from an outbox entry to enqueued jobs in one Redis round trip
// (docs/development.md, "The notifier's commit"): the incident's check, every channel's
// gate, the admitted channels' jobs and the outbox entry's deletion run as one Lua
// script. The gate is the store's own Lua function (core/store/redis.ts); the job's add
// is BullMQ's own script, with the keys and arguments BullMQ builds for it
// (BullQueue.prepare), run as a function inside this one. Nothing here spells BullMQ's
// key layout.

/** BullMQ's script for a plain job (no delay, priority or parent), by its name in BullMQ's script index. */
const BULL_ADD = 'addStandardJob';

/** One channel's part of a commit: its gate, and the job to add for each state the gate may answer. */
export interface CommitChannel {
  admit: AdmitRequest;
  /** One per state the channel may get the transition as (`job.alert.state`). */
  jobs: DeliverJob[];
}

export type CommitChannelResult =
  | { gate: Extract<AdmitResult, { ok: false }> }
  | { gate: Extract<AdmitResult, { ok: true }>; job: DeliverJob; duplicate: boolean };

/** The fast path cannot run this commit (nothing was written that the classic path would not redo). */
export class CommitUnsupported extends Error {}

type CommitReply = [3] | [1, [number, string, number, number?, number?][], number?];

// KEYS[1] = the incident's handed mark (the last seq handed to every channel), KEYS[2] =
// the unit outbox's stream; ARGV[1] = the transition's seq, ARGV[2] = channels, ARGV[3] =
// the gate's key count (its marks and one rate set per severity), ARGV[4] = the mark's
// ttl, ARGV[5] = the transition's outbox entry id ('' for none: deleted with the jobs, so
// an entry is gone exactly when its jobs exist). Then per channel:
// KEYS = the gate's keys, then per job the job's key and BullMQ's keys; ARGV = the gate's
// 10 args, the number of jobs, then per job its state, BullMQ's key count and arg count,
// and BullMQ's args. Transitions go out in their order: one whose predecessor was not
// handed yet answers {3} (it waits in the outbox); one handed already answers {1, {}, 1}
// (its entry deleted too).
// Every gate runs first; a gate
// that answers a state no job was prepared for stops the script before any job is added
// (the stage-by-stage path redoes it: the gates answer the same transition as they did).
function commitScript(bullAdd: string): string {
  return `${ADMIT_FN}
local function bullAdd(KEYS, ARGV)
${bullAdd}
end
local handed = tonumber(redis.call('GET', KEYS[1]) or '0')
local function done() if ARGV[5] ~= '' then redis.call('XDEL', KEYS[2], ARGV[5]) end end
if handed >= tonumber(ARGV[1]) then done() return {1, {}, 1} end
if handed < tonumber(ARGV[1]) - 1 then return {3} end
local ki, ai, gk = 3, 6, tonumber(ARGV[3])
local plan, out = {}, {}
for c = 1, tonumber(ARGV[2]) do
  local g = admitStep({unpack(KEYS, ki, ki + gk - 1)}, {unpack(ARGV, ai, ai + 9)})
  ki, ai = ki + gk, ai + 10
  local nj = tonumber(ARGV[ai])
  ai = ai + 1
  local pick
  for j = 1, nj do
    local as, nk, na = ARGV[ai], tonumber(ARGV[ai + 1]), tonumber(ARGV[ai + 2])
    if g[1] == 1 and g[2] == as and not pick then
      pick = {j, KEYS[ki], {unpack(KEYS, ki + 1, ki + nk)}, {unpack(ARGV, ai + 3, ai + 2 + na)}}
    end
    ki, ai = ki + 1 + nk, ai + 3 + na
  end
  if g[1] == 1 and not pick then return redis.error_reply('VIGILCOMMIT no job prepared for ' .. tostring(g[2])) end
  plan[c], out[c] = pick, {g[1], g[2], g[3] or 0}
end
for c, pick in pairs(plan) do
  out[c][4] = redis.call('EXISTS', pick[2])
  out[c][5] = pick[1]
  bullAdd(pick[3], pick[4])
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[4])
done()
return {1, out}`;
}

type Client = {
  vigilCommit(...numKeysThenKeysThenArgs: (string | number | Buffer)[]): Promise<CommitReply>;
  defineCommand(name: string, def: { lua: string }): void;
};

export class RedisCommit {
  private constructor(
    private readonly store: RedisStore,
    private readonly queue: BullQueue,
    private readonly addKeys: number,
  ) {}

  /**
   * The commit for a store and queue on one Redis (the service's setup), or undefined
   * when they are not, or BullMQ's add script cannot be found (the notifier then takes
   * the classic three steps, which keep every guarantee too).
   */
  static for(given: Store, queue: AlertQueue, logger: Logger): RedisCommit | undefined {
    const store = given instanceof UnitStore ? given.base : given;
    if (!(store instanceof RedisStore) || !(queue instanceof BullQueue) || store.url !== queue.url) return undefined;
    try {
      const scripts = createRequire(import.meta.url)('bullmq/dist/cjs/scripts/index.js') as Record<
        string,
        { name?: string; content?: string; keys?: number }
      >;
      const add = Object.values(scripts).find((s) => s?.name === BULL_ADD);
      if (!add?.content || !add.keys) throw new Error(`BullMQ has no ${BULL_ADD} script`);
      (store.client as unknown as Client).defineCommand('vigilCommit', { lua: commitScript(add.content) });
      return new RedisCommit(store, queue, add.keys);
    } catch (err) {
      logger.warn(
        { err: (err as Error).message },
        'notifier commit in one round trip unavailable; three steps instead',
      );
      return undefined;
    }
  }

  /**
   * Runs the gates of a transition's channels and adds the admitted jobs in one script;
   * 'waiting' when the incident's previous transition was not handed to the channels yet,
   * 'handed' when this one was already. Unless it waits, the script also deletes the
   * transition's outbox entry `outboxId` (when given): its delivery is done.
   */
  async run(
    handedKey: string,
    seq: number,
    ttlMs: number,
    channels: CommitChannel[],
    outboxId = '',
  ): Promise<CommitChannelResult[] | 'waiting' | 'handed'> {
    const client = this.store.client as unknown as Client;
    const ks: string[] = [this.store.redisKey(handedKey), this.store.redisKey(OUTBOX_KEY)];
    const args: (string | number | Buffer)[] = [seq, channels.length, 1 + SEVERITIES.length, ttlMs, outboxId];
    for (const c of channels) {
      const gate = this.store.admitCall(c.admit);
      if (gate.keys.length !== 1 + SEVERITIES.length || gate.args.length !== 10)
        throw new CommitUnsupported('the gate takes other keys or arguments than this script passes');
      ks.push(...gate.keys);
      args.push(...gate.args, c.jobs.length);
      for (const job of c.jobs) {
        const add = await this.prepared(job);
        ks.push(add.jobKey, ...(add.args.slice(0, this.addKeys) as string[]));
        args.push(job.alert.state, this.addKeys, add.args.length - this.addKeys, ...add.args.slice(this.addKeys));
      }
    }
    let reply: CommitReply;
    try {
      reply = await client.vigilCommit(ks.length, ...ks, ...args);
    } catch (err) {
      if (/VIGILCOMMIT|NOSCRIPT|ERR Error (running|compiling) script|user_script/.test((err as Error).message ?? ''))
        throw new CommitUnsupported((err as Error).message);
      throw storeError(err);
    }
    if (reply[0] === 3) return 'waiting';
    if (reply[2] === 1) return 'handed';
    const out = reply[1] as [number, string, number, number?, number?][];
    return channels.map((c, i): CommitChannelResult => {
      const [ok, why, n, existed, pick] = out[i];
      const gate = admitReply([ok, why, n]);
      if (!gate.ok) return { gate };
      return { gate, job: c.jobs[(pick ?? 1) - 1], duplicate: existed === 1 };
    });
  }

  private async prepared(job: DeliverJob): Promise<PreparedAdd> {
    const add = await this.queue.prepare(job);
    if (add.script.split(':')[0] !== BULL_ADD || add.args.length <= this.addKeys)
      throw new CommitUnsupported(`BullMQ adds this job with ${add.script}, not ${BULL_ADD}`);
    return add;
  }
}
