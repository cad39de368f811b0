// Time-series charts: a thin Preact wrapper around uPlot (loaded as the global `uPlot` by
// index.html), and a rolling window of samples to feed it.
import { h } from "preact";
import { useEffect, useRef } from "preact/hooks";

const COLOURS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea"];

/** The last `size` samples of a few series, on one time axis (seconds since the epoch). */
export class Window {
  constructor(names, size = 120) {
    this.names = names;
    this.size = size;
    this.columns = [[], ...names.map(() => [])];
  }

  push(time, values) {
    this.columns[0].push(time);
    values.forEach((v, i) => this.columns[i + 1].push(v ?? null));
    if (this.columns[0].length > this.size) this.columns.forEach((c) => c.shift());
  }

  data() {
    return this.columns.map((c) => c.slice());
  }
}

/** A line chart of `window`, redrawn whenever `version` changes. */
export function LineChart({ id, window, version, unit }) {
  const box = useRef(null);
  const plot = useRef(null);
  useEffect(() => {
    const width = Math.max(280, box.current.clientWidth || 400);
    plot.current = new uPlot(
      {
        width,
        height: 180,
        series: [{}, ...window.names.map((label, i) => ({ label, stroke: COLOURS[i % COLOURS.length], width: 2 }))],
        axes: [{}, { label: unit, size: 60 }],
        scales: { y: { range: (u, min, max) => [0, Math.max(max ?? 0, 1) * 1.1] } },
        legend: { live: false },
      },
      window.data(),
      box.current,
    );
    return () => plot.current.destroy();
  }, [window]);
  useEffect(() => {
    if (plot.current) plot.current.setData(window.data());
  }, [version]);
  // What the chart shows, as attributes too: the browser tests (and a curious reader) can check it.
  const first = window.columns[1].filter((v) => v != null);
  return h("div", { id, class: "chart", ref: box, "data-points": first.length, "data-max": Math.max(0, ...first) });
}
