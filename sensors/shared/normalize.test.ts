import { createHash } from 'node:crypto';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  describeCall,
  normalizeCall,
  normalizeOutput,
  normPath,
  resultFingerprint,
  sanitizeTarget,
  sha256Hex,
  stableJson,
  textFingerprint,
} from './normalize.ts';

const CWD = '/home/op/cockpit';
const bash = (command: string) => describeCall('bash', { command }, { cwd: CWD });
const fp = (tool: string, args: unknown) => normalizeCall(tool, args, { cwd: CWD }).fingerprint;

describe('fingerprint', () => {
  it('is the sha256 hex of the key (one-shot crypto.hash or createHash: same bytes)', () => {
    const k = describeCall('read', { filePath: 'src/a.js' }).key;
    expect(sha256Hex(k)).toBe(createHash('sha256').update(k).digest('hex'));
    expect(normalizeCall('read', { filePath: 'src/a.js' }).fingerprint).toMatch(/^[0-9a-f]{64}$/);
  });
});

describe('read', () => {
  it('keys on path plus offset and limit: sliced reading stays distinct', () => {
    const whole = fp('read', { filePath: `${CWD}/src/navbar.js` });
    const a = fp('read', { filePath: `${CWD}/src/navbar.js`, offset: 1, limit: 100 });
    const b = fp('read', { filePath: `${CWD}/src/navbar.js`, offset: 101, limit: 100 });
    expect(new Set([whole, a, b]).size).toBe(3);
    expect(fp('read', { filePath: `${CWD}/src/navbar.js`, offset: 101, limit: 100 })).toBe(b);
  });

  it('makes paths under cwd relative, so the plugin and the watchdog agree', () => {
    expect(fp('read', { filePath: `${CWD}/src/a.js` })).toBe(fp('read', { filePath: 'src/a.js' }));
    expect(fp('read', { filePath: `${CWD}/./src//a.js` })).toBe(fp('read', { filePath: 'src/a.js' }));
    expect(describeCall('read', { filePath: `${CWD}/src/a.js` }, { cwd: CWD }).target).toBe('src/a.js');
    expect(describeCall('read', { filePath: '/etc/hosts' }, { cwd: CWD }).target).toBe('/etc/hosts');
  });
});

describe('bash', () => {
  it('collapses differently worded looks at the same file (28 boulder.json reads)', () => {
    const views = [
      'cat .omo/boulder.json',
      'jq .status .omo/boulder.json',
      "jq '.status, .pr_url' .omo/boulder.json",
      'cat .omo/boulder.json | jq .plan_name',
      `python3 -c "import json; print(json.load(open('.omo/boulder.json'))['status'])"`,
      'grep -n status .omo/boulder.json',
      'cat ./.omo/boulder.json',
      `cd ${CWD} && cat .omo/boulder.json`,
      `cat ${CWD}/.omo/boulder.json`,
    ];
    const keys = new Set(views.map((c) => bash(c).key));
    expect(keys.size).toBe(1);
    for (const c of views) expect(bash(c).target).toBe('.omo/boulder.json');
  });

  it('keeps the numbers: another slice is another call, the same slice reworded is not', () => {
    expect(bash('head -50 .omo/boulder.json').key).not.toBe(bash('cat .omo/boulder.json').key);
    expect(bash('head -50 .omo/boulder.json').key).toBe(bash('head -n 50 .omo/boulder.json').key);
    expect(bash("sed -n '10,20p' src/a.js").key).not.toBe(bash("sed -n '20,40p' src/a.js").key);
    expect(bash('tail -n +100 log/app.log').key).not.toBe(bash('tail -n +200 log/app.log').key);
  });

  it('collapses the same test reworded (-k) but not different scripts', () => {
    expect(bash('pytest tests/test_a.py -k foo').key).toBe(bash('pytest tests/test_a.py -k bar').key);
    expect(bash('npm run build').key).not.toBe(bash('npm run lint').key);
    expect(bash('sh check.sh').key).not.toBe(bash('cat check.sh').key);
  });

  it('does not take version suffixes, descriptors or URLs for numbers or files', () => {
    expect(bash('python3 tool.py').key).toBe(bash('python3 tool.py 2>&1').key);
    expect(bash('npm test 2>/dev/null').key).toBe(bash('npm test').key);
    expect(bash('curl -s https://example.com/api?page=2').key).toBe(bash('curl -s https://example.com/api?page=3').key);
  });

  it('treats a redirect to a file as a write, not a look', () => {
    expect(bash('cat a.md > out.md').key).not.toBe(bash('cat a.md out.md').key);
  });

  it('never puts a string literal or a sed expression in the target', () => {
    expect(bash("git commit -am 'secret message'").target).toBe('git commit');
    expect(bash('echo "hunter2 is the password"').target).toBe('echo');
    expect(bash("sed -i 's/password123/xyz/' src/a.js").target).toBe('sed src/a.js');
    expect(bash('cat <<EOF > notes.md\nsecret 42 body\nEOF').target).toBe('cat notes.md');
    expect(bash('grep -rn "TODO: fix" src/').target).toBe('src');
  });

  it('gives the first two tokens (and a runner script name) as the target', () => {
    expect(bash('npm test').target).toBe('npm test');
    expect(bash('npm run build -- --watch').target).toBe('npm run build');
    expect(bash('sh check.sh').target).toBe('sh check.sh');
    expect(bash('git -c user.name=lab -c user.email=lab@example.invalid commit -am x').target).toBe('git commit');
    expect(bash('FOO=1 timeout 30 npx vitest run core/').target).toBe('npx vitest');
  });

  it('recognises a git commit (amend too, dry run not)', () => {
    expect(bash('git commit -m x').gitCommit).toBe(true);
    expect(bash('git add -A && git commit --amend --no-edit').gitCommit).toBe(true);
    expect(bash('git -c user.name=lab commit -am x').gitCommit).toBe(true);
    expect(bash('git commit --dry-run -m x').gitCommit).toBe(false);
    expect(bash('git log --grep commit').gitCommit).toBe(false);
  });

  it.each([
    'npm test',
    'npm run test:unit',
    'pnpm test',
    'yarn lint',
    'npx vitest run',
    'npx tsc --noEmit',
    'pytest -x tests/',
    'python -m pytest -k foo',
    'go test ./...',
    'cargo test',
    'make test',
    'make check',
    'eslint src',
    'ruff check .',
    'tsc -p .',
    'sh check.sh',
    'bash scripts/run-tests.sh',
    './test.sh',
    'cd app && npm test 2>&1 | tail -20',
  ])('classifies %s as a test or lint command', (c) => {
    expect(bash(c).testLike).toBe(true);
  });

  it.each(['npm install', 'npm run build', 'cat test.sh', 'ls tests', 'git status', 'make build'])(
    'does not classify %s as a test command',
    (c) => {
      expect(bash(c).testLike).toBe(false);
    },
  );
});

