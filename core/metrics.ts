import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from 'prom-client';

/** Prometheus metrics of one Vigil instance (its own registry, so tests and embedders do not collide). */
export class Metrics {
  readonly registry = new Registry();
  readonly events = new Counter({
    name: 'vigil_progress_events_total',
    help: 'Progress events accepted, by kind',
    labelNames: ['kind'],
    registers: [this.registry],
  });
  readonly requests = new Counter({
    name: 'vigil_request_records_total',
    help: 'LLM request records accepted',
    registers: [this.registry],
  });
  readonly rejected = new Counter({
    name: 'vigil_rejected_bodies_total',
    help: 'Ingestion bodies rejected by validation, by route',
    labelNames: ['route'],
    registers: [this.registry],
  });
  readonly verdicts = new Counter({
    name: 'vigil_verdict_transitions_total',
    help: 'Verdict transitions, by the level reached and the source',
    labelNames: ['to', 'source'],
    registers: [this.registry],
  });
  readonly alerts = new Counter({
    name: 'vigil_alerts_total',
    help: 'Alert routing and delivery outcomes, by channel',
    labelNames: ['channel', 'outcome'],
    registers: [this.registry],
  });
  readonly deliveries = new Counter({
    name: 'vigil_deliveries_total',
    help: 'Delivery attempts by channel and outcome (delivered, retried, failed, suppressed)',
    labelNames: ['channel', 'outcome'],
    registers: [this.registry],
  });
  readonly deliverySeconds = new Histogram({
    name: 'vigil_delivery_seconds',
    help: 'From the transition to its delivery, by channel',
    labelNames: ['channel'],
    buckets: [0.01, 0.05, 0.1, 0.5, 1, 5, 15, 60, 300, 1800],
    registers: [this.registry],
  });
  readonly sessionsEvicted = new Counter({
    name: 'vigil_sessions_evicted_total',
    help: 'Sessions forgotten because more than detection.max_sessions were tracked',
    registers: [this.registry],
  });
  readonly gateErrors = new Counter({
    name: 'vigil_gate_errors_total',
    help: 'Gate checks that failed or timed out and were answered by gate.on_error',
    labelNames: ['answer'],
    registers: [this.registry],
  });
  readonly gate = new Counter({
    name: 'vigil_gate_answers_total',
    help: 'Gate answers, by action',
    labelNames: ['action'],
    registers: [this.registry],
  });
  readonly judgeSeconds = new Histogram({
    name: 'vigil_judge_seconds',
    help: 'Time to judge one input (load state, judge, save, roll up)',
    buckets: [0.00001, 0.00005, 0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1],
    registers: [this.registry],
  });
  readonly detectionSeconds = new Histogram({
    name: 'vigil_detection_seconds',
    help: 'From the input that flagged a session (its event time) to the verdict: sensor delay plus judging',
    buckets: [0.01, 0.05, 0.1, 0.5, 1, 5, 15, 60, 300, 1800],
    registers: [this.registry],
  });
  readonly queueDepth: Gauge;
  readonly queueOldest: Gauge;
  readonly storeUp: Gauge;
  readonly watchdogTick: Gauge;
  private processMetrics = false;
  /** Labelled children resolved once: the hot path does no label hashing. */
  private readonly byKind = new Map<string, Counter.Internal>();

  /** Counts one progress event of `kind`. */
  event(kind: string): void {
    let c = this.byKind.get(kind);
    if (!c) {
      c = this.events.labels(kind);
      this.byKind.set(kind, c);
    }
    c.inc();
  }

  /** Records the judge's time for one input started at `t0` (performance.now()). */
  judged(t0: number): void {
    this.judgeSeconds.observe((performance.now() - t0) / 1000);
  }

  /** Records how long after its input's event time a session was flagged. */
  detected(eventTs: number, now: number): void {
    this.detectionSeconds.observe(Math.max(0, now - eventTs) / 1000);
  }

  /** Adds the process metrics (CPU, memory, event loop lag, handles): once, for the service. */
  collectProcess(): void {
    if (this.processMetrics) return;
    this.processMetrics = true;
    collectDefaultMetrics({ register: this.registry });
  }

  /**
   * `depth`: jobs waiting, delayed or running. `oldest`: the time (epoch ms) of the
   * oldest such job's alert, when the queue can tell; `now` for its age.
   */
  constructor(
    depth: () => Promise<number>,
    oldest?: () => Promise<number | undefined>,
    now: () => number = Date.now,
    /** `up`: whether the store answers; `watchdog`: the time (epoch ms) of the watchdog's last tick, when one reported. */
    more: { up?: () => Promise<boolean>; watchdog?: () => Promise<number | undefined> } = {},
  ) {
    this.queueDepth = new Gauge({
      name: 'vigil_alert_queue_depth',
      help: 'Alert deliveries waiting, delayed or running',
      registers: [this.registry],
      async collect() {
        this.set(await depth().catch(() => -1));
      },
    });
    this.queueOldest = new Gauge({
      name: 'vigil_alert_queue_oldest_seconds',
      help: 'Age of the oldest alert delivery still waiting, delayed or running (0 when none)',
      registers: [this.registry],
      async collect() {
        if (!oldest) return;
        const at = await oldest().catch(() => undefined);
        this.set(at === undefined ? 0 : Math.max(0, now() - at) / 1000);
      },
    });
    // The two an operator alerts on besides deliveries: Redis gone, and the watchdog silent.
    this.storeUp = new Gauge({
      name: 'vigil_store_up',
      help: 'Whether the store answers: 1, or 0 when Redis does not (the memory backend is always 1)',
      registers: [this.registry],
      async collect() {
        if (more.up) this.set((await more.up().catch(() => false)) ? 1 : 0);
      },
    });
    this.watchdogTick = new Gauge({
      name: 'vigil_watchdog_last_tick_timestamp_seconds',
      help: "Time of the watchdog's last tick as it reported it (unix seconds; 0 before any report)",
      registers: [this.registry],
      async collect() {
        if (!more.watchdog) return;
        const at = await more.watchdog().catch(() => undefined);
        this.set(at === undefined ? 0 : at / 1000);
      },
    });
  }
}
