import 'reflect-metadata';
import { createServer } from 'node:http';
import { buildServer } from '../service/server.ts';
import { AGENTS, agentBin } from '../test/helpers/agents.ts';
import { codexLab } from '../test/helpers/codex.ts';
import { geminiLab } from '../test/helpers/gemini.ts';
import { testVigil } from '../test/helpers/index.ts';

// What Vigil's Codex and Gemini CLI hooks add to each tool call of the real CLI: the same
// scripted run of N distinct reads without Vigil's hooks (the baseline, measured in the
// same run), with them and Vigil up, with them and Vigil down (fail open). Medians of
// --rounds runs; the added time is (run - baseline) / N.
//
//   npm run bench:agent-hooks [-- --rounds 3] [-- --calls 12] [-- --only codex|gemini]

const argv = process.argv.slice(2);
const rounds = Number(argv[argv.indexOf('--rounds') + 1]) || 3;
const calls = Number(argv[argv.indexOf('--calls') + 1]) || 12;
const only = argv.includes('--only') ? argv[argv.indexOf('--only') + 1] : undefined;

const vigil = await testVigil({ backend: 'memory', overlay: { modes: { mode: 'warn' } } });
const app = await buildServer(vigil);
await app.listen({ port: 0, host: '127.0.0.1' });
const up = `http://127.0.0.1:${(app.server.address() as { port: number }).port}`;
const probe = createServer();
await new Promise<void>((r) => probe.listen(0, '127.0.0.1', r));
const down = `http://127.0.0.1:${(probe.address() as { port: number }).port}`;
await new Promise((r) => probe.close(r));

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

async function measure(
  name: string,
  lab: (o: {
    install: boolean;
    vigilUrl: string;
  }) => Promise<{ run: (p: string) => Promise<{ ms: number; exit: number | null }>; stop: () => Promise<void> }>,
) {
  const rows: Record<string, number[]> = { none: [], up: [], down: [] };
  for (let i = 0; i < rounds; i++) {
    for (const [k, install, url] of [
      ['none', false, up],
      ['up', true, up],
      ['down', true, down],
    ] as const) {
      const l = await lab({ install, vigilUrl: url });
      try {
        const r = await l.run('read them');
        if (r.exit !== 0) throw new Error(`${name} ${k}: exit ${r.exit}`);
        rows[k].push(r.ms);
      } finally {
        await l.stop();
      }
    }
  }
  const base = median(rows.none);
  console.log(`${name}: ${calls} tool calls, median of ${rounds} runs`);
  console.log(`  without Vigil's hooks (baseline)  ${base.toFixed(0)} ms`);
  for (const k of ['up', 'down'] as const) {
    const m = median(rows[k]);
    console.log(
      `  hooks, Vigil ${k.padEnd(4)}                 ${m.toFixed(0)} ms  (${(m / base).toFixed(2)}x; +${((m - base) / calls).toFixed(0)} ms per tool call)`,
    );
  }
}

const files = Array.from({ length: calls }, (_, i) => `f${i}.txt`);
if (only && only !== 'codex') {
  // skipped
} else if (agentBin(AGENTS.codex)) {
  await measure('Codex CLI 0.169.0', (o) =>
    codexLab({
      ...o,
      script: { steps: [...files.map((f) => ({ exec: `cat src/app.js ${f} 2>/dev/null; true` })), { text: 'done' }] },
    }),
  );
} else console.log('Codex CLI not installed: skipped (the e2e tier installs it)');
if (only && only !== 'gemini') {
  // skipped
} else if (agentBin(AGENTS.gemini)) {
  await measure('Gemini CLI 0.61.0', (o) =>
    geminiLab({
      ...o,
      script: {
        steps: [
          ...files.map((_, i) => ({
            tool: 'read_file',
            args: { file_path: '{{workdir}}/src/app.js', start_line: 1, end_line: i + 1 },
          })),
          { text: 'done' },
        ],
      },
    }),
  );
} else console.log('Gemini CLI not installed: skipped (the e2e tier installs it)');
await app.close();
await vigil.close();
