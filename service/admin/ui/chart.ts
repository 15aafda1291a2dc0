import { html } from 'htm/preact';
import { useEffect, useRef } from 'preact/hooks';
import uPlot from 'uplot';
import type { PanelChart } from '../../../core/contracts.ts';

// A panel's chart (Panel.chart): line series over times, drawn by uPlot. Series of one
// group share a colour (a model's total and its part in loops); dashed ones are parts.
// The panel's table beside it carries the same numbers for reading and for screen readers.

const COLOURS = ['#2b6cb0', '#c05621', '#2f855a', '#6b46c1', '#b83280', '#2c7a7b', '#975a16', '#4a5568'];

function axisValue(unit: string) {
  return (_u: uPlot, vals: number[]) => vals.map((v) => (unit === 'usd' ? `$${v.toFixed(v < 10 ? 2 : 0)}` : String(v)));
}

function data(c: PanelChart): uPlot.AlignedData {
  // uPlot's time scale counts seconds.
  return [c.x.map((t) => t / 1000), ...c.series.map((s) => s.values)];
}

export function Chart({ chart, title }: { chart: PanelChart; title: string }) {
  const box = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | null>(null);
  const shape = chart.series.map((s) => s.label).join('\n');
  useEffect(() => {
    if (!box.current) return;
    const groups = [...new Set(chart.series.map((s) => s.group ?? s.label))];
    plot.current = new uPlot(
      {
        width: Math.min(960, Math.max(480, box.current.clientWidth || 960)),
        height: 240,
        cursor: { drag: { x: false, y: false } },
        scales: { x: { time: true } },
        axes: [{}, { values: axisValue(chart.unit), size: 60 }],
        series: [
          {},
          ...chart.series.map((s) => {
            const colour = COLOURS[groups.indexOf(s.group ?? s.label) % COLOURS.length];
            return {
              label: s.label,
              stroke: colour,
              width: 2,
              ...(s.dashed ? { dash: [6, 4] } : { fill: `${colour}1a` }),
              points: { show: true, size: 5 },
              value: (_u: uPlot, v: number | null) =>
                v === null ? '-' : chart.unit === 'usd' ? `$${v.toFixed(2)}` : String(v),
            };
          }),
        ],
      },
      data(chart),
      box.current,
    );
    return () => {
      plot.current?.destroy();
      plot.current = null;
    };
    // A new set of series is a new chart; new values for the same series are setData.
  }, [shape]);
  useEffect(() => {
    plot.current?.setData(data(chart));
  }, [chart]);
  const last = chart.x.length;
  return html`<figure class="chart" data-chart=${title}>
    <figcaption>${title}</figcaption>
    <div ref=${box} role="img" aria-label=${`${title}: ${chart.series.length} series over ${last} points`}></div>
  </figure>`;
}
