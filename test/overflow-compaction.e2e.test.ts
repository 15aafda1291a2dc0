import { Readable } from 'node:stream';
import Fastify, { type FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { emptyTree } from '../core/contracts.ts';
import type { Vigil } from '../core/vigil.ts';
import { estimateTokens, vigilGate } from '../service/router.ts';
import { http, until } from './fixtures/opencode-e2e/procs.ts';
import { testVigil } from './helpers/index.ts';
import { needsOpencode, type OpencodeLab, startOpencode } from './helpers/opencode.ts';

const HAVE_OPENCODE = needsOpencode(import.meta.filename);

// The `overflow` context-limit mechanism (modes.auto_limit_context.mechanism) against
// the real opencode 1.18.33: a fastify router embedding the Vigil gate sits between
// opencode and the scripted fake model. The conversation's tree is capped a little
// above its first request; as reads of a large file grow the prompt past the cap, the
// gate answers with a provider-shaped context-overflow error. opencode must take it for
// an overflow, compact on its own, and continue below the cap.

const BIG = Array.from({ length: 1000 }, (_, i) => `line ${String(i).padStart(4, '0')} ${'x'.repeat(30)}`).join('\n');
const SCRIPT = {
  title: 'Overflow probe',
  summary: '## Objective\n- read the big file\n\n## Work State\n- read big.txt',
  endText: 'Script finished.',
  steps: [{ tool: 'read', args: { filePath: '{{workdir}}/big.txt' }, repeat: 4 }, { text: 'done after compaction' }],
};

let vigil: Vigil;
let router: FastifyInstance;
let lab: OpencodeLab;
const answers: { status: number; tools: boolean; est: number }[] = [];

beforeAll(async () => {
  vigil = await testVigil({ backend: 'memory' });
  router = Fastify({ bodyLimit: 50 * 1024 * 1024 });
  let upstream = '';
  // Test scaffolding: the first agent turn of a conversation sets its tree's cap 12k
  // tokens above that turn's size, as auto_limit_context with mechanism overflow would.
  router.addHook('preHandler', async (req) => {
    const conv = req.headers['x-session-id'];
    const body = req.body as { tools?: unknown[] };
    if (typeof conv !== 'string' || !body?.tools?.length) return;
    const key = `tree:${conv}`;
    if (await vigil.store.get(key)) return;
    const now = Date.now();
    await vigil.store.set(key, {
      ...emptyTree(conv, now),
      limits: { '*': { max_context_tokens: estimateTokens(body) + 12_000, mechanism: 'overflow', since: now } },
    });
  });
  await router.register(vigilGate, { vigil });
  router.addHook('onSend', async (req, reply, payload) => {
    const body = req.body as { tools?: unknown[] };
    answers.push({ status: reply.statusCode, tools: Boolean(body?.tools?.length), est: estimateTokens(body) });
    return payload;
  });
  router.post('/v1/chat/completions', async (req, reply) => {
    const r = await fetch(`${upstream}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: String(req.headers.authorization ?? '') },
      body: JSON.stringify(req.body),
    });
    reply.code(r.status).header('content-type', r.headers.get('content-type') ?? 'application/json');
    return reply.send(r.body ? Readable.fromWeb(r.body as never) : '');
  });
  const addr = await router.listen({ host: '127.0.0.1', port: 0 });
  lab = await startOpencode({
    script: SCRIPT,
    files: { 'big.txt': BIG },
    modelUrl: (fake) => {
      upstream = fake;
      return addr;
    },
  });
}, 240_000);

afterAll(async () => {
  await lab?.stop();
  await router?.close();
  await vigil?.close();
}, 60_000);

interface Part {
  type: string;
  auto?: boolean;
  overflow?: boolean;
  text?: string;
}

describe.runIf(HAVE_OPENCODE)('mechanism (b): a context-overflow error from the router gate', () => {
  it('makes opencode 1.18.33 compact on its own and continue below the cap', async () => {
    const id = await lab.runSession('overflow', 'Read big.txt until you know it.');
    const messages = await until(
      'the session to settle',
      async () => {
        const r = await http<{ info: { time: { completed?: number }; role: string }; parts: Part[] }[]>(
          'GET',
          `${lab.url}/session/${id}/message`,
        );
        const all = r.data;
        return all.every((m) => m.info.role !== 'assistant' || m.info.time.completed) ? all : undefined;
      },
      { detail: lab.detail },
    );
    const parts = messages.flatMap((m) => m.parts);
    // The gate refused an agent turn over the cap with the overflow error ...
    const refused = answers.filter((a) => a.status === 400);
    expect(refused.length, JSON.stringify(answers)).toBeGreaterThanOrEqual(1);
    expect(refused.every((a) => a.tools)).toBe(true);
    // ... opencode took it for an overflow and compacted (its compaction request has no tools and passed) ...
    expect(parts.find((p) => p.type === 'compaction')).toMatchObject({ auto: true, overflow: true });
    expect(answers.some((a) => a.status === 200 && !a.tools)).toBe(true);
    // ... and continued from the summary, below the cap, to the end of the script.
    expect(parts.some((p) => p.type === 'text' && p.text === 'done after compaction')).toBe(true);
    const last = answers.filter((a) => a.tools).at(-1);
    expect(last?.status).toBe(200);
  }, 240_000);
});