describe('other tools', () => {
  it('keys edit, write and patch on the path', () => {
    const a = fp('edit', { filePath: 'src/a.js', oldString: 'x', newString: 'y' });
    expect(fp('edit', { filePath: 'src/a.js', oldString: 'p', newString: 'q' })).toBe(a);
    expect(describeCall('write', { filePath: `${CWD}/src/b.js`, content: 'secret' }, { cwd: CWD }).target).toBe(
      'src/b.js',
    );
    const patch = describeCall('apply_patch', {
      patchText: '*** Begin Patch\n*** Update File: src/a.js\n@@\n-x\n+y\n*** End Patch',
    });
    expect(patch.target).toBe('src/a.js');
    expect(patch.key).not.toContain('+y');
  });

  it('keys grep and glob on pattern plus path, with the path (never the pattern) as grep target', () => {
    expect(fp('grep', { pattern: 'a', path: 'src' })).not.toBe(fp('grep', { pattern: 'b', path: 'src' }));
    expect(describeCall('grep', { pattern: 'password=hunter2', path: `${CWD}/src` }, { cwd: CWD }).target).toBe('src');
    expect(describeCall('glob', { pattern: '**/*.ts' }).target).toBe('**/*.ts');
  });

  it('keys task on subagent_type only', () => {
    expect(fp('task', { description: 'a', prompt: 'x', subagent_type: 'explore' })).toBe(
      fp('task', { description: 'b', prompt: 'y', subagent_type: 'explore' }),
    );
    expect(describeCall('task', { prompt: 'secret plan', subagent_type: 'explore' }).target).toBe('explore');
  });

  it('keys anything else on tool + sorted-key JSON of the args, with no target', () => {
    expect(fp('todowrite', { a: 1, b: { d: 2, c: 3 } })).toBe(fp('todowrite', { b: { c: 3, d: 2 }, a: 1 }));
    expect(fp('todowrite', { a: 1 })).not.toBe(fp('todoread', { a: 1 }));
    expect(describeCall('todowrite', { todos: [{ content: 'secret' }] }).target).toBe('');
    expect(describeCall('webfetch', { url: 'https://a.example/docs?token=abc' }).target).toBe('a.example/docs');
  });
});

describe('helpers', () => {
  it('stableJson sorts keys at every level and keeps arrays in order', () => {
    expect(stableJson({ b: [2, { z: 1, a: 0 }], a: null })).toBe('{"a":null,"b":[2,{"a":0,"z":1}]}');
  });

  it('normPath resolves dots and strips trailing slashes', () => {
    expect(normPath('a/./b/../c/')).toBe('a/c');
    expect(normPath('/r/x', '/r')).toBe('x');
    expect(normPath('/r', '/r')).toBe('.');
    expect(normPath('/rx/y', '/r')).toBe('/rx/y');
  });

  it('sanitizeTarget keeps printable ASCII and at most 256 chars', () => {
    expect(sanitizeTarget('caf\u00e9\n.md')).toBe('caf??.md');
    const long = sanitizeTarget(`src/${'x'.repeat(400)}.js`);
    expect(long.length).toBe(256);
    expect(long.endsWith('.js')).toBe(true);
  });
});

