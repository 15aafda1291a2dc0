import { Counter, Gauge } from 'prom-client';
import type { Metrics } from '../../core/metrics.ts';

// The ledger's and the budgets' Prometheus series, on the instance's registry (GET /metrics).

/** The ledger's Prometheus counters, on the instance's registry. */
export function moneyMetrics(m: Metrics, open: () => Promise<number>) {
  const registers = [m.registry];
  const byOutcome = ['model', 'outcome'] as const;
  return {
    spendUsd: new Counter({
      name: 'vigil_spend_usd_total',
      help: 'Dollars the request records reported, by model',
      labelNames: ['model'],
      registers,
    }),
    spendTokens: new Counter({
      name: 'vigil_spend_prompt_tokens_total',
      help: 'Prompt tokens of model calls (request records, or sensor events where no router reports), by model',
      labelNames: ['model'],
      registers,
    }),
    spendCalls: new Counter({
      name: 'vigil_spend_calls_total',
      help: 'Model calls counted, by model',
      labelNames: ['model'],
      registers,
    }),
    stretches: new Counter({
      name: 'vigil_ledger_stretches_total',
      help: 'Flagged stretches closed, by model and outcome (acted, budget, recovered, ended)',
      labelNames: byOutcome,
      registers,
    }),
    loopUsd: new Counter({
      name: 'vigil_ledger_usd_total',
      help: 'Dollars spent in closed flagged stretches, start to close, by model and outcome',
      labelNames: byOutcome,
      registers,
    }),
    loopUsdToFlag: new Counter({
      name: 'vigil_ledger_usd_before_flag_total',
      help: 'Dollars spent in closed flagged stretches before their flag, by model and outcome',
      labelNames: byOutcome,
      registers,
    }),
    loopCalls: new Counter({
      name: 'vigil_ledger_calls_total',
      help: 'Model calls in closed flagged stretches, by model and outcome',
      labelNames: byOutcome,
      registers,
    }),
    loopTokens: new Counter({
      name: 'vigil_ledger_prompt_tokens_total',
      help: 'Prompt tokens in closed flagged stretches, by model and outcome',
      labelNames: byOutcome,
      registers,
    }),
    budgetAlerts: new Counter({
      name: 'vigil_budget_alerts_total',
      help: 'Budget incidents raised, by scope (tree, agent, total) and level (warning, over)',
      labelNames: ['scope', 'level'],
      registers,
    }),
    budgetRefusals: new Counter({
      name: 'vigil_budget_refusals_total',
      help: 'Gate checks refused by a budget ceiling, by scope',
      labelNames: ['scope'],
      registers,
    }),
    open: new Gauge({
      name: 'vigil_ledger_open_stretches',
      help: 'Flagged stretches not closed yet',
      registers,
      async collect() {
        this.set(await open().catch(() => -1));
      },
    }),
  };
}
