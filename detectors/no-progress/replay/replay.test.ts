import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { replay as replayCommand } from '../../../cli/replay.ts';
import type { InputReader, LoadedInput } from '../../../core/replay.ts';
import { generateCalibration, toJsonl } from '../../../test/fixtures/calibration.ts';
import { LEVELS, Tracker } from '../judge.ts';
import { defaultKnobs } from '../knobs.ts';
import { detectKind, eachInput, loadInput, parseLine } from './inputs.ts';
import { DEFAULT_SWEEP, replayLoaded, runReplay, runSweep, score, sweepGrid } from './replay.ts';

const EXPORT = join(import.meta.dirname, '../../../test/fixtures/opencode-export');
const tmp = mkdtempSync(join(tmpdir(), 'vigil-replay-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

function io() {
  const out = { stdout: '', stderr: '' };
  return {
    out,
    io: {
      stdout: { write: (s: string) => (out.stdout += s) },
      stderr: { write: (s: string) => (out.stderr += s) },
    },
  };
}

const cal = generateCalibration();
const calFile = join(tmp, 'calibration.jsonl');
writeFileSync(calFile, toJsonl(cal.inputs));

describe('replay of JSONL', () => {
  it('prints the same verdicts as the in-memory judge', async () => {
    const t = new Tracker(defaultKnobs());
    const worst = new Map<string, number>();
    const events = new Map<string, number>();
    const first = new Map<string, number>();
    for (const i of cal.inputs) {
      if (i.type === 'progress') events.set(i.event.session_id, (events.get(i.event.session_id) ?? 0) + 1);
      for (const c of t.apply(i)) {
        const lv = LEVELS.indexOf(c.to);
        worst.set(c.session_id, Math.max(worst.get(c.session_id) ?? 0, lv));
        if (lv > 0 && !first.has(c.session_id))
          first.set(c.session_id, Math.max(0, (events.get(c.session_id) ?? 0) - 1));
      }
    }
    const { out, io: sink } = io();
    expect(await replayCommand({ input: calFile, json: true }, sink)).toBe(0);
    const lines = out.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    for (const c of cal.cases) {
      const line = lines.find((l) => l.session === c.id);
      expect(line).toMatchObject({
        session: c.id,
        agent: c.agent,
        parent: c.parent,
        events: events.get(c.id),
        verdict: LEVELS[worst.get(c.id) ?? 0],
        first_flagged_at: first.get(c.id) ?? null,
      });
      expect(Object.keys(line)).toEqual([
        'session',
        'agent',
        'parent',
        'events',
        'verdict',
        'first_flagged_at',
        'reason',
        'first_flagged_time',
      ]);
      expect(line.verdict === 'ok').toBe(c.expect === 'ok');
    }
    expect(out.stderr).toBe('');
  });

  it('prints a timeline per session and a summary table', async () => {
    const { out, io: sink } = io();
    await replayCommand({ input: calFile }, sink);
    expect(out.stdout).toMatch(/^ses_cal_item2_w2 \(sisyphus-junior\): 423 events, worst looping$/m);
    expect(out.stdout).toMatch(/^ {2}2026-09-\d\d [\d:]+Z {2}event #\d+ {2}ok -> stalling {2}stalling: /m);
    expect(out.stdout).toMatch(/^SESSION +AGENT +PARENT +EVENTS +VERDICT +FIRST FLAGGED +REASON$/m);
    expect(out.stdout).toMatch(/^ses_cal_atlas +atlas +- +\d+ +ok +- +ok: /m);
    expect(out.stdout).toMatch(/sessions: \d+ ok, \d+ stalling, \d+ looping; \d+ inputs\n$/);
    expect(out.stdout).toMatch(/^[\x20-\x7e\n]*$/);
  });

  it('reports bad lines with their number and field on stderr and replays the rest', async () => {
    const good = toJsonl(cal.inputs.slice(0, 3)).trim().split('\n');
    const ev = JSON.parse(good.find((l) => l.includes('"progress"')) ?? '{}');
    const bad = [
      good[0],
      '{"type":"progress","session_id":"s1","tool":"read"', // truncated
      JSON.stringify({ ...ev, exit: 'one' }), // wrong type
      JSON.stringify({ ...ev, args: { filePath: '/etc/passwd' } }), // content
      JSON.stringify({ type: 'telemetry', x: 1 }), // unknown type
      '[1,2]',
      JSON.stringify({ type: 'request', session_id: 's', request_id: 'r', model: 'm', prompt_tokens: -5, ts: 1 }),
      JSON.stringify({ ...ev, kind: 'tool_v2' }), // unknown event shape
      good[1],
      '',
      good[2],
    ];
    const file = join(tmp, 'bad.jsonl');
    writeFileSync(file, `${bad.join('\n')}\n`);
    const { out, io: sink } = io();
    expect(await replayCommand({ input: file, json: true }, sink)).toBe(1);
    const errs = out.stderr.trim().split('\n');
    expect(errs).toEqual([
      expect.stringMatching(/^replay: line 2: \(json\): invalid JSON/),
      expect.stringMatching(/^replay: line 3: exit: /),
      expect.stringMatching(/^replay: line 4: args: Unrecognized key/),
      expect.stringMatching(/^replay: line 5: type: expected "progress" or "request"/),
      'replay: line 6: (json): expected a JSON object',
      expect.stringMatching(/^replay: line 7: prompt_tokens: /),
      expect.stringMatching(/^replay: line 8: kind: Invalid discriminator value/),
    ]);
    expect(out.stdout).toContain('"events":');
  });

  it('discriminates lines by shape when there is no type field', () => {
    const rec = parseLine('{"session_id":"s","request_id":"r","model":"m","prompt_tokens":1,"ts":1}', 'line 1');
    expect('type' in rec && rec.type).toBe('request');
    const ev = parseLine(
      `{"session_id":"s","tool":"read","call_id":"c","fingerprint":"${'0'.repeat(64)}","target":"a","landed":false,"ts":"2026-09-26T02:00:00Z"}`,
      'line 2',
    );
    expect('type' in ev && ev.type).toBe('progress');
  });
});

describe('streaming', () => {
  it('judges the lines of a JSONL file while it reads them, keeping none', async () => {
    let total = 0;
    let done = 0;
    let judged = 0;
    let whileReading = 0;
    const r = await eachInput(
      calFile,
      () => {
        judged++;
        if (done > 0 && done < total) whileReading++;
      },
      {
        onProgress: (d, t) => {
          done = d;
          total = t;
        },
      },
    );
    expect(r).toMatchObject({ kind: 'jsonl', inputs: cal.inputs.length, rejected: 0, issues: [] });
    expect(judged).toBe(cal.inputs.length);
    expect(done).toBe(total);
    expect(total).toBe(cal.inputs.length);
    expect(whileReading).toBeGreaterThan(cal.inputs.length / 2);
  });

  it('gives what replaying the loaded list gives; a sweep in one pass scores as one replay per set', async () => {
    const streamed = await runReplay(calFile);
    expect(streamed).toEqual(replayLoaded(await loadInput(calFile), defaultKnobs()));
    const labels = Object.fromEntries(cal.cases.map((c) => [c.id, c.label]));
    const grid = { stall_turns: [5, 20], top_warn: [8, 12] };
    const { rows } = await runSweep(calFile, labels, defaultKnobs(), grid);
    expect(rows).toHaveLength(4);
    for (const row of rows) {
      const one = await runReplay(calFile, { knobs: { ...defaultKnobs(), ...row.knobs } });
      expect(row.score).toEqual(score(one.sessions, labels));
    }
  });
});

describe('readers of other formats (core/replay.ts InputReader)', () => {
  // A format of its own: a file starting with `#demo`, or any folder holding `demo.txt`.
  const demo: InputReader = {
    kind: 'demo',
    claims: (p) => (p.dir ? existsSync(join(p.path, 'demo.txt')) : p.head.startsWith('#demo')),
    load(path, opts): LoadedInput {
      const issue = { where: path, field: '(file)', message: 'a demo issue' };
      opts.onIssue?.(issue);
      return {
        kind: 'demo',
        inputs: cal.inputs.filter((i) => i.type !== 'rollup').slice(0, 5) as LoadedInput['inputs'],
        issues: [issue],
        sessions: new Map([['s_demo', { agent: 'demo-agent' }]]),
      };
    },
  };
  const demoFile = join(tmp, 'input.demo');
  writeFileSync(demoFile, '#demo\n');
  const demoDir = mkdtempSync(join(tmp, 'demo-'));
  writeFileSync(join(demoDir, 'demo.txt'), '');

  it('hands a path to the first reader that claims it, JSONL to the replay itself', async () => {
    expect(detectKind(demoFile, [demo])).toBe('demo');
    expect(detectKind(demoDir, [demo])).toBe('demo');
    expect(detectKind(calFile, [demo])).toBe('jsonl');
    // without the reader its file is JSONL (and rejected line by line), its folder nobody's
    expect(detectKind(demoFile)).toBe('jsonl');
    expect(() => detectKind(demoDir)).toThrow(/no reader knows the folder/);
    const seen: string[] = [];
    const r = await runReplay(demoDir, { readers: [demo], onIssue: (i) => seen.push(i.message) });
    expect(r).toMatchObject({ kind: 'demo', inputs: 5, rejected: 1 });
    expect(seen).toEqual(['a demo issue']);
    expect((await loadInput(demoFile, { readers: [demo] })).kind).toBe('demo');
    const streamed = await eachInput(demoFile, () => {}, { readers: [demo] });
    expect(streamed).toMatchObject({ kind: 'demo', inputs: 5, rejected: 1 });
  });
});

describe('labels and sweep', () => {
  const labels = join(tmp, 'labels.json');
  writeFileSync(labels, JSON.stringify(Object.fromEntries(cal.cases.map((c) => [c.id, c.label]))));

  it('scores the verdicts against labels', async () => {
    const { out, io: sink } = io();
    expect(await replayCommand({ input: calFile, labels }, sink)).toBe(0);
    const flagged = cal.cases.filter((c) => c.label === 'loop').length;
    const ok = cal.cases.length - flagged;
    expect(out.stdout).toMatch(new RegExp(`labels: TP=${flagged} FP=0 FN=0 TN=${ok} mean_delay=[\\d.]+ events\\n$`));
  });

  it('replays the default grid and ranks the threshold sets, the defaults without an error', async () => {
    const { out, io: sink } = io();
    expect(await replayCommand({ input: calFile, labels, sweep: true, json: true }, sink)).toBe(0);
    const rows = out.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(rows).toHaveLength(3 ** Object.keys(DEFAULT_SWEEP).length);
    expect(Object.keys(rows[0].knobs)).toEqual(Object.keys(DEFAULT_SWEEP));
    expect(rows[0]).toMatchObject({ fp: 0, fn: 0, mean_delay: expect.any(Number) });
    const k = defaultKnobs();
    const at = (r: { knobs: Record<string, number> }) =>
      Object.keys(DEFAULT_SWEEP).every((key) => r.knobs[key] === k[key as keyof typeof k]);
    const flagged = cal.cases.filter((c) => c.label === 'loop').length;
    expect(rows.find(at)).toMatchObject({ tp: flagged, fp: 0, fn: 0, tn: cal.cases.length - flagged });
    // the grid reaches past the error-free region on both kinds of error
    expect(rows.some((r) => r.fp !== 0)).toBe(true);
    // (729 replays of the calibration set: about 25 s alone on a 2-core machine, more when it is shared)
  }, 120_000);

  it('takes a grid file and prints JSON rows', async () => {
    const grid = join(tmp, 'grid.json');
    writeFileSync(grid, JSON.stringify({ dup_warn: [0.02, 0.25], stall_turns: [5, 20] }));
    const { out, io: sink } = io();
    expect(await replayCommand({ input: calFile, labels, sweep: grid, json: true }, sink)).toBe(0);
    const rows = out.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(rows).toHaveLength(4);
    expect(rows[0]).toMatchObject({ knobs: expect.any(Object), tp: expect.any(Number), fp: 0, fn: 0 });
    expect(rows.some((r) => r.fp > 0)).toBe(true);
  });

  it('raises a loop threshold to its warn threshold in the grid', () => {
    const sets = sweepGrid(defaultKnobs(), {
      top_warn: [25],
      landed_repeat_warn: [30],
      lookup_run_warn: [9],
      run_warn: [40],
    });
    expect(sets[0]).toMatchObject({
      top_warn: 25,
      top_loop: 25,
      landed_repeat_loop: 30,
      lookup_run_loop: 9,
      run_loop: 40,
    });
  });
});

describe('progress bar', () => {
  it('draws on a TTY stderr for a large input (an export folder), never on a pipe', async () => {
    let tty = '';
    let pipe = '';
    const stdout = { write: () => true };
    await replayCommand(
      { input: EXPORT, json: true },
      { stdout, stderr: { write: (s: string) => (tty += s), isTTY: true } },
    );
    await replayCommand({ input: EXPORT, json: true }, { stdout, stderr: { write: (s: string) => (pipe += s) } });
    expect(tty).toContain('load [========================================] 100% 2/2');
    expect(pipe).toBe('');
  });
});

describe('usage errors', () => {
  it('exits 2 with a message for a missing input, a sweep without labels, bad knobs or labels', async () => {
    const cases: [Parameters<typeof replayCommand>[0], RegExp][] = [
      [{ input: join(tmp, 'nope.jsonl') }, /input not found/],
      [{ input: calFile, sweep: true }, /--sweep needs --labels/],
      [{ input: calFile, knobs: join(tmp, 'k1.yaml') }, /knobs file .*top_wrn/],
      [{ input: calFile, labels: join(tmp, 'l1.json') }, /labels file/],
    ];
    writeFileSync(join(tmp, 'k1.yaml'), 'top_wrn: 3\n');
    writeFileSync(join(tmp, 'l1.json'), '{"ses_a":"maybe"}');
    for (const [opts, msg] of cases) {
      const { out, io: sink } = io();
      expect(await replayCommand(opts, sink)).toBe(2);
      expect(out.stderr).toMatch(msg);
      expect(out.stdout).toBe('');
    }
  });
});
