import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { Vigil } from '../../core/app.ts';
import {
  AgentSchema,
  IdSchema,
  ProgressEventSchema,
  RequestRecordSchema,
  TimestampSchema,
  VerdictLevelSchema,
} from '../../core/wire.ts';

/** The plugin names itself and its version in this header, so /health can show stale installs. */
export const PLUGIN_HEADER = 'x-vigil-plugin';
const MAX_BATCH = 500;

const oneOrMany = <T extends z.ZodType>(s: T) => z.union([s, z.array(s).min(1).max(MAX_BATCH)]);

export const ExternalVerdictSchema = z.strictObject({
  session_id: IdSchema,
  parent_session_id: IdSchema.nullable().optional(),
  agent: AgentSchema.optional(),
  level: VerdictLevelSchema,
  /** One line, no content. */
  reason: z
    .string()
    .max(300)
    .regex(/^[\x20-\x7e]*$/, 'printable ASCII'),
  source: z
    .string()
    .min(1)
    .max(64)
    .regex(/^[a-z0-9_.-]+$/)
    .default('watchdog'),
  /** The watchdog's local model, recorded beside the deterministic verdict. */
  second_opinion: z
    .strictObject({
      model: z.string().min(1).max(200),
      looping: z.boolean(),
      reason: z
        .string()
        .max(300)
        .regex(/^[\x20-\x7e]*$/, 'printable ASCII'),
    })
    .optional(),
});

export const HeartbeatSchema = z.strictObject({
  last_tick_at: TimestampSchema,
  result: z.strictObject({
    status: z.enum(['ok', 'flagged', 'idle', 'blind', 'error', 'skipped']),
    servers: z.number().int().min(0).max(10_000).default(0),
    sessions: z.number().int().min(0).max(1_000_000).default(0),
    flagged: z.number().int().min(0).max(1_000_000).default(0),
    model_calls: z.number().int().min(0).max(1_000_000).default(0),
    duration_ms: z.number().min(0).max(86_400_000).optional(),
    error: z.string().max(300).optional(),
  }),
});

const VerdictsOut = z.array(z.object({ session: z.string(), from: z.string(), to: z.string(), source: z.string() }));

export const ingestRoutes =
  (vigil: Vigil): FastifyPluginAsyncZod =>
  async (app) => {
    const pluginVersion = (h: unknown) => {
      if (typeof h !== 'string' || !/^[\x21-\x7e]{1,80}$/.test(h)) return undefined;
      // Bounded: any client can send any header value; keep the 50 most recent versions.
      vigil.health.plugins.delete(h);
      vigil.health.plugins.set(h, vigil.clock.now());
      if (vigil.health.plugins.size > 50)
        vigil.health.plugins.delete(vigil.health.plugins.keys().next().value as string);
      return h;
    };
    const rootsDirectives = async (sessions: Iterable<string>) => {
      const roots = new Set<string>();
      for (const s of sessions) roots.add(await vigil.detector.rootOf(s));
      if (roots.size === 1) return vigil.engine.directives.pending(roots.values().next().value as string);
      const out = [];
      for (const r of roots) out.push(...(await vigil.engine.directives.pending(r)));
      return out;
    };

    app.post(
      '/progress',
      {
        schema: {
          summary:
            'Progress events from the opencode plugin (one or a batch); answers the pending directives of their trees',
          body: oneOrMany(ProgressEventSchema),
        },
      },
      async (req, reply) => {
        const events = Array.isArray(req.body) ? req.body : [req.body];
        const changes = await vigil.engine.progress(events, {
          plugin_version: pluginVersion(req.headers[PLUGIN_HEADER]),
        });
        const directives = await rootsDirectives(
          events.length === 1 ? [events[0].session_id] : new Set(events.map((e) => e.session_id)),
        );
        return reply.code(202).send({
          accepted: events.length,
          verdicts: changes.map((c) => ({ session: c.session_id, from: c.from, to: c.to, source: c.source })),
          directives,
        });
      },
    );

    app.post(
      '/requests',
      {
        schema: {
          summary: 'LLM request records from the router (one or a batch)',
          body: oneOrMany(RequestRecordSchema),
          response: { 202: z.object({ accepted: z.number(), verdicts: VerdictsOut }) },
        },
      },
      async (req, reply) => {
        const records = Array.isArray(req.body) ? req.body : [req.body];
        const changes = await vigil.engine.requests(records);
        return reply.code(202).send({
          accepted: records.length,
          verdicts: changes.map((c) => ({ session: c.session_id, from: c.from, to: c.to, source: c.source })),
        });
      },
    );

    app.post(
      '/verdicts',
      {
        schema: {
          summary: 'Verdicts from outside the judge (the watchdog), tagged with their source',
          body: oneOrMany(ExternalVerdictSchema),
          response: { 202: z.object({ accepted: z.number(), verdicts: VerdictsOut }) },
        },
      },
      async (req, reply) => {
        const list = Array.isArray(req.body) ? req.body : [req.body];
        const changes = await vigil.engine.verdicts(list);
        return reply.code(202).send({
          accepted: list.length,
          verdicts: changes.map((c) => ({ session: c.session_id, from: c.from, to: c.to, source: c.source })),
        });
      },
    );

    app.post(
      '/watchdog/heartbeat',
      { schema: { summary: 'The watchdog reports each tick', body: HeartbeatSchema } },
      async (req, reply) => {
        vigil.health.watchdog = {
          last_tick_at: req.body.last_tick_at,
          result: req.body.result,
          received_at: vigil.clock.now(),
        };
        await vigil.store.set('watchdog:last', vigil.health.watchdog);
        vigil.events.emit('heartbeat', vigil.health.watchdog);
        // A blind watchdog (opencode's API changed shape) must not pass for "all healthy":
        // one warning, resolved by the next tick that reads again. Transitions only.
        const { status, error } = req.body.result;
        if (status === 'blind') {
          await vigil.notifier.notify({
            dedup_key: 'watchdog:blind',
            severity: 'warning',
            title: 'watchdog is blind',
            summary: `the watchdog cannot read opencode: ${error ?? 'unexpected API shape'}`.slice(0, 1024),
            source: 'watchdog',
          });
        } else if (status === 'ok' || status === 'flagged' || status === 'idle') {
          await vigil.notifier.notify({
            dedup_key: 'watchdog:blind',
            severity: 'warning',
            state: 'resolve',
            title: 'watchdog is blind',
            summary: 'the watchdog reads opencode again',
            source: 'watchdog',
          });
        }
        return reply.code(202).send({ ok: true });
      },
    );

    app.get(
      '/directives',
      {
        schema: {
          summary: 'Pending directives for a session tree (the plugin polls this while a session is refused)',
          querystring: z.strictObject({ session: IdSchema }),
        },
      },
      async (req) => ({ directives: await rootsDirectives([req.query.session]) }),
    );

    app.post(
      '/directives/ack',
      {
        schema: {
          summary: 'The plugin acknowledges directives it carried out',
          body: z.strictObject({
            acks: z
              .array(z.strictObject({ id: z.string().min(1).max(64), root_id: IdSchema }))
              .min(1)
              .max(MAX_BATCH),
          }),
        },
      },
      async (req) => ({ acknowledged: await vigil.engine.ack(req.body.acks) }),
    );
  };
