// The inline CSS and JavaScript of the HTML report (report_html.cc), kept in their own header
// so that report_html.cc reads as the page's structure. The script reads KVSTASH_DATA:
//   points: [[start_s, ttft_ms, e2e_ms, round, ok], ...], itl_ms: [...],
//   rounds: [[round (1-based), mean_ttft_ms, p50_ttft_ms], ...]
// and draws SVG charts into #charts.
//
// Thread safety: constants.
#pragma once

namespace kvstash::bench {

inline constexpr const char* kReportCss = R"CSS(
body { font: 14px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0; color: #1d2330; background: #f5f6f8; }
header { background: #1d2330; color: #fff; padding: 18px 28px; }
header h1 { margin: 0; font-size: 22px; font-weight: 600; }
.meta { margin: 4px 0 0; color: #aab3c5; }
#kvstash-report-status { margin: 8px 28px; color: #6b7385; font-size: 12px; }
#kvstash-report-status.error { color: #c62828; font-weight: 600; }
main { display: flex; flex-wrap: wrap; gap: 20px; padding: 0 28px 28px; }
section.table { flex: 0 0 340px; }
section.charts { flex: 1 1 600px; display: flex; flex-direction: column; gap: 20px; }
h2 { font-size: 15px; margin: 14px 0 8px; }
table.summary { border-collapse: collapse; width: 100%; background: #fff; box-shadow: 0 1px 2px #0002; }
table.summary th { text-align: left; font-weight: 400; padding: 3px 10px; color: #444c5e; }
table.summary td { text-align: right; padding: 3px 10px; font-variant-numeric: tabular-nums; }
table.summary tr:nth-child(odd) { background: #f0f2f6; }
table.summary tr.err th, table.summary tr.err td { color: #c62828; }
pre { background: #fff; padding: 8px; font-size: 11px; overflow-x: auto; box-shadow: 0 1px 2px #0002; }
.chart { background: #fff; box-shadow: 0 1px 2px #0002; padding: 10px 14px; }
.chart h3 { margin: 0 0 4px; font-size: 14px; }
.chart svg { width: 100%; height: auto; display: block; }
.chart .empty { color: #6b7385; padding: 30px; text-align: center; }
.axis text { font-size: 11px; fill: #556; }
.axis line, .axis path { stroke: #99a; }
.grid line { stroke: #e4e7ee; }
.legend text { font-size: 11px; fill: #333; }
)CSS";

inline constexpr const char* kReportScript = R"JS(
(function () {
  const SVG_NS = 'http://www.w3.org/2000/svg';
  const W = 760, H = 300, M = {left: 60, right: 20, top: 16, bottom: 42};
  const status = document.getElementById('kvstash-report-status');

  function el(name, attrs, parent) {
    const e = document.createElementNS(SVG_NS, name);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  function text(parent, x, y, s, attrs) {
    const t = el('text', Object.assign({x: x, y: y}, attrs || {}), parent);
    t.textContent = s;
    return t;
  }
  // About n round tick values covering [lo, hi].
  function ticks(lo, hi, n) {
    if (!(hi > lo)) hi = lo + 1;
    const raw = (hi - lo) / n, mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 5, 10].map(m => m * mag).find(s => s >= raw) || raw;
    const out = [];
    for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(+v.toPrecision(12));
    return out;
  }
  // Not Math.max(...a): spreading a long array overflows the call stack.
  function maxOf(a) { let m = -Infinity; for (const v of a) if (v > m) m = v; return m; }
  function minOf(a) { let m = Infinity; for (const v of a) if (v < m) m = v; return m; }
  function fmt(v) { return Math.abs(v) >= 1000 ? (v / 1000).toFixed(1) + 'k' : (+v.toPrecision(3)).toString(); }

  // A chart card with a title; returns {svg, x(v), y(v)} with axes for the given ranges.
  function frame(title, xLabel, yLabel, x0, x1, y0, y1, xIntegers) {
    const card = document.createElement('div');
    card.className = 'chart';
    const h = document.createElement('h3');
    h.textContent = title;
    card.appendChild(h);
    document.getElementById('charts').appendChild(card);
    const svg = el('svg', {viewBox: '0 0 ' + W + ' ' + H, class: 'kvstash-chart', role: 'img'}, card);
    if (!(x1 > x0)) x1 = x0 + 1;
    if (!(y1 > y0)) y1 = y0 + 1;
    const x = v => M.left + (v - x0) / (x1 - x0) * (W - M.left - M.right);
    const y = v => H - M.bottom - (v - y0) / (y1 - y0) * (H - M.top - M.bottom);
    const grid = el('g', {class: 'grid'}, svg), axis = el('g', {class: 'axis'}, svg);
    for (const t of ticks(y0, y1, 5)) {
      el('line', {x1: M.left, x2: W - M.right, y1: y(t), y2: y(t)}, grid);
      text(axis, M.left - 6, y(t) + 4, fmt(t), {'text-anchor': 'end'});
    }
    for (const t of ticks(x0, x1, 8).filter(v => !xIntegers || Number.isInteger(v))) {
      el('line', {x1: x(t), x2: x(t), y1: H - M.bottom, y2: H - M.bottom + 4}, axis);
      text(axis, x(t), H - M.bottom + 16, fmt(t), {'text-anchor': 'middle'});
    }
    el('path', {d: 'M' + M.left + ',' + M.top + 'V' + (H - M.bottom) + 'H' + (W - M.right), fill: 'none'}, axis);
    text(axis, (M.left + W - M.right) / 2, H - 6, xLabel, {'text-anchor': 'middle'});
    text(axis, 14, (M.top + H - M.bottom) / 2, yLabel,
         {'text-anchor': 'middle', transform: 'rotate(-90 14 ' + (M.top + H - M.bottom) / 2 + ')'});
    return {svg: svg, x: x, y: y, card: card};
  }
  function legend(svg, items) {
    const g = el('g', {class: 'legend'}, svg);
    items.forEach((it, i) => {
      const lx = W - M.right - 150, ly = M.top + 8 + i * 16;
      el('rect', {x: lx, y: ly - 8, width: 10, height: 10, fill: it[1]}, g);
      text(g, lx + 16, ly + 1, it[0]);
    });
  }

  function histogram(title, values, unit, yLabel, color) {
    if (values.length === 0) return emptyChart(title, 'no samples');
    const lo = minOf(values), hi = maxOf(values);
    const bins = Math.max(1, Math.min(40, Math.ceil(Math.sqrt(values.length))));
    const width = (hi - lo) / bins || 1;
    const counts = new Array(bins).fill(0);
    for (const v of values) counts[Math.min(bins - 1, Math.floor((v - lo) / width))]++;
    const f = frame(title, unit, yLabel, lo, lo + width * bins, 0, maxOf(counts));
    counts.forEach((c, i) => {
      const x0 = f.x(lo + i * width), x1 = f.x(lo + (i + 1) * width);
      el('rect', {x: x0 + 1, y: f.y(c), width: Math.max(1, x1 - x0 - 2), height: f.y(0) - f.y(c), fill: color},
         f.svg).appendChild(document.createElementNS(SVG_NS, 'title')).textContent = c + ' in ' + fmt(lo + i * width) + '–' + fmt(lo + (i + 1) * width) + ' ' + unit;
    });
    return 1;
  }

  function scatter(title, points) {
    if (points.length === 0) return emptyChart(title, 'no requests');
    const t1 = maxOf(points.map(p => p[0]));
    const ymax = maxOf(points.map(p => p[2]));
    const f = frame(title, 'send time (s)', 'latency (ms)', 0, t1, 0, ymax);
    for (const p of points) {
      if (p[4]) el('circle', {cx: f.x(p[0]), cy: f.y(p[1]), r: 2.5, fill: '#f39c12', 'fill-opacity': 0.8}, f.svg);
      el('circle', {cx: f.x(p[0]), cy: f.y(p[2]), r: 3, fill: p[4] ? '#2f6fdf' : '#d32f2f', 'fill-opacity': 0.75}, f.svg);
    }
    legend(f.svg, [['E2E latency', '#2f6fdf'], ['TTFT', '#f39c12'], ['failed request', '#d32f2f']]);
    return 1;
  }

  function roundLine(title, rounds) {
    if (rounds.length === 0) return 0;
    const f = frame(title, 'round', 'TTFT (ms)', 1, Math.max(2, rounds[rounds.length - 1][0]), 0,
                    maxOf(rounds.map(r => Math.max(r[1], r[2]))), true);
    [[1, '#2f6fdf', 'mean'], [2, '#8e44ad', 'p50']].forEach(([k, color]) => {
      el('polyline', {points: rounds.map(r => f.x(r[0]) + ',' + f.y(r[k])).join(' '), fill: 'none', stroke: color,
                      'stroke-width': 2}, f.svg);
      for (const r of rounds) el('circle', {cx: f.x(r[0]), cy: f.y(r[k]), r: 3.5, fill: color}, f.svg);
    });
    legend(f.svg, [['mean TTFT', '#2f6fdf'], ['p50 TTFT', '#8e44ad']]);
    return 1;
  }

  function emptyChart(title, why) {
    const card = document.createElement('div');
    card.className = 'chart';
    card.innerHTML = '<h3></h3><div class="empty"></div>';
    card.querySelector('h3').textContent = title;
    card.querySelector('.empty').textContent = why;
    document.getElementById('charts').appendChild(card);
    return 0;
  }

  try {
    const d = KVSTASH_DATA;
    const ok = d.points.filter(p => p[4]);
    let drawn = 0;
    drawn += histogram('Time to first token', ok.map(p => p[1]), 'TTFT (ms)', 'requests', '#2f6fdf');
    drawn += scatter('Latency over time', d.points);
    drawn += histogram('Inter-token latency', d.itl_ms, 'ITL (ms)', 'gaps', '#16a085');
    drawn += roundLine('TTFT per round', d.rounds);
    document.body.setAttribute('data-charts-drawn', String(drawn));
    status.textContent = 'ready: ' + drawn + ' charts';
  } catch (e) {
    status.className = 'error';
    status.textContent = 'report script failed: ' + e;
    throw e;
  }
})();
)JS";

}  // namespace kvstash::bench
