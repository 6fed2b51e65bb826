// SVG charts: a multi-series line/scatter chart and a stacked bar chart. Sized by viewBox, so they scale
// with their card; points carry <title> tooltips.

import { h } from "./components.js";

const WIDTH = 860;
const MARGIN = { top: 14, right: 18, bottom: 38, left: 56 };

/** Round tick values covering [min, max]; `integer` keeps steps whole (counts, indexes). */
export function niceTicks(min, max, count = 5, integer = false) {
  if (!Number.isFinite(min) || !Number.isFinite(max)) return [0, 1];
  if (min === max) {
    const pad = Math.abs(min) > 0 ? Math.abs(min) * 0.1 : 1;
    min -= pad;
    max += pad;
  }
  const raw = (max - min) / count;
  const magnitude = 10 ** Math.floor(Math.log10(raw));
  let step = [1, 2, 2.5, 5, 10].map((m) => m * magnitude).find((s) => s >= raw) || raw;
  if (integer) step = Math.max(1, step === 2.5 * magnitude ? 2 * magnitude : Math.round(step));
  const ticks = [];
  for (let v = Math.floor(min / step) * step; v <= max + step * 1e-9; v += step) ticks.push(Number(v.toFixed(10)));
  if (ticks[ticks.length - 1] < max) ticks.push(ticks[ticks.length - 1] + step);
  return ticks;
}

/** Format tick values with as many decimals as their spacing needs ("0.2", "0.25", "1500"). */
export function tickFormat(ticks) {
  const step = ticks.length > 1 ? Math.abs(ticks[1] - ticks[0]) : 1;
  let decimals = 0;
  while (decimals < 6 && Math.abs(Math.round(step * 10 ** decimals) - step * 10 ** decimals) > 1e-6) decimals += 1;
  return (value) => value.toFixed(decimals);
}

function frame(height) {
  return { w: WIDTH - MARGIN.left - MARGIN.right, hgt: height - MARGIN.top - MARGIN.bottom };
}

function axes(svg, { xTicks, yTicks, sx, sy, xFormat, yFormat, xLabel, yLabel, height }) {
  const { w, hgt } = frame(height);
  const grid = h("g", { class: "grid" });
  for (const t of yTicks) {
    const y = sy(t);
    grid.append(h("line", { x1: MARGIN.left, x2: MARGIN.left + w, y1: y, y2: y }));
    grid.append(h("text", { x: MARGIN.left - 8, y: y + 4, "text-anchor": "end", class: "tick" }, yFormat(t)));
  }
  for (const t of xTicks) {
    const x = sx(t);
    grid.append(h("line", { x1: x, x2: x, y1: MARGIN.top + hgt, y2: MARGIN.top + hgt + 4, class: "tick-mark" }));
    grid.append(h("text", { x, y: MARGIN.top + hgt + 18, "text-anchor": "middle", class: "tick" }, xFormat(t)));
  }
  grid.append(h("line", { x1: MARGIN.left, x2: MARGIN.left + w, y1: MARGIN.top + hgt, y2: MARGIN.top + hgt, class: "axis" }));
  if (xLabel) grid.append(h("text", { x: MARGIN.left + w / 2, y: height - 4, "text-anchor": "middle", class: "axis-label" }, xLabel));
  if (yLabel) {
    grid.append(
      h("text", { x: 14, y: MARGIN.top + hgt / 2, "text-anchor": "middle", class: "axis-label", transform: `rotate(-90 14 ${MARGIN.top + hgt / 2})` }, yLabel),
    );
  }
  svg.append(grid);
}

function legend(series) {
  return h(
    "div",
    { class: "legend" },
    series
      .filter((s) => s.legend !== false)
      .map((s) => h("span", { class: "legend-item" }, h("span", { class: ["legend-swatch", s.style === "points" && "dot"], style: { background: s.color } }), s.name)),
  );
}

/**
 * Line/scatter chart. series: [{name, color, points: [{x, y, title}], style: "line" | "points", dashed, dots}].
 */
