import * as crypto from 'node:crypto';
import { posix } from 'node:path';

// ONE normalisation of a tool call, shared by the plugin, the watchdog, replay and
// the bench: (tool, args) -> a normalised key (hashed into the fingerprint, never
// stored), a coarse target (stored, shown in reports) and two facts the landed rules
// need (a git commit, a test or lint command).
//
// Key rules (what a prototype judge learnt on real loops, docs/detection.md):
// - read: path + offset + limit. Sliced reading (new offsets) stays distinct.
// - bash: the files the command references plus the numbers in it (the slice), under a
//   command class. The class is `view` when every segment of the command only looks at
//   files (cat, head, jq, grep, sed -n, python -c ...), so `cat f`, `jq .status f` and
//   `python3 -c "...open('f')..."` collapse while `head -50 f` (another slice) does not;
//   otherwise the class is the command's leading words (`npm test`, `git commit`), so
//   `pytest -k a` and `pytest -k b` collapse (the same failing test reworded) but
//   `npm run build` and `npm run lint` do not.
// - edit / write / patch: the path(s). grep / glob: pattern + path (+ include).
// - task: subagent_type. Anything else: tool + sorted-key JSON of the args.
// Paths are made relative to `cwd` when given, so the plugin (ctx.directory) and the
// watchdog (message path.cwd) compute the same fingerprint for the same call.
//
// Target rules: a path, or a command's first two tokens; never a quoted string, a
// grep pattern or file content. Non-printable and non-ASCII characters become '?'.

export interface NormalizeOptions {
  /** The session's working directory: absolute paths under it become relative. */
  cwd?: string;
}

export interface CallFacts {
  /** The normalised form, input of the fingerprint. Holds argument fragments: never store it. */
  key: string;
  /** Coarse target: a path or a command's first tokens, at most 256 printable ASCII chars. */
  target: string;
  /** bash: a `git commit` (or `--amend`) that is not a dry run. */
  gitCommit: boolean;
  /** bash: a test or lint command (the TEST_COMMAND list below). */
  testLike: boolean;
}

export interface CallFingerprint {
  fingerprint: string;
  target: string;
  gitCommit: boolean;
  testLike: boolean;
}

type CryptoWithHash = typeof crypto & { hash?: (alg: string, data: string, enc?: string) => string };
const oneShot = (crypto as CryptoWithHash).hash;

/** sha256 hex. Node >= 20.12 has the one-shot `crypto.hash`, about twice as fast for short strings. */
export const sha256Hex: (s: string) => string =
  typeof oneShot === 'function'
    ? (s) => oneShot('sha256', s, 'hex')
    : (s) => crypto.createHash('sha256').update(s).digest('hex');

export const TARGET_MAX = 256;

/** Tool + normalised args -> fingerprint (sha256 hex of the key) and the coarse target. */
export function normalizeCall(tool: string, args: unknown, opts: NormalizeOptions = {}): CallFingerprint {
  const f = describeCall(tool, args, opts);
  return { fingerprint: sha256Hex(f.key), target: f.target, gitCommit: f.gitCommit, testLike: f.testLike };
}

