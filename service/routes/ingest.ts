import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { Transition } from '../../core/contracts.ts';
import { AppError } from '../../core/errors.ts';
import type { Vigil } from '../../core/vigil.ts';
import {
  DirectiveAckSchema,
  ExternalVerdictSchema,
  IdSchema,
  ProgressEventSchema,
  RequestRecordSchema,
} from '../../core/wire.ts';
import { blindAlert } from '../../watchdog/blind.ts';
import { HeartbeatSchema } from '../../watchdog/wire.ts';
import { SENSOR_ROUTE } from '../auth.ts';
import { checkSessionKeys, namedSessions, withLiftedRoots } from '../session-keys.ts';

/** The plugin names itself and its version in this header, so /health can show stale installs. */
export const PLUGIN_HEADER = 'x-vigil-plugin';
/** The most items one body of a sensor route may hold. */
const MAX_BATCH = 500;

const oneOrMany = <T extends z.ZodType>(s: T) => z.union([s, z.array(s).min(1).max(MAX_BATCH)]);

const VerdictsOut = z.array(
  z.object({ session: z.string(), detector: z.string(), from: z.string(), to: z.string(), source: z.string() }),
);

/** The verdict changes an ingestion caused, as the API reports them (sessions only). */
const verdictsOf = (ts: readonly Transition[]) =>
  ts
    .filter((t) => t.subject.kind === 'session')
    .map((t) => ({ session: t.subject.id, detector: t.detector, from: t.from, to: t.to, source: t.source }));

export const ingestRoutes =
  (vigil: Vigil): FastifyPluginAsyncZod =>
  async (app) => {
    const srv = vigil.config.server;
    // Per client address (@fastify/rate-limit): a runaway or hostile sender gets 429s, others go on.
    // SENSOR_ROUTE: the ingestion token guards these (service/auth.ts).
    const config = { rateLimit: { max: srv.rate_limit.max, timeWindow: srv.rate_limit.window }, ...SENSOR_ROUTE };
    /** Event times outside [now - max_event_age, now + max_clock_skew] are refused, naming the field. */
    const checkTimes = (items: readonly { ts: number }[], many: boolean, field = 'ts') => {
      const now = vigil.clock.now();
      items.forEach((it, i) => {
        const where = many ? `body[${i}].${field}` : `body.${field}`;
        if (it.ts > now + srv.max_clock_skew) {
          throw new AppError(
            'BAD_INPUT',
            `${where}: more than ${srv.max_clock_skew / 1000} s ahead of the service clock`,
          );
        }
        if (it.ts < now - srv.max_event_age) {
          throw new AppError('BAD_INPUT', `${where}: older than server.max_event_age`);
        }
      });
    };
    // An outside verdict names its own source: a detector's name would pass it off as
    // Vigil's own judge (readouts, alerts, the breaker's evidence all show the source).
    const detectorTypes = new Set(vigil.engine.detectors().map((d) => d.type));
    const checkSources = (items: readonly { source: string }[], many: boolean) => {
      items.forEach((it, i) => {
        if (!detectorTypes.has(it.source)) return;
        throw new AppError(
          'BAD_INPUT',
          `${many ? `body[${i}]` : 'body'}.source: "${it.source}" is a detector of this service; an outside verdict names its own source (watchdog, ...)`,
        );
      });
    };
    const pluginVersion = (h: unknown) => {
      if (typeof h !== 'string' || !/^[\x21-\x7e]{1,80}$/.test(h)) return undefined;
      // Bounded: any client can send any header value; keep the 50 most recent versions.
      vigil.health.plugins.set(h, vigil.clock.now());
      return h;
    };
    app.post(
      '/progress',
      {
        config,
        schema: {
          summary:
            'Progress events from the opencode plugin (one or a batch); answers the pending directives of their trees',
          body: oneOrMany(ProgressEventSchema),
        },
      },
      async (req, reply) => {
        const events = Array.isArray(req.body) ? req.body : [req.body];
        checkTimes(events, Array.isArray(req.body));
        // The key check runs in the events' unit: its binding reads are checked by the
        // commit instead of taking a round trip of their own.
        const r = await vigil.ingest(events, { plugin_version: pluginVersion(req.headers[PLUGIN_HEADER]) }, async () =>
          checkSessionKeys(vigil, req, await withLiftedRoots(vigil, events)),
        );
        return reply.code(202).send({
          accepted: events.length,
          verdicts: verdictsOf(r.transitions),
          directives: r.directives,
        });
      },
    );

    app.post(
      '/requests',
      {
        config,
        schema: {
          summary: 'LLM request records from the router (one or a batch)',
          body: oneOrMany(RequestRecordSchema),
          response: { 202: z.object({ accepted: z.number(), verdicts: VerdictsOut }) },
        },
      },
      async (req, reply) => {
        const records = Array.isArray(req.body) ? req.body : [req.body];
        checkTimes(records, Array.isArray(req.body));
        const changes = await vigil.engine.requests(records);
        return reply.code(202).send({
          accepted: records.length,
          verdicts: verdictsOf(changes),
        });
      },
    );

    app.post(
      '/verdicts',
      {
        config,
        schema: {
          summary: 'Verdicts from outside the judge (the watchdog), tagged with their source',
          body: oneOrMany(ExternalVerdictSchema),
          response: { 202: z.object({ accepted: z.number(), verdicts: VerdictsOut }) },
        },
      },
      async (req, reply) => {
        const list = Array.isArray(req.body) ? req.body : [req.body];
        checkSources(list, Array.isArray(req.body));
        await checkSessionKeys(vigil, req, namedSessions(list));
        const changes = await vigil.engine.verdicts(list);
        return reply.code(202).send({
          accepted: list.length,
          verdicts: verdictsOf(changes),
        });
      },
    );

    app.post(
      '/watchdog/heartbeat',
      { config, schema: { summary: 'The watchdog reports each tick', body: HeartbeatSchema } },
      async (req, reply) => {
        checkTimes([{ ts: req.body.last_tick_at }], false, 'last_tick_at');
        await vigil.heartbeat(req.body, blindAlert(req.body.result));
        return reply.code(202).send({ ok: true });
      },
    );

    app.get(
      '/directives',
      {
        config,
        schema: {
          summary: 'Pending directives for a session tree (the plugin polls this while a session is refused)',
          querystring: z.strictObject({ session: IdSchema }),
        },
      },
      async (req) => {
        // The ids an ack names: only for the session's own sensor.
        await checkSessionKeys(vigil, req, [req.query.session]);
        return { directives: await vigil.engine.pendingFor(req.query.session) };
      },
    );

    app.post(
      '/directives/ack',
      {
        config,
        schema: {
          summary: 'The plugin acknowledges directives it carried out',
          body: DirectiveAckSchema,
        },
      },
      async (req) => {
        // An ack lifts a block or ends an abort: it takes the key of the session the directive was for.
        await checkSessionKeys(vigil, req, [...new Set(req.body.acks.map((a) => a.session_id))]);
        return { acknowledged: await vigil.engine.ack(req.body.acks) };
      },
    );
  };