export function lineChart({ series, height = 280, xFormat = null, yFormat = null, xLabel = "", yLabel = "", xInteger = false, emptyText = "No data yet." }) {
  const all = series.flatMap((s) => s.points).filter((p) => Number.isFinite(p.x) && Number.isFinite(p.y));
  if (!all.length) return h("div", { class: "chart-empty" }, emptyText);
  const { w, hgt } = frame(height);
  const xs = all.map((p) => p.x);
  const ys = all.map((p) => p.y);
  const xTicks = niceTicks(Math.min(...xs), Math.max(...xs), 8, xInteger);
  const yTicks = niceTicks(Math.min(...ys), Math.max(...ys), 5);
  xFormat = xFormat || tickFormat(xTicks);
  yFormat = yFormat || tickFormat(yTicks);
  const [x0, x1] = [xTicks[0], xTicks[xTicks.length - 1]];
  const [y0, y1] = [yTicks[0], yTicks[yTicks.length - 1]];
  const sx = (x) => MARGIN.left + ((x - x0) / (x1 - x0 || 1)) * w;
  const sy = (y) => MARGIN.top + hgt - ((y - y0) / (y1 - y0 || 1)) * hgt;
  const svg = h("svg", { viewBox: `0 0 ${WIDTH} ${height}`, class: "chart", role: "img", "aria-label": yLabel || "chart" });
  axes(svg, { xTicks, yTicks, sx, sy, xFormat, yFormat, xLabel, yLabel, height });
  for (const s of series) {
    const pts = s.points.filter((p) => Number.isFinite(p.x) && Number.isFinite(p.y));
    const group = h("g", { class: ["series", `series-${s.key || s.name}`] });
    if (s.style === "points") {
      for (const p of pts) {
        group.append(h("circle", { cx: sx(p.x), cy: sy(p.y), r: 2.6, fill: s.color, "fill-opacity": 0.45 }, p.title && h("title", {}, p.title)));
      }
    } else if (pts.length) {
      const d = pts.map((p, i) => `${i ? "L" : "M"}${sx(p.x).toFixed(1)},${sy(p.y).toFixed(1)}`).join("");
      group.append(h("path", { d, fill: "none", stroke: s.color, "stroke-width": 2.2, "stroke-dasharray": s.dashed ? "6 4" : null }));
      if (s.dots !== false && pts.length <= 60) {
        for (const p of pts) {
          group.append(h("circle", { cx: sx(p.x), cy: sy(p.y), r: 3.2, fill: s.color }, p.title && h("title", {}, p.title)));
        }
      }
    }
    svg.append(group);
  }
  return h("div", { class: "chart-wrap" }, legend(series), svg);
}

/** Stacked bars. buckets: [{x, label, values: {key: n}}]; stacks: [{key, name, color}]. */
export function stackedBarChart({ buckets, stacks, height = 220, xFormat = String, yLabel = "", xLabel = "", emptyText = "No data yet." }) {
  if (!buckets.length) return h("div", { class: "chart-empty" }, emptyText);
  const { w, hgt } = frame(height);
  const totals = buckets.map((b) => stacks.reduce((sum, s) => sum + (b.values[s.key] || 0), 0));
  const yTicks = niceTicks(0, Math.max(1, ...totals), 4, true);
  const y1 = yTicks[yTicks.length - 1];
  const sy = (y) => MARGIN.top + hgt - (y / (y1 || 1)) * hgt;
  const band = w / buckets.length;
  const barWidth = Math.max(1, band * 0.78);
  const sx = (i) => MARGIN.left + i * band + band / 2;
  const every = Math.max(1, Math.ceil(buckets.length / 8));
  const xTickIdx = buckets.map((_, i) => i).filter((i) => i % every === 0);
  const svg = h("svg", { viewBox: `0 0 ${WIDTH} ${height}`, class: "chart", role: "img", "aria-label": yLabel || "bar chart" });
  axes(svg, {
    xTicks: xTickIdx,
    yTicks,
    sx,
    sy,
    xFormat: (i) => xFormat(buckets[i].x),
    yFormat: (v) => String(v),
    xLabel,
    yLabel,
    height,
  });
  const bars = h("g", { class: "bars" });
  buckets.forEach((bucket, i) => {
    let base = 0;
    const tip = [bucket.label, ...stacks.map((s) => `${s.name}: ${bucket.values[s.key] || 0}`)].join("\n");
    for (const s of stacks) {
      const v = bucket.values[s.key] || 0;
      if (!v) continue;
      bars.append(
        h("rect", { x: sx(i) - barWidth / 2, y: sy(base + v), width: barWidth, height: Math.max(0.5, sy(base) - sy(base + v)), fill: s.color, rx: 1.5 }, h("title", {}, tip)),
      );
      base += v;
    }
  });
  svg.append(bars);
  return h("div", { class: "chart-wrap" }, legend(stacks), svg);
}
