import { createRequire } from 'node:module';
import { SEVERITIES } from '../alert.ts';
import type { Logger } from '../logger.ts';
import { ADMIT_FN, admitReply, OUTBOX_KEY, RedisStore, storeError } from '../store/redis.ts';
import type { AdmitRequest, AdmitResult, Store } from '../store/store.ts';
import { type OutboxStep, UnitStore } from '../unit.ts';
import { BullQueue, type PreparedAdd } from './bullmq-queue.ts';
import type { DeliverJob } from './deliverer.ts';
import type { AlertQueue } from './queue.ts';

// The notifier's way from an outbox entry to enqueued jobs in one Redis round trip
// (docs/development.md, "The notifier's commit"): the incident's check, every channel's
// gate, the admitted channels' jobs and the outbox entry's deletion run as one Lua
// script. The gate is the store's own Lua function (core/store/redis.ts); the job's add
// is BullMQ's own script, with the keys and arguments BullMQ builds for it
// (BullQueue.prepare), run as a function inside this one. Nothing here spells BullMQ's
// key layout. The same step runs inside the commit of the unit that decided the
// transition (step()), when the notifier can plan it then: the alert's jobs then exist
// in the round trip that commits the incident.

/** The commit's name as a step of a unit's commit (RedisStore.unitStep). */
const COMMIT_STEP = 'notifier-commit';

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

type CommitReply = [3] | [4, string | Buffer] | [1, [number, string | Buffer, number, number?, number?][], number?];

/** The commit step's Lua function, as the unit commit script and this one's own call it. */
const STEP_FN = 'vigilCommitStep';

// The step: STEP_FN(KEYS, ARGV, entry). KEYS[1] = the incident's handed mark (the last
// seq handed to every channel), KEYS[2] = the unit outbox's stream; ARGV[1] = the
// transition's seq, ARGV[2] = channels, ARGV[3] = the gate's key count (its marks and
// one rate set per severity), ARGV[4] = the mark's ttl; `entry` = the transition's
// outbox entry id ('' for none: deleted with the jobs, so an entry is gone exactly when
// its jobs exist). Then per channel:
// KEYS = the gate's keys, then per job the job's key and BullMQ's keys; ARGV = the gate's
// 10 args, the number of jobs, then per job its state, BullMQ's key count and arg count,
// and BullMQ's args. Transitions go out in their order: one whose predecessor was not
// handed yet answers {3} (it waits in the outbox); one handed already answers {1, {}, 1}
// (its entry deleted too).
// Every gate runs first; a gate that answers a state no job was prepared for answers {4,
// why} before any job is added (the stage-by-stage path redoes it: the gates answer the
// same transition as they did). It answers a value, never an error, except when BullMQ's
// add itself fails: the job's hash it may have stored is deleted first (so a retry adds
// the job again instead of calling it a duplicate), and the error stops the commit (a
// unit's commit runs the step under pcall, so the unit's writes and entry stand).
function commitStep(bullAdd: string): string {
  return `${ADMIT_FN}
local function bullAdd(KEYS, ARGV)
${bullAdd}
end
local function ${STEP_FN}(KEYS, ARGV, entry)
local handed = tonumber(redis.call('GET', KEYS[1]) or '0')
local function done() if entry ~= '' then redis.call('XDEL', KEYS[2], entry) end end
if handed >= tonumber(ARGV[1]) then done() return {1, {}, 1} end
if handed < tonumber(ARGV[1]) - 1 then return {3} end
local ki, ai, gk = 3, 5, tonumber(ARGV[3])
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
  if g[1] == 1 and not pick then return {4, 'no job prepared for ' .. tostring(g[2])} end
  plan[c], out[c] = pick, {g[1], g[2], g[3] or 0}
end
for c, pick in pairs(plan) do
  out[c][4] = redis.call('EXISTS', pick[2])
  out[c][5] = pick[1]
  local ok, err = pcall(bullAdd, pick[3], pick[4])
  if not ok then
    -- BullMQ stores the job's hash before it queues the id: a hash left by an add that
    -- failed would make every retry a 'duplicate', and the alert would never go out.
    if out[c][4] == 0 then redis.call('DEL', pick[2]) end
    error(err)
  end
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[4])
done()
return {1, out}
end`;
}

