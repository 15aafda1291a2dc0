import { html } from 'htm/preact';
import { useEffect, useRef } from 'preact/hooks';
import uPlot from 'uplot';

const W = 72;
const H = 18;

function data(values: number[]): uPlot.AlignedData {
  return [values.map((_, i) => i), values];
}

/** A sparkline (uPlot, no axes, no legend); most recent point last. */
export function Spark({ values, label }: { values: number[]; label: string }) {
  const box = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | null>(null);
  useEffect(() => {
    if (!box.current) return;
    plot.current = new uPlot(
      {
        width: W,
        height: H,
        pxAlign: 0,
        cursor: { show: false },
        legend: { show: false },
        select: { show: false, left: 0, top: 0, width: 0, height: 0 },
        scales: { x: { time: false } },
        axes: [{ show: false }, { show: false }],
        series: [
          {},
          {
            stroke: '#2b6cb0',
            width: 1,
            fill: 'rgba(43,108,176,0.12)', // One or two samples draw no line: show them as points.
            points: { show: (u: uPlot) => u.data[0].length < 3, size: 3 },
          },
        ],
      },
      data(values),
      box.current,
    );
    return () => {
      plot.current?.destroy();
      plot.current = null;
    };
  }, []);
  useEffect(() => {
    plot.current?.setData(data(values));
  }, [values]);
  const last = values.length ? values[values.length - 1] : '-';
  return html`<div class="spark" ref=${box} role="img" aria-label=${`${label}, ${values.length} points, last ${last}`} title=${`${label}: last ${last}`}></div>`;
}
