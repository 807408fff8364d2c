// Hand-written SVG charts: a multi-series line chart (learning curves) and a
// scatter plot (hyperparameter vs. metric). Each chart builds its <svg> once
// and redraws its contents only when the data changed.
import {h} from './dom.js';

const NS = 'http://www.w3.org/2000/svg';
const W = 760;
const H = 320;
const M = {left: 68, right: 18, top: 14, bottom: 46};
// The plot box every chart shares (profile_charts.js draws its own kinds in it).
export const CHART_BOX = {W, H, M};

export const PALETTE = ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd',
                        '#8c564b', '#e377c2', '#7f7f7f', '#bcbd22', '#17becf'];
export const colorFor = (id) => PALETTE[(Math.abs(Number(id)) + PALETTE.length - 1) % PALETTE.length];

// A trial may report up to --max-trial-metric-names (1,000) metric names:
// the trial page offers and tabulates at most MAX_SERIES of them (sorted,
// `keep` always among them) and says how many there are.
export const MAX_SERIES = 50;
export function capSeries(names, keep = []) {
  const kept = names.filter((n) => keep.includes(n));
  const shown = [...kept, ...names.filter((n) => !keep.includes(n)).slice(0, Math.max(0, MAX_SERIES - kept.length))];
  return {shown: shown.sort(), total: names.length};
}

export function s(tag, attrs = {}, ...children) {
  const el = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) if (v !== undefined && v !== null) el.setAttribute(k, String(v));
  for (const c of children) el.append(c);
  return el;
}

function title(text) {
  return s('title', {}, text);
}