type Client = {
  vigilCommit(...numKeysThenKeysThenArgs: (string | number | Buffer)[]): Promise<CommitReply>;
  defineCommand(name: string, def: { lua: string }): void;
};

/** A commit's keys and arguments, as its script (or a unit's commit, as a step) takes them. */
export interface CommitCall {
  keys: string[];
  args: (string | number | Buffer)[];
}

/** What a commit answered. */
export type CommitResult = CommitChannelResult[] | 'waiting' | 'handed';

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
      const lua = commitStep(add.content);
      (store.client as unknown as Client).defineCommand('vigilCommit', {
        lua: `${lua}\nreturn ${STEP_FN}(KEYS, {unpack(ARGV, 2)}, ARGV[1])`,
      });
      store.unitStep(COMMIT_STEP, lua, STEP_FN);
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
  ): Promise<CommitResult> {
    const call = await this.call(handedKey, seq, ttlMs, channels);
    let reply: CommitReply;
    try {
      reply = await (this.store.client as unknown as Client).vigilCommit(
        call.keys.length,
        ...call.keys,
        outboxId,
        ...call.args,
      );
    } catch (err) {
      if (/NOSCRIPT|ERR Error (running|compiling) script|user_script/.test((err as Error).message ?? ''))
        throw new CommitUnsupported((err as Error).message);
      throw storeError(err);
    }
    return this.answer(reply, channels);
  }

  /**
   * The same commit as a step of the unit that writes the transition's outbox entry
   * (Units.emit): it then runs in that unit's commit script, and its reply is read by
   * answer(). The script passes the entry's id.
   */
  async step(handedKey: string, seq: number, ttlMs: number, channels: CommitChannel[]): Promise<OutboxStep> {
    return { name: COMMIT_STEP, ...(await this.call(handedKey, seq, ttlMs, channels)) };
  }

  /** The keys and arguments of a commit (BullMQ builds each job's add). */
  private async call(handedKey: string, seq: number, ttlMs: number, channels: CommitChannel[]): Promise<CommitCall> {
    const keys: string[] = [this.store.redisKey(handedKey), this.store.redisKey(OUTBOX_KEY)];
    const args: (string | number | Buffer)[] = [seq, channels.length, 1 + SEVERITIES.length, ttlMs];
    for (const c of channels) {
      const gate = this.store.admitCall(c.admit);
      if (gate.keys.length !== 1 + SEVERITIES.length || gate.args.length !== 10)
        throw new CommitUnsupported('the gate takes other keys or arguments than this script passes');
      keys.push(...gate.keys);
      args.push(...gate.args, c.jobs.length);
      for (const job of c.jobs) {
        const add = await this.prepared(job);
        keys.push(add.jobKey, ...(add.args.slice(0, this.addKeys) as string[]));
        args.push(job.alert.state, this.addKeys, add.args.length - this.addKeys, ...add.args.slice(this.addKeys));
      }
    }
    return { keys, args };
  }

  /** A commit's reply (from its own script or a unit's step), per channel; CommitUnsupported when it could not decide. */
  answer(reply: unknown, channels: CommitChannel[]): CommitResult {
    const r = reply as CommitReply;
    if (r[0] === 3) return 'waiting';
    if (r[0] === 4) throw new CommitUnsupported(String(r[1]));
    if (r[0] !== 1) throw new CommitUnsupported(`the commit answered ${String(r[0])}`);
    if (r[2] === 1) return 'handed';
    const out = r[1];
    return channels.map((c, i): CommitChannelResult => {
      const [ok, why, n, existed, pick] = out[i];
      const gate = admitReply([ok, String(why), n]);
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
