import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import type { Vigil } from '../core/vigil.ts';
import { type App, buildServer } from '../service/server.ts';
import { which } from './helpers/external.ts';
import { testVigil } from './helpers/index.ts';

// deploy/: the Prometheus alerting rules and the Grafana dashboard name only metrics a
// running service exports (read from its GET /metrics), each documented in docs/api.md;
// the rules file has the shape Prometheus loads, and promtool accepts it when installed
// (Debian's prometheus package ships it; .ci/run installs it).

const ROOT = join(import.meta.dirname, '..');
const RULES = join(ROOT, 'deploy', 'prometheus', 'vigil.rules.yml');
const DASHBOARD = join(ROOT, 'deploy', 'grafana', 'vigil.json');
/** Series Prometheus makes itself, not the service. */
const PROMETHEUS_OWN = new Set(['up']);

const KEYWORDS = new Set(['and', 'or', 'unless', 'bool', 'offset', 'inf', 'nan']);

/** The metric names a PromQL expression selects (functions, keywords, labels, strings and ranges left out). */
function metricNames(expr: string): string[] {
  const s = expr
    .replace(/"(?:[^"\\]|\\.)*"/g, '""')
    .replace(/\{[^}]*\}/g, '')
    .replace(/\[[^\]]*\]/g, '')
    .replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, '');
  const out: string[] = [];
  for (const m of s.matchAll(/(?<![A-Za-z0-9_:.])[A-Za-z_:][A-Za-z0-9_:]*/g)) {
    if (KEYWORDS.has(m[0].toLowerCase())) continue;
    if (
      s
        .slice((m.index ?? 0) + m[0].length)
        .trimStart()
        .startsWith('(')
    )
      continue; // a function
    out.push(m[0]);
  }
  return out;
}

interface Rule {
  alert?: string;
  expr?: string;
  for?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}

const rules = (): Rule[] =>
  (parse(readFileSync(RULES, 'utf8')) as { groups: { rules: Rule[] }[] }).groups.flatMap((g) => g.rules);

interface Panel {
  id: number;
  title: string;
  datasource?: { uid?: string };
  targets?: { expr?: string; refId?: string }[];
}
const dashboard = () =>
  JSON.parse(readFileSync(DASHBOARD, 'utf8')) as {
    panels: Panel[];
    templating: { list: { name: string; type: string }[] };
  };

let vigil: Vigil;
let app: App;
/** Every series name GET /metrics exposes (histograms with their _bucket, _sum, _count). */
let exported: Set<string>;

beforeAll(async () => {
  vigil = await testVigil({ backend: 'memory' });
  app = await buildServer(vigil);
  const text = (await app.inject({ method: 'GET', url: '/metrics' })).body;
  exported = new Set();
  for (const m of text.matchAll(/^# TYPE (\S+) (\S+)$/gm)) {
    exported.add(m[1]);
    if (m[2] === 'histogram') for (const x of ['_bucket', '_sum', '_count']) exported.add(m[1] + x);
  }
});
afterAll(async () => {
  await app?.close();
  await vigil?.close();
});

describe('deploy/prometheus/vigil.rules.yml', () => {
  it('covers deliveries failing, queue age, the watchdog and Redis, each rule complete', () => {
    const rs = rules();
    const names = rs.map((r) => r.alert);
    expect(new Set(names).size).toBe(names.length);
    expect(names).toEqual(
      expect.arrayContaining(['VigilDeliveriesFailing', 'VigilAlertQueueOld', 'VigilWatchdogStale', 'VigilRedisDown']),
    );
    for (const r of rs) {
      expect(r.alert, JSON.stringify(r)).toMatch(/^Vigil[A-Za-z]+$/);
      expect(typeof r.expr, r.alert).toBe('string');
      expect(['critical', 'warning'], r.alert).toContain(r.labels?.severity);
      expect(r.annotations?.summary, r.alert).toBeTruthy();
      if (r.for !== undefined) expect(r.for, r.alert).toMatch(/^\d+[smh]$/);
    }
  });

  it('every expression names metrics the service exports', () => {
    for (const r of rules()) {
      const used = metricNames(r.expr ?? '');
      expect(used.length, r.alert).toBeGreaterThan(0);
      for (const m of used) expect(exported.has(m) || PROMETHEUS_OWN.has(m), `${r.alert}: ${m}`).toBe(true);
    }
  });

  it.runIf(which('promtool'))('promtool check rules accepts it', () => {
    const out = execFileSync('promtool', ['check', 'rules', RULES], { encoding: 'utf8' });
    expect(out).toMatch(/SUCCESS: \d+ rules found/);
  });
});

describe('deploy/grafana/vigil.json', () => {
  it('every panel queries the dashboard datasource with expressions over exported metrics', () => {
    const d = dashboard();
    expect(d.templating.list).toContainEqual(expect.objectContaining({ name: 'datasource', type: 'datasource' }));
    const ids = d.panels.map((p) => p.id);
    expect(new Set(ids).size).toBe(ids.length);
    const seen = new Set<string>();
    for (const p of d.panels) {
      // biome-ignore lint/suspicious/noTemplateCurlyInString: Grafana's variable syntax, not a JS template
      expect(p.datasource?.uid, p.title).toBe('${datasource}');
      expect(p.targets?.length, p.title).toBeGreaterThan(0);
      for (const t of p.targets ?? []) {
        expect(t.refId, p.title).toMatch(/^[A-Z]$/);
        for (const m of metricNames(t.expr ?? '')) {
          expect(exported.has(m), `${p.title}: ${m}`).toBe(true);
          seen.add(m);
        }
      }
    }
    // the documented service metrics all have a panel
    const doc = readFileSync(join(ROOT, 'docs', 'api.md'), 'utf8');
    // a row may name several: | `a`, `b` | counter ... |
    const documented = [...doc.matchAll(/^\| (`vigil_[a-z_]+`(?:, `vigil_[a-z_]+`)*) \|/gm)].flatMap((m) =>
      [...m[1].matchAll(/`(vigil_[a-z_]+)`/g)].map((x) => x[1]),
    );
    expect(documented.length).toBeGreaterThan(10);
    for (const m of documented)
      expect(exported.has(m) || exported.has(`${m}_bucket`), `${m} documented, not exported`).toBe(true);
    for (const m of documented) {
      const shown = [...seen].some((s) => s === m || s.startsWith(`${m}_`));
      expect(shown, `no panel shows ${m}`).toBe(true);
    }
  });

  it('finds the metric names in PromQL', () => {
    expect(
      metricNames('histogram_quantile(0.99, sum by (le) (rate(vigil_delivery_seconds_bucket{channel="a b"}[5m])))'),
    ).toEqual(['vigil_delivery_seconds_bucket']);
    expect(metricNames('(time() - max(x_seconds) > 900) and (max(x_seconds) > 0)')).toEqual(['x_seconds', 'x_seconds']);
    expect(metricNames('up{job="vigil"} == 0 offset 5m')).toEqual(['up']);
  });
});