export function describeCall(tool: string, args: unknown, opts: NormalizeOptions = {}): CallFacts {
  const a = (args !== null && typeof args === 'object' ? args : {}) as Record<string, unknown>;
  const cwd = opts.cwd;
  switch (tool) {
    case 'read':
    case 'view': {
      const p = pathArg(a);
      if (p === undefined) break;
      const path = normPath(p, cwd);
      return facts(`read\0${path}\0${scalar(a.offset)}\0${scalar(a.limit)}`, path);
    }
    case 'edit':
    case 'multiedit':
    case 'write': {
      const p = pathArg(a);
      if (p === undefined) break;
      const path = normPath(p, cwd);
      return facts(`${tool}\0${path}`, path);
    }
    case 'patch':
    case 'apply_patch': {
      const text = str(a.patchText) ?? str(a.patch) ?? str(a.input);
      const files = text === undefined ? [] : patchFiles(text, cwd);
      if (files.length === 0) break;
      return facts(`patch\0${files.join('\0')}`, files[0]);
    }
    case 'grep': {
      const path = normPath(str(a.path) ?? '.', cwd);
      const include = str(a.include) ?? str(a.glob) ?? '';
      return facts(`grep\0${str(a.pattern) ?? ''}\0${path}\0${include}`, path === '.' && include ? include : path);
    }
    case 'glob': {
      const path = normPath(str(a.path) ?? '.', cwd);
      const pattern = str(a.pattern) ?? '';
      return facts(`glob\0${pattern}\0${path}`, path === '.' ? pattern : `${path}/${pattern}`);
    }
    case 'list':
    case 'ls': {
      const path = normPath(str(a.path) ?? '.', cwd);
      return facts(`list\0${path}\0${stableJson(a.ignore)}`, path);
    }
    case 'task': {
      const agent = str(a.subagent_type) ?? '';
      return facts(`task\0${agent}`, agent);
    }
    case 'bash':
    case 'shell': {
      const cmd = str(a.command);
      if (cmd === undefined) break;
      return bashFacts(cmd, cwd);
    }
    case 'webfetch': {
      const url = str(a.url);
      return facts(`webfetch\0${stableJson(a)}`, url === undefined ? '' : urlTarget(url));
    }
  }
  // Anything else (todowrite, skill, MCP tools, unknown shapes): exact arguments.
  const p = pathArg(a);
  return facts(`${tool}\0${stableJson(a)}`, p === undefined ? '' : normPath(p, cwd));
}

function facts(key: string, target: string, gitCommit = false, testLike = false): CallFacts {
  return { key, target: sanitizeTarget(target), gitCommit, testLike };
}

const str = (v: unknown): string | undefined => (typeof v === 'string' ? v : undefined);
const scalar = (v: unknown): string => (typeof v === 'number' || typeof v === 'string' ? String(v) : '');
const pathArg = (a: Record<string, unknown>): string | undefined =>
  str(a.filePath) ?? str(a.file_path) ?? str(a.path) ?? str(a.file);

/** Printable ASCII, one line, at most 256 chars (head and tail kept, the middle elided). */
export function sanitizeTarget(s: string): string {
  let out = s;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x20 || c > 0x7e) {
      out = s.replace(/[^\x20-\x7e]/g, '?');
      break;
    }
  }
  if (out.length > TARGET_MAX) out = `${out.slice(0, 120)}...${out.slice(out.length - (TARGET_MAX - 123))}`;
  return out;
}

/** Relative to cwd when under it, `..` and `.` resolved, no trailing slash. */
export function normPath(p: string, cwd?: string): string {
  let s = p.length > 0 && (p.charCodeAt(0) <= 32 || p.charCodeAt(p.length - 1) <= 32) ? p.trim() : p;
  if (cwd && cwd.length > 1 && s.charCodeAt(0) === 47 /* / */) {
    const base = cwd.endsWith('/') ? cwd.slice(0, -1) : cwd;
    if (s === base) return '.';
    if (s.startsWith(base) && s.charCodeAt(base.length) === 47) s = s.slice(base.length + 1);
  }
  if (s === '') return '.';
  // Fast path: most paths need no normalising.
  if (s.includes('//') || s.includes('./') || s.endsWith('/') || s.endsWith('/.') || s === '..') {
    s = posix.normalize(s);
    if (s.length > 1 && s.endsWith('/')) s = s.slice(0, -1);
  }
  return s;
}

function urlTarget(u: string): string {
  try {
    const x = new URL(u);
    return `${x.host}${x.pathname}`; // never the query string
  } catch {
    return '';
  }
}

/** JSON with object keys sorted at every level, so key order never changes a fingerprint. */
export function stableJson(v: unknown, depth = 0): string {
  if (v === null || typeof v !== 'object') return v === undefined ? 'null' : (JSON.stringify(v) ?? 'null');
  if (depth > 32) return '"(deep)"'; // args come from JSON, so no cycles; a bound anyway
  if (Array.isArray(v)) {
    let s = '[';
    for (let i = 0; i < v.length; i++) s += (i ? ',' : '') + stableJson(v[i], depth + 1);
    return `${s}]`;
  }
  const o = v as Record<string, unknown>;
  const keys = Object.keys(o).sort();
  let s = '{';
  let first = true;
  for (const k of keys) {
    if (o[k] === undefined) continue;
    s += `${first ? '' : ','}${JSON.stringify(k)}:${stableJson(o[k], depth + 1)}`;
    first = false;
  }
  return `${s}}`;
}

