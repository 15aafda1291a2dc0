import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { replay as replayCommand } from '../../cli/replay.ts';
import { Tracker } from '../../detectors/no-progress/judge.ts';
import { defaultKnobs } from '../../detectors/no-progress/knobs.ts';
import { detectKind } from '../../detectors/no-progress/replay/inputs.ts';
import { runReplay } from '../../detectors/no-progress/replay/replay.ts';
import { needsSqlite3 } from '../../test/helpers/external.ts';
import { opencodeDbReader, opencodeExportReader } from './replay.ts';

// opencode's replay readers (replay.ts) over a real capture, alone and through `vigil replay`.

const SQLITE3 = needsSqlite3(import.meta.filename);
const EXPORT = join(import.meta.dirname, '../../test/fixtures/opencode-export');
const ROOT = 'ses_dd3c1f1ffffe6w37wujp0POfVN';
const CHILD = 'ses_dd3c1c646ffe2fWC04kzlgXb9c';
const readers = [opencodeExportReader, opencodeDbReader];
const tmp = mkdtempSync(join(tmpdir(), 'vigil-oc-replay-'));
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

describe.runIf(SQLITE3)('replay of a real opencode 1.18.33 export', () => {
  it('detects the input kind', () => {
    expect(detectKind(EXPORT, readers)).toBe('folder');
    expect(detectKind(join(EXPORT, 'opencode.db'), readers)).toBe('sqlite');
    expect(detectKind(join(EXPORT, 'hooks.jsonl'), readers)).toBe('jsonl');
  });

  it('reads the folder and the SQLite DB to the same result', async () => {
    const a = io();
    const b = io();
    expect(await replayCommand({ input: EXPORT, json: true }, a.io)).toBe(0);
    expect(await replayCommand({ input: join(EXPORT, 'opencode.db'), json: true }, b.io)).toBe(0);
    expect(a.out.stderr).toBe('');
    expect(b.out.stderr).toBe('');
    expect(a.out.stdout).toBe(b.out.stdout);
    const lines = a.out.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    // 20 tool calls, 2 markers and a text-only step (the child: 2 calls and its answer).
    // Its first three reads of src/app.js return the same content: with result
    // fingerprints from the stored outputs, an identical run (stalling at 3).
    expect(lines).toEqual([
      expect.objectContaining({
        session: ROOT,
        agent: 'build',
        parent: null,
        events: 24,
        verdict: 'stalling',
        first_flagged_at: 2,
        reason: expect.stringMatching(/read src\/app.js x3 in a row, the same result each time$/),
      }),
      expect.objectContaining({ session: CHILD, agent: 'explore', parent: ROOT, events: 3, verdict: 'ok' }),
    ]);
  });

  it('sees the calls, landed changes, requests and markers of the capture', async () => {
    for (const input of [EXPORT, join(EXPORT, 'opencode.db')]) {
      const r = await runReplay(input, { readers });
      expect(r.issues).toEqual([]);
      // 51 tool calls, markers and request records, and 2 text-only steps
      expect(r.inputs).toBe(53);
    }
    const t = new Tracker(defaultKnobs());
    const loaded = await opencodeDbReader.load(join(EXPORT, 'opencode.db'), {});
    for (const i of loaded.inputs) t.apply(i);
    const root = t.state(ROOT);
    expect(root).toMatchObject({ calls: 20, landed: 4, continuations: 1, compactions: 2, agent: 'build' });
    expect(t.state(CHILD)).toMatchObject({ calls: 2, readOnly: true, parent: ROOT });
  });

  it('flags the capture when the knobs are tight, from both inputs', async () => {
    const knobs = join(tmp, 'tight.yaml');
    writeFileSync(knobs, 'progress:\n  stall_turns: 2\n  session_repeat_warn: 3\n');
    for (const input of [EXPORT, join(EXPORT, 'opencode.db')]) {
      const { out, io: sink } = io();
      expect(await replayCommand({ input, json: true, knobs }, sink)).toBe(0);
      expect(JSON.parse(out.stdout.split('\n')[0])).toMatchObject({ session: ROOT, verdict: 'stalling' });
    }
  });

  it('reports a missing or broken messages file and goes on', async () => {
    const dir = mkdtempSync(join(tmp, 'export-'));
    writeFileSync(
      join(dir, 'session.json'),
      JSON.stringify([{ id: ROOT, agent: 'build' }, { id: 'ses_gone' }, { nope: 1 }]),
    );
    mkdirSync(join(dir, 'messages'));
    writeFileSync(join(dir, 'messages', `${ROOT}.json`), readFileSync(join(EXPORT, 'messages', `${ROOT}.json`)));
    writeFileSync(join(dir, 'messages', 'ses_broken.json'), '[{"info":');
    // an unknown tool shape inside an otherwise good export
    const odd = JSON.parse(readFileSync(join(EXPORT, 'messages', `${CHILD}.json`), 'utf8'));
    odd[1].parts[1].state.status = 'exploded';
    writeFileSync(join(dir, 'messages', `${CHILD}.json`), JSON.stringify(odd));
    const { out, io: sink } = io();
    expect(await replayCommand({ input: dir, json: true }, sink)).toBe(1);
    expect(out.stderr).toContain('replay: session.json [2]: id: expected a session object with a string id');
    expect(out.stderr).toContain('replay: session ses_gone: (file): missing messages/ses_gone.json');
    expect(out.stderr).toMatch(/replay: messages\/ses_broken.json: \(json\): invalid JSON/);
    expect(out.stderr).toContain(
      `replay: messages/${CHILD}.json message 1 part 1: state.status: unknown status "exploded"`,
    );
    expect(out.stdout).toContain(`"session":"${CHILD}"`);
    expect(out.stdout).toContain(`"session":"${ROOT}"`);
  });
});