// ~n "nice" ticks (1, 2, 5 x 10^k steps) covering [lo, hi].
export function niceTicks(lo, hi, n = 5) {
  if (!(hi > lo)) return [lo];
  const raw = (hi - lo) / n;
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const norm = raw / mag;
  const step = (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * mag;
  const out = [];
  for (let v = Math.ceil(lo / step - 1e-9) * step; v <= hi + step * 1e-9; v += step) {
    out.push(Math.abs(v) < step * 1e-9 ? 0 : v);
  }
  return out;
}

function logTicks(lo, hi) {
  const out = [];
  const a = Math.floor(Math.log10(lo));
  const b = Math.ceil(Math.log10(hi));
  const decades = Math.log10(hi / lo);  // the span shown, not the rounded one
  const mults = decades <= 2.5 ? [1, 2, 5] : decades <= 4 ? [1, 3] : [1];
  for (let e = a; e <= b; e++) {
    for (const m of mults) {
      const v = m * Math.pow(10, e);
      if (v >= lo * (1 - 1e-9) && v <= hi * (1 + 1e-9)) out.push(v);
    }
  }
  return out.length ? out : [lo, hi];
}

export function fmtTick(v) {
  if (v === 0) return '0';
  const a = Math.abs(v);
  if (a >= 1e5 || a < 1e-3) return v.toExponential(1).replace('e+', 'e');
  return String(Number(v.toPrecision(4)));
}

// A linear (or log) scale from the domain [d0, d1] to the range [r0, r1].
export function scale(d0, d1, r0, r1, log = false) {
  const f = log ? Math.log10 : (x) => x;
  const a = f(d0);
  const b = f(d1);
  const span = b - a || 1;
  return (x) => r0 + ((f(x) - a) / span) * (r1 - r0);
}

function padDomain(lo, hi, frac = 0.05) {
  if (lo === hi) {
    const d = Math.abs(lo) * 0.1 || 1;
    return [lo - d, hi + d];
  }
  const d = (hi - lo) * frac;
  return [lo - d, hi + d];
}

// Base of the charts: an <svg> with grid, axes, data and empty-text layers and
// a legend under it (also profile_charts.js's stacked chart).
export class Chart {
  constructor({testid, ariaLabel}) {
    this.svg = s('svg', {
      viewBox: `0 0 ${W} ${H}`, class: 'chart', 'data-testid': testid, role: 'img', 'aria-label': ariaLabel,
      preserveAspectRatio: 'xMidYMid meet',
    });
    this.gGrid = s('g', {class: 'grid'});
    this.gAxes = s('g', {class: 'axes'});
    this.gData = s('g', {class: 'data'});
    this.empty = s('text', {x: W / 2, y: H / 2, class: 'chart-empty', 'text-anchor': 'middle'});
    this.svg.append(this.gGrid, this.gAxes, this.gData, this.empty);
    this.legend = h('div', {class: 'legend', 'data-testid': `${testid}-legend`});
    this.el = h('div', {class: 'chart-wrap'}, this.svg, this.legend);
    this.sig = null;
  }

  showEmpty(text) {
    this.empty.textContent = text;
    this.gGrid.replaceChildren();
    this.gAxes.replaceChildren();
  }

  // Grid lines, ticks and axis titles. xTicks/yTicks: [{v, label}].
  drawAxes(sx, sy, xTicks, yTicks, xLabel, yLabel) {
    this.empty.textContent = '';
    const x0 = M.left;
    const x1 = W - M.right;
    const y0 = H - M.bottom;
    const y1 = M.top;
    const grid = [];
    const axes = [];
    for (const t of yTicks) {
      const y = sy(t.v);
      grid.push(s('line', {x1: x0, x2: x1, y1: y, y2: y}));
      axes.push(s('text', {x: x0 - 6, y: y + 4, 'text-anchor': 'end'}, t.label));
    }
    for (const t of xTicks) {
      const x = sx(t.v);
      grid.push(s('line', {x1: x, x2: x, y1: y0, y2: y1}));
      axes.push(s('text', {x, y: y0 + 16, 'text-anchor': 'middle'}, t.label));
    }
    axes.push(s('line', {class: 'axis-line', x1: x0, x2: x1, y1: y0, y2: y0}));
    axes.push(s('line', {class: 'axis-line', x1: x0, x2: x0, y1: y0, y2: y1}));
    axes.push(s('text', {class: 'axis-title', x: (x0 + x1) / 2, y: H - 8, 'text-anchor': 'middle'}, xLabel));
    axes.push(s('text', {
      class: 'axis-title', x: -(y0 + y1) / 2, y: 16, transform: 'rotate(-90)', 'text-anchor': 'middle',
    }, yLabel));
    this.gGrid.replaceChildren(...grid);
    this.gAxes.replaceChildren(...axes);
  }

  setLegend(items, onClick) {
    this.legend.replaceChildren(...items.map((it) => h('span', {
      class: 'legend-item', 'data-testid': `legend-${it.key}`, onclick: onClick ? () => onClick(it) : undefined,
    }, h('i', {class: 'swatch', style: `background:${it.color}`}), it.label)));
  }
}

// series: [{key, label, color, points: [[x, y], ...]}]; non-finite points
// are skipped. Each series is one <path data-testid="<lineTestId(key)>"
// data-points="<n>">.
export class LineChart extends Chart {
  constructor({testid = 'curve-svg', lineTestId = (k) => `curve-line-${k}`, ariaLabel = 'learning curves',
               onSeriesClick} = {}) {
    super({testid, ariaLabel});
    this.lineTestId = lineTestId;
    this.onSeriesClick = onSeriesClick;
  }

  update(series, {xLabel = 'batches', yLabel = '', emptyText = 'No data yet'} = {}) {
    const clean = series.map((sr) => ({
      ...sr, points: sr.points.filter(([x, y]) => Number.isFinite(x) && Number.isFinite(y)),
    }));
    const sig = JSON.stringify([xLabel, yLabel, emptyText, clean.map((sr) => [sr.key, sr.label, sr.color, sr.points])]);
    if (sig === this.sig) return;
    this.sig = sig;

    const all = clean.flatMap((sr) => sr.points);
    if (all.length === 0) {
      this.gData.replaceChildren();
      this.setLegend([]);
      this.showEmpty(emptyText);
      return;
    }
    let [xlo, xhi] = [Math.min(...all.map((p) => p[0])), Math.max(...all.map((p) => p[0]))];
    if (xlo === xhi) [xlo, xhi] = padDomain(xlo, xhi);
    const [ylo, yhi] = padDomain(Math.min(...all.map((p) => p[1])), Math.max(...all.map((p) => p[1])));
    const sx = scale(xlo, xhi, M.left, W - M.right);
    const sy = scale(ylo, yhi, H - M.bottom, M.top);
    this.drawAxes(sx, sy, niceTicks(xlo, xhi, 6).map((v) => ({v, label: fmtTick(v)})),
      niceTicks(ylo, yhi, 5).map((v) => ({v, label: fmtTick(v)})), xLabel, yLabel);

    const nodes = [];
    for (const sr of clean) {
      const d = sr.points.map(([x, y], i) => `${i ? 'L' : 'M'}${sx(x).toFixed(1)},${sy(y).toFixed(1)}`).join(' ');
      const g = s('g', {class: 'series', 'data-series': sr.key});
      const path = s('path', {
        d, class: 'line', stroke: sr.color, 'data-testid': this.lineTestId(sr.key), 'data-points': sr.points.length,
      }, title(sr.label));
      g.append(path);
      if (sr.points.length <= 60) {
        for (const [x, y] of sr.points) {
          g.append(s('circle', {cx: sx(x).toFixed(1), cy: sy(y).toFixed(1), r: 3, fill: sr.color},
            title(`${sr.label}\n${xLabel} ${fmtTick(x)}: ${y}`)));
        }
      }
      nodes.push(g);
    }
    this.gData.replaceChildren(...nodes);
    this.setLegend(clean.map((sr) => ({key: sr.key, label: sr.label, color: sr.color})), this.onSeriesClick);
  }
}

// points: [{key, x, y, color, label}], x numeric or (categorical) string.
// Each point is a <circle data-testid="scatter-point-<key>">.
export class ScatterChart extends Chart {
  constructor({testid = 'scatter-svg', ariaLabel = 'hyperparameter vs metric', onPointClick} = {}) {
    super({testid, ariaLabel});
    this.onPointClick = onPointClick;
  }

  update(points, {xLabel = '', yLabel = '', logX = false, emptyText = 'No validations yet'} = {}) {
    const sig = JSON.stringify([xLabel, yLabel, logX, emptyText, points]);
    if (sig === this.sig) return;
    this.sig = sig;
    const ok = points.filter((p) => Number.isFinite(p.y) && p.x !== undefined && p.x !== null);
    if (ok.length === 0) {
      this.gData.replaceChildren();
      this.showEmpty(emptyText);
      this.legend.replaceChildren();
      return;
    }
    const numeric = ok.every((p) => typeof p.x === 'number' && Number.isFinite(p.x));
    // 10% margins: a point (r = 6) at an extreme stays clear of the axes.
    const [ylo, yhi] = padDomain(Math.min(...ok.map((p) => p.y)), Math.max(...ok.map((p) => p.y)), 0.1);
    const sy = scale(ylo, yhi, H - M.bottom, M.top);
    let sx;
    let xTicks;
    if (numeric) {
      const xs = ok.map((p) => p.x);
      const useLog = logX && xs.every((x) => x > 0);
      let [xlo, xhi] = [Math.min(...xs), Math.max(...xs)];
      if (useLog) {
        const f = xlo === xhi ? 2 : Math.pow(xhi / xlo, 0.1);
        [xlo, xhi] = [xlo / f, xhi * f];
        xTicks = logTicks(xlo, xhi).map((v) => ({v, label: fmtTick(v)}));
      } else {
        [xlo, xhi] = padDomain(xlo, xhi, 0.1);
        xTicks = niceTicks(xlo, xhi, 6).map((v) => ({v, label: fmtTick(v)}));
      }
      sx = scale(xlo, xhi, M.left, W - M.right, useLog);
    } else {
      const cats = [...new Set(ok.map((p) => JSON.stringify(p.x)))].sort();
      const band = scale(-0.5, cats.length - 0.5, M.left, W - M.right);
      sx = (x) => band(cats.indexOf(JSON.stringify(x)));
      xTicks = cats.map((c) => ({v: JSON.parse(c), label: String(JSON.parse(c))}));
    }
    this.drawAxes(sx, sy, xTicks, niceTicks(ylo, yhi, 5).map((v) => ({v, label: fmtTick(v)})), xLabel, yLabel);
    const nodes = ok.map((p) => {
      const c = s('circle', {
        cx: sx(p.x).toFixed(1), cy: sy(p.y).toFixed(1), r: 6, fill: p.color, class: 'point',
        'data-testid': `scatter-point-${p.key}`, 'data-x': JSON.stringify(p.x), 'data-y': p.y,
      }, title(`${p.label}\n${xLabel} = ${p.x}\n${yLabel} = ${p.y}`));
      if (this.onPointClick) c.addEventListener('click', () => this.onPointClick(p));
      return c;
    });
    this.gData.replaceChildren(...nodes);
    this.legend.replaceChildren(h('span', {class: 'muted', text: `${ok.length} trial${ok.length === 1 ? '' : 's'}`}));
  }
}