describe('results and assistant text', () => {
  it('removes what changes between two runs of one call: times, durations, pids, temp paths, ids, colours', () => {
    expect(normalizeOutput('Started 2026-11-30T12:03:04.123Z, took 1.23s (pid 4242)')).toBe(
      'Started <time>, took <dur> (<pid>)',
    );
    expect(normalizeOutput('\x1b[31mFAIL\x1b[0m tests/a.test.ts (120 ms)\nTime:        4.5 s  \n')).toBe(
      'FAIL tests/a.test.ts (<dur>)\nTime:        <dur>',
    );
    expect(normalizeOutput('wrote /tmp/tmp.Ab12Cd/out.json, kept /home/op/tmp/keep.txt')).toBe(
      'wrote <tmp>, kept /home/op/tmp/keep.txt',
    );
    expect(normalizeOutput('at 10:20:30 PM, epoch 1796040345092, elapsed 2m13s')).toBe(
      'at <time>, epoch <epoch>, elapsed <dur>',
    );
    expect(normalizeOutput('req 123e4567-e89b-12d3-a456-426614174000 at 0x7ffd5e8c9a10')).toBe('req <uuid> at <addr>');
    expect(normalizeOutput('line\r\nnext \r\n')).toBe('line\nnext');
  });

  it('keeps what a poll moves: counts, steps, line numbers, versions', () => {
    for (const s of ['3 of 5 checks passed', 'step 12/40 compiled 96 modules', 'src/a.ts:10:3 error', 'v1.18.33']) {
      expect(normalizeOutput(s)).toBe(s);
    }
    expect(resultFingerprint(0, '3 of 5 checks')).not.toBe(resultFingerprint(0, '4 of 5 checks'));
  });

  it('fingerprints the exit with the output: the same output with another exit is another result', () => {
    expect(resultFingerprint(0, 'ok')).toMatch(/^[0-9a-f]{64}$/);
    expect(resultFingerprint(0, 'ok')).not.toBe(resultFingerprint(1, 'ok'));
    expect(resultFingerprint(null, 'ok')).not.toBe(resultFingerprint(0, 'ok'));
    expect(resultFingerprint(1, 'FAIL (12 ms) at 10:00:01')).toBe(resultFingerprint(1, 'FAIL (980 ms) at 11:59:59'));
  });

  it('fingerprints assistant text whatever its wrapping; nothing for a blank step', () => {
    expect(textFingerprint('All done.\n\nThe tests pass. ')).toBe(textFingerprint(' All done. The tests pass.'));
    expect(textFingerprint('All done.')).not.toBe(textFingerprint('All done!'));
    expect(textFingerprint(' \n\t')).toBeUndefined();
  });

  it('property: outputs that differ only in their volatile parts have one result fingerprint', () => {
    const two = (d: number) => String(d).padStart(2, '0');
    const kinds = [
      fc.tuple(fc.nat(23), fc.nat(59), fc.nat(59)).map(([h, m, x]) => `${two(h)}:${two(m)}:${two(x)}`),
      fc.tuple(fc.nat(23), fc.nat(59), fc.nat(999)).map(([h, m, x]) => `2026-11-30T${two(h)}:${two(m)}:00.${x}Z`),
      fc.integer({ min: 1, max: 99_999 }).map((x) => `${x}ms`),
      fc.double({ min: 0.01, max: 99, noNaN: true }).map((x) => `${x.toFixed(2)}s`),
      fc.integer({ min: 2, max: 4_000_000 }).map((x) => `pid ${x}`),
      fc.stringMatching(/^[A-Za-z0-9]{6,12}$/).map((x) => `/tmp/run.${x}/out.log`),
      fc.uuid(),
      fc.integer({ min: 0x100000, max: 0x7fffffff }).map((x) => `0x${x.toString(16)}`),
    ];
    const word = fc.constantFrom('FAIL', 'tests/a.test.ts', 'passed', '3', 'of', '5', 'checks', 'Done.', '(x)');
    // each slot: a word in both outputs, or a volatile part of one kind with a value in each
    const slot = fc.oneof(
      word.map((w) => [w, w] as const),
      ...kinds.map((g) => fc.tuple(g, g)),
    );
    fc.assert(
      fc.property(fc.array(slot, { maxLength: 20 }), (slots) => {
        const a = slots.map((x) => x[0]).join(' ');
        const b = slots.map((x) => x[1]).join(' ');
        return resultFingerprint(0, a) === resultFingerprint(0, b);
      }),
      { seed: 24, numRuns: 1_000 },
    );
  });

  it('property: never throws, and what it leaves is one line per line of the output', () => {
    fc.assert(
      fc.property(
        fc.string(),
        (s) => normalizeOutput(s).split('\n').length <= s.replace(/\r\n?/g, '\n').split('\n').length,
      ),
      { seed: 25, numRuns: 2_000 },
    );
  });
});