function patchFiles(text: string, cwd?: string): string[] {
  const out = new Set<string>();
  const re = /^(?:\*\*\* (?:Add|Update|Delete) File: (.+)|\+\+\+ (?:b\/)?(\S+)|\*\*\* Move to: (.+))$/gm;
  for (let m = re.exec(text); m !== null; m = re.exec(text)) {
    const f = (m[1] ?? m[2] ?? m[3]).trim();
    if (f && f !== '/dev/null') out.add(normPath(f, cwd));
  }
  return [...out].sort();
}

// ---------------------------------------------------------------------------
// bash

interface Tok {
  text: string;
  quoted: boolean;
  /** 0 word, 1 separator (| && || ; & newline, subshell), 2 redirection */
  op: 0 | 1 | 2;
}

const SEP: Tok = { text: ';', quoted: false, op: 1 };
const REDIR: Tok = { text: '>', quoted: false, op: 2 };
const REDIR_IN: Tok = { text: '<', quoted: false, op: 2 };

/** A small shell lexer: quotes, escapes, separators, redirections; a heredoc body is dropped. */
function lex(cmd: string): Tok[] {
  // No closures here: tsx compiles with keepNames, which makes every closure creation a
  // defineProperty call, and this runs once per bash call.
  const toks: Tok[] = [];
  let cur = '';
  let quoted = false;
  let inWord = false;
  const n = cmd.length;
  for (let i = 0; i < n; i++) {
    const c = cmd[i];
    if (c === "'") {
      const j = cmd.indexOf("'", i + 1);
      const k = j < 0 ? n : j;
      cur += cmd.slice(i + 1, k);
      quoted = true;
      inWord = true;
      i = k;
    } else if (c === '"') {
      let j = i + 1;
      let start = j;
      while (j < n) {
        const ch = cmd.charCodeAt(j);
        if (ch === 34 /* " */) break;
        if (ch === 92 /* \ */ && j + 1 < n) {
          cur += cmd.slice(start, j);
          start = j + 1;
          j += 2;
          continue;
        }
        j++;
      }
      cur += cmd.slice(start, j);
      quoted = true;
      inWord = true;
      i = j;
    } else if (c === '\\') {
      if (i + 1 < n && cmd[i + 1] !== '\n') cur += cmd[i + 1];
      inWord = inWord || i + 1 < n;
      i++;
    } else if (c === ' ' || c === '\t' || c === '\r') {
      if (inWord) toks.push({ text: cur, quoted, op: 0 });
      cur = '';
      quoted = false;
      inWord = false;
    } else if (c === '#' && !inWord) {
      const j = cmd.indexOf('\n', i);
      i = j < 0 ? n : j - 1;
    } else if (c === '|' || c === ';' || c === '&' || c === '\n' || c === '(' || c === ')' || c === '`') {
      if (c === '&' && cmd[i + 1] === '>') {
        if (inWord) toks.push({ text: cur, quoted, op: 0 });
        cur = '';
        quoted = false;
        inWord = false;
        toks.push(REDIR);
        i++;
        if (cmd[i + 1] === '>') i++;
        continue;
      }
      if (inWord) toks.push({ text: cur, quoted, op: 0 });
      cur = '';
      quoted = false;
      inWord = false;
      toks.push(SEP);
      if ((c === '|' || c === '&') && cmd[i + 1] === c) i++;
    } else if (c === '$' && cmd[i + 1] === '(') {
      if (inWord) toks.push({ text: cur, quoted, op: 0 });
      cur = '';
      quoted = false;
      inWord = false;
      toks.push(SEP);
      i++;
    } else if (c === '>' || c === '<') {
      // A pure-digit word right before is a file descriptor (2>), not an argument.
      if (inWord && !quoted && /^\d+$/.test(cur)) {
        cur = '';
        inWord = false;
      }
      if (inWord) toks.push({ text: cur, quoted, op: 0 });
      cur = '';
      quoted = false;
      inWord = false;
      if (c === '<' && cmd[i + 1] === '<') {
        // Heredoc: its body is content. Keep the rest of this line, drop the body.
        const nl = cmd.indexOf('\n', i);
        const line = cmd.slice(i + 2, nl < 0 ? n : nl).replace(/^-?\s*['"]?\w+['"]?/, '');
        for (const t of lex(line)) toks.push(t);
        break;
      }
      toks.push(c === '<' ? REDIR_IN : REDIR);
      while (cmd[i + 1] === '>' || cmd[i + 1] === '&' || cmd[i + 1] === '|') i++;
      // `>&2` / `2>&1`: a descriptor, no file.
      if (cmd[i] === '&') {
        let j = i + 1;
        while (j < n && cmd[j] >= '0' && cmd[j] <= '9') j++;
        if (j > i + 1 || cmd[j] === '-') {
          toks.pop();
          i = cmd[j] === '-' ? j : j - 1;
        }
      }
    } else {
      // a run of plain characters in one slice
      let j = i + 1;
      while (j < n && PLAIN[cmd.charCodeAt(j)] !== 0) j++;
      cur += cmd.slice(i, j);
      inWord = true;
      i = j - 1;
    }
  }
  if (inWord) toks.push({ text: cur, quoted, op: 0 });
  cur = '';
  quoted = false;
  inWord = false;
  return toks;
}

// Characters that never start a quote, an escape, a separator or a redirection (0 = special).
const PLAIN = new Uint8Array(65_536).fill(1);
for (const ch of ' \t\r\n\'"\\|;&()`$<>') PLAIN[ch.charCodeAt(0)] = 0;

// Programs that only look at files: rewordings among them collapse to files + numbers.
const VIEW = words(
  'cat head tail less more bat batcat nl wc jq yq grep egrep fgrep rg ag ack awk gawk cut sort uniq tr column od ' +
    'xxd hexdump strings file stat ls tree find fd readlink realpath basename dirname md5sum sha256sum diff cmp sed',
);
// Contribute nothing to the key: directory changes and chatter around the real command.
const NEUTRAL = words('cd pushd popd echo printf true false export set sleep clear :');
// Prefixes whose argument is the real program.
const RUN_VERBS = words('run exec x');
const WRAPPERS = words('sudo env time nice nohup command exec timeout xargs stdbuf');
const INTERPRETERS = words('python python3 python2 node ruby perl bun deno');
const INLINE_FLAGS = words('-c -e -p -ne -pe -E');

// File extensions that make a bare word (no slash) a file reference.
const EXT = words(
  'js mjs cjs jsx ts tsx mts cts json jsonc json5 jsonl md mdx txt rst adoc py pyi ipynb sh bash zsh fish rb go ' +
    'rs java kt kts scala c h cc cpp hpp hh cs fs swift m mm php pl lua r sql yaml yml toml ini cfg conf env lock ' +
    'log csv tsv xml html htm css scss sass less vue svelte astro graphql gql proto tf hcl gradle properties bat ' +
    'ps1 diff patch svg png jpg jpeg gif webp pdf zip gz tgz tar db sqlite wasm map snap out err',
);
const NAMED_FILES = words('Makefile Dockerfile Justfile Rakefile Gemfile Procfile Containerfile');
// Characters that cannot be part of a path: they split a word into path candidates,
// so `open('.omo/boulder.json')` inside python -c yields `.omo/boulder.json`.
const NOT_PATH = /[^\w.@+*?~/-]+/;
// 1 = may be part of a path ([\w.@+*?~/-]), as a table: faster than a regex on short words
const PATH_CH = new Uint8Array(128);
for (const ch of 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.@+*?~/-')
  PATH_CH[ch.charCodeAt(0)] = 1;
function hasNotPath(s: string): boolean {
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c > 127 || PATH_CH[c] === 0) return true;
  }
  return false;
}
const SED_EXPR = /^(?:\d+(?:,\d+)?)?[sy]([^\w\s]).*\1.*\1[a-zA-Z0-9]*$/;
const _BARE_FILE = /^[\w@+][\w.@+-]*\.([A-Za-z0-9]{1,11})$/;

function words(s: string): Set<string> {
  return new Set(s.split(' '));
}

interface Segment {
  words: Tok[];
  /** index of the program word in `words`, after env assignments and wrappers */
  prog: number;
  /** output goes to a file (`> f`): a write, not a look */
  writes: boolean;
}

function bashFacts(cmd: string, cwd?: string): CallFacts {
  const toks = lex(cmd);
  const segs: Segment[] = [];
  let cur: Tok[] = [];
  const files: string[] = [];
  let redirNext = false;
  let redirOut = false;
  let writes = false;
  for (const t of toks) {
    if (t.op === 1) {
      if (cur.length) segs.push({ words: cur, prog: progIndex(cur), writes });
      cur = [];
      writes = false;
    } else if (t.op === 2) {
      redirNext = true;
      redirOut = t.text === '>';
    } else if (redirNext) {
      redirNext = false;
      if (!t.text.startsWith('/dev/')) {
        const f = normPath(t.text, cwd);
        if (!files.includes(f)) files.push(f);
        if (redirOut) writes = true;
      }
    } else {
      cur.push(t);
    }
  }
  if (cur.length) segs.push({ words: cur, prog: progIndex(cur), writes });

  let view = true;
  let lead: Segment | undefined;
  const nums: string[] = [];
  let gitCommit = false;
  let testLike = false;
  for (const s of segs) {
    const prog = s.prog < s.words.length ? baseName(s.words[s.prog].text) : '';
    if (prog === '' || NEUTRAL.has(prog)) continue;
    lead ??= s;
    if (!isView(s, prog)) view = false;
    if (prog === 'git' && isGitCommit(s)) gitCommit = true;
    if (!testLike && isTestCommand(s, prog)) testLike = true;
    for (let i = s.prog; i < s.words.length; i++) {
      const w = s.words[i];
      // a sed/perl expression (s/a/b/) looks like a path but is content
      if ((prog === 'sed' || prog === 'perl') && SED_EXPR.test(w.text)) numbersOf(w.text, nums);
      else scanWord(w, files, nums, cwd);
    }
  }
  if (lead === undefined) {
    // Only chatter (echo, cd): exact command.
    lead = segs[0];
    view = false;
  }
  const sorted = files.length > 1 ? files.sort() : files;
  const words = lead ? leadWords(lead) : [];
  const cls = view ? 'view' : words.join(' ');
  const key = `bash\0${cls}\0${sorted.join('\0')}\0${nums.join(',')}${sorted.length === 0 && words.length === 0 ? `\0${cmd.trim()}` : ''}`;
  let target: string;
  if (view && sorted.length) {
    target = sorted[0];
  } else {
    // the first two tokens; a runner verb keeps the script name (npm run build)
    const w = words.slice(0, RUN_VERBS.has(words[1]) ? 3 : 2);
    let first: string | undefined;
    for (const f of sorted) {
      if (!w.includes(f)) {
        first = f;
        break;
      }
    }
    target = w.join(' ') + (first && w.length < 2 ? ` ${first}` : '');
  }
  return facts(key, target, gitCommit, testLike);
}

function baseName(p: string): string {
  const i = p.lastIndexOf('/');
  return i < 0 ? p : p.slice(i + 1);
}

function progIndex(ws: Tok[]): number {
  let i = 0;
  while (i < ws.length) {
    const w = ws[i];
    if (!w.quoted && /^[A-Za-z_][A-Za-z0-9_]*=/.test(w.text)) {
      i++;
      continue;
    }
    const b = baseName(w.text);
    if (!w.quoted && WRAPPERS.has(b)) {
      i++;
      // the wrapper's own flags and arguments (timeout 30, nice -n 5, env A=1)
      while (
        i < ws.length &&
        (ws[i].text.startsWith('-') || /^\d+[smhd]?$/.test(ws[i].text) || /^\w+=/.test(ws[i].text))
      )
        i++;
      continue;
    }
    return i;
  }
  return i;
}

function isView(s: Segment, prog: string): boolean {
  const ws = s.words;
  if (s.writes) return false;
  if (prog === 'sed') {
    for (let i = s.prog + 1; i < ws.length; i++) if (/^(-i|--in-place)/.test(ws[i].text)) return false;
    return true;
  }
  if (prog === 'find') {
    for (let i = s.prog + 1; i < ws.length; i++) if (/^-(delete|exec|execdir|ok)$/.test(ws[i].text)) return false;
    return true;
  }
  if (VIEW.has(prog)) return true;
  // Inline inspection code (python3 -c "...open('f')..."): a look at a file, not a run.
  const next = ws[s.prog + 1];
  return INTERPRETERS.has(prog) && next !== undefined && INLINE_FLAGS.has(next.text);
}

/** The program and up to two bare subcommand words: `npm run build`, `git commit`, `python -m pytest`. */
function leadWords(s: Segment): string[] {
  const ws = s.words;
  if (s.prog >= ws.length) return [];
  const prog = ws[s.prog];
  const out = [prog.quoted ? '?' : sanitizeWord(baseName(prog.text))];
  const isGit = out[0] === 'git';
  for (let i = s.prog + 1; i < ws.length && out.length < 3; i++) {
    const w = ws[i];
    if (w.quoted) break;
    // git's global options come before its subcommand: git -c k=v -C dir commit
    if (isGit && out.length === 1 && /^(-c|-C|--git-dir|--work-tree|--namespace)$/.test(w.text)) {
      i++;
      continue;
    }
    if (isGit && out.length === 1 && w.text.startsWith('-')) continue;
    if (w.text === '-m' && out.length === 1 && INTERPRETERS.has(out[0])) continue; // python -m pytest
    if (!/^[A-Za-z][\w:.-]{0,31}$/.test(w.text) || isPathWord(w.text)) break;
    out.push(w.text);
  }
  return out;
}

function sanitizeWord(w: string): string {
  return w.length > 64 ? w.slice(0, 64) : w;
}

function isPathWord(w: string): boolean {
  if (w.includes('/')) return true;
  const dot = w.lastIndexOf('.');
  return (dot > 0 && EXT.has(w.slice(dot + 1).toLowerCase())) || NAMED_FILES.has(w);
}

/** Collect the file references and the numbers of one word (quoted strings included: `sed -n '10,20p'`). */
function scanWord(t: Tok, files: string[], nums: string[], cwd?: string): void {
  const text = t.text;
  if (text.includes('://')) return; // URLs are not files, and their numbers are not slices
  if (!hasNotPath(text)) scanChunk(text, files, nums, cwd);
  else for (const chunk of text.split(NOT_PATH)) if (chunk !== '') scanChunk(chunk, files, nums, cwd);
}

function scanChunk(chunk: string, files: string[], nums: string[], cwd?: string): void {
  if (isFileChunk(chunk)) {
    let f = chunk;
    while (f.endsWith('.') && f.length > 1) f = f.slice(0, -1);
    if (!f.startsWith('/dev/') && files.length < 16) {
      const n = normPath(f, cwd);
      if (!files.includes(n)) files.push(n);
    }
  } else if (nums.length < 8) {
    numbersOf(chunk, nums);
  }
}

function isFileChunk(c: string): boolean {
  const first = c.charCodeAt(0);
  if (c.includes('/')) return c.length > 1 && first !== 45; /* - */
  // a bare name.ext starts with [\w@+] (not '-' or '.')
  if (first === 45 || first === 46 || !(isIdentChar(first) || first === 64 || first === 43)) return false;
  const dot = c.lastIndexOf('.');
  if (dot <= 0 || dot === c.length - 1 || c.length - dot > 12) return NAMED_FILES.has(c);
  return EXT.has(c.slice(dot + 1).toLowerCase());
}

/** Digit runs that stand alone or follow a short flag (`-50`, `-n50`, `10,20p`), not `python3` or `utf8`. */
function numbersOf(chunk: string, nums: string[]): void {
  const n = chunk.length;
  for (let i = 0; i < n && nums.length < 8; i++) {
    const c = chunk.charCodeAt(i);
    if (c < 48 || c > 57) continue;
    let j = i + 1;
    while (j < n && chunk.charCodeAt(j) >= 48 && chunk.charCodeAt(j) <= 57) j++;
    const prev = i > 0 ? chunk.charCodeAt(i - 1) : 32;
    const glued = isIdentChar(prev) && !(i === 2 && chunk.charCodeAt(0) === 45);
    if (!glued) nums.push(chunk.slice(i, Math.min(j, i + 12)));
    i = j - 1;
  }
}

function isIdentChar(c: number): boolean {
  return (c >= 65 && c <= 90) || (c >= 97 && c <= 122) || c === 95 || c === 46 || (c >= 48 && c <= 57);
}

function isGitCommit(s: Segment): boolean {
  const ws = s.words;
  let i = s.prog + 1;
  while (i < ws.length && ws[i].text.startsWith('-')) {
    const t = ws[i].text;
    i += t === '-c' || t === '-C' || /^--(git-dir|work-tree|namespace)$/.test(t) ? 2 : 1;
  }
  if (i >= ws.length || ws[i].text !== 'commit') return false;
  for (let j = i + 1; j < ws.length; j++) if (ws[j].text === '--dry-run') return false;
  return true;
}

// TEST_COMMAND: test runners, linters and type checkers. A pass after a failed run of
// the same fingerprint is a landed fix.
const TEST_PROGRAMS = words(
  'pytest py.test vitest jest mocha ava tap tsc eslint ruff mypy pyright flake8 pylint phpunit rspec shellcheck ' +
    'golangci-lint tox nox ctest biome prettier stylelint rubocop unittest',
);
const RUNNER_SUBS: Record<string, RegExp> = {
  npm: /^(test|t|run (test|lint|check|typecheck|type-check|ci)\S*)$/,
  pnpm: /^(test|t|run (test|lint|check|typecheck|type-check)\S*|(test|lint|check|typecheck)\S*)$/,
  yarn: /^(test|run (test|lint|check|typecheck)\S*|(test|lint|check|typecheck)\S*)$/,
  bun: /^(test|run (test|lint|check|typecheck)\S*)$/,
  go: /^(test|vet)$/,
  cargo: /^(test|check|clippy|nextest)$/,
  make: /^(test|tests|check|lint|ci)\S*$/,
  deno: /^(test|lint|check)$/,
  mvn: /^(test|verify)$/,
  gradle: /^(test|check)$/,
  gradlew: /^(test|check)$/,
  dotnet: /^test$/,
  uv: /^run (pytest|ruff|mypy|pyright)$/,
};

function isTestCommand(s: Segment, prog: string): boolean {
  const ws = s.words;
  if (TEST_PROGRAMS.has(prog)) return true;
  let sub0: string | undefined;
  let sub1: string | undefined;
  for (let i = s.prog + 1; i < ws.length && i <= s.prog + 2; i++) {
    const w = ws[i];
    if (w.quoted || w.text.startsWith('-')) continue;
    if (sub0 === undefined) sub0 = w.text;
    else sub1 = w.text;
  }
  const runner = RUNNER_SUBS[prog];
  if (runner && sub0 !== undefined && (runner.test(sub0) || (sub1 !== undefined && runner.test(`${sub0} ${sub1}`))))
    return true;
  if ((prog === 'npx' || prog === 'bunx' || prog === 'pnpx') && sub0 !== undefined && TEST_PROGRAMS.has(baseName(sub0)))
    return true;
  if (INTERPRETERS.has(prog) && ws[s.prog + 1]?.text === '-m' && TEST_PROGRAMS.has(ws[s.prog + 2]?.text ?? ''))
    return true;
  // check.sh-like scripts: `sh check.sh`, `bash scripts/run-tests.sh`, `./test.sh`
  const script = prog === 'sh' || prog === 'bash' || prog === 'zsh' ? ws[s.prog + 1]?.text : ws[s.prog]?.text;
  return script?.endsWith('.sh') && /(^|\/)[\w.-]*(check|test|lint)[\w.-]*\.sh$/i.test(script);
}

// ---------------------------------------------------------------------------
// results and assistant text

// ONE normalisation of what a call returned and of what the model said, for any agent's
// sensor: (exit, output text) -> a result fingerprint, (assistant text) -> a text
// fingerprint. Only the sha256 leaves the sensor, never the text. What is removed is
// what changes between two runs of the same call when nothing else did: timestamps and
// clock times, epoch numbers, durations, pids, temp paths, UUIDs, memory addresses,
// terminal colours and line-end whitespace. What stays is everything else, numbers
// included: a poll whose counts move ("3 of 5 checks", a growing log) changes its
// result, an identical observation does not.

// One pass, the alternatives in priority order (a timestamp before a clock time before
// a duration). Groups: 1 ANSI escape, 2 ISO timestamp or date, 3 clock time, 4 UUID,
// 5 hex address, 6 temp path, 7 pid, 8 epoch seconds or ms, 9 duration.
const VOLATILE = new RegExp(
  [
    '(\\x1b\\[[0-9;?]*[ -/]*[@-~])',
    '(\\b\\d{4}-\\d{2}-\\d{2}(?:[T ]\\d{2}:\\d{2}(?::\\d{2}(?:[.,]\\d+)?)?(?:Z|[+-]\\d{2}:?\\d{2}|\\b))?(?!\\d))',
    '(\\b\\d{1,2}:\\d{2}:\\d{2}(?:[.,]\\d+)?(?!\\d)(?:\\s?[AP]M)?)',
    '(\\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\\b)',
    '(\\b0x[0-9a-fA-F]{6,16}\\b)',
    '((?<![\\w.~/-])(?:/private)?/(?:tmp|var/tmp|var/folders|dev/shm)/[^\\s\'"`<>|;,)\\]]*|[A-Za-z]:\\\\[^\\s]*\\\\Temp\\\\[^\\s\'"`<>|;,)\\]]*)',
    '(\\b(?:pid|PID|Pid|process|Process)\\b[\\s:=#]*\\d+)',
    '(\\b1[5-9]\\d{8}(?:\\d{3})?\\b)',
    '(\\b\\d+(?:\\.\\d+)?(?:ns|us|\\u00b5s|ms|s|m|h)(?:\\d+(?:\\.\\d+)?(?:ms|s|m))*\\b|\\b\\d+(?:\\.\\d+)?\\s(?:msec|ms|s|secs?|seconds?|mins?|minutes?|hours?)\\b)',
  ].join('|'),
  'g',
);
const PLACEHOLDER = ['', '', '<time>', '<time>', '<uuid>', '<addr>', '<tmp>', '<pid>', '<epoch>', '<dur>'];

function volatileReplacer(m: string, ...g: unknown[]): string {
  for (let i = 0; i < 9; i++) if (g[i] !== undefined) return PLACEHOLDER[i + 1];
  return m;
}

/** A call's output (or error text) with its volatile parts removed: the input of the result fingerprint. */
export function normalizeOutput(text: string): string {
  let s = text.indexOf('\r') >= 0 ? text.replace(/\r\n?/g, '\n') : text;
  s = s.replace(VOLATILE, volatileReplacer);
  // whitespace at line ends and at the end (padding that moves with the width of what was removed)
  return s.replace(/[ \t]+$/gm, '').replace(/\s+$/, '');
}

/**
 * sha256 of a call's normalised outcome: its exit (null: aborted or unknown) and its
 * output with the volatile parts removed. Two runs of one call with the same
 * fingerprint observed the same thing.
 */
export function resultFingerprint(exit: number | null | undefined, output: string): string {
  return sha256Hex(`${exit ?? 'null'}\0${normalizeOutput(output)}`);
}

/**
 * sha256 of an assistant message's visible text, normalised (volatile parts removed,
 * whitespace collapsed); undefined when there is no text. The same answer given twice
 * has the same fingerprint whatever its line wrapping.
 */
export function textFingerprint(text: string): string | undefined {
  const s = normalizeOutput(text).replace(/\s+/g, ' ').trim();
  return s === '' ? undefined : sha256Hex(`text\0${s}`);
}
