// The trial page's profile (issue 48; loaded beside app.js, which stays
// unchanged): a "Where the time goes" card under the metric curves, drawn
// from the trial's `profiling` and `system` metric rows (the trial runtime
// writes them when the experiment config has `profiling: {enabled: true}`;
// docs/guides/profiling.md). Read through the same REST route as the other
// metrics, GET /api/v1/trials/<id>/metrics (GetTrialMetrics):
//   - `profiling` at full resolution, page by page (at most MAX_ROWS rows;
//     while the trial runs, only the rows from the last one read on),
//     summed into at most MAX_BARS bars of consecutive windows: the stacked
//     chart of each phase's seconds (or its share of the wall time), and a
//     table of every phase's seconds and share like `det-cli trial profile`;
//   - `system` downsampled by the master (at most 500 points per series):
//     line charts of the CPU ratio, RSS and, when the trial had GPUs, each
//     GPU's utilisation and memory used, against seconds since profiling
//     started.
// Without profiling rows the card holds one line saying how to enable it.
// Refreshed every REFRESH_MS while the trial runs (its state badge is not
// terminal) and the tab is visible; once more after it ended.
import {apiGet} from './api.js';
import {CHART_BOX, Chart, LineChart, PALETTE, fmtTick, niceTicks, s as svg, scale} from './charts.js';
import {h, setHidden, setText, syncRows} from './dom.js';

const REFRESH_MS = 3000;
const PAGE = 2000;
const MAX_ROWS = 50000;  // the master's bound per trial and group (docs/guides/profiling.md)
const MAX_BARS = 120;
const SYSTEM_POINTS = 500;
const MAX_GPUS = 64;

export const PHASES = [
  ['data_loader_s', 'data loader'], ['forward_s', 'forward'], ['backward_s', 'backward'],
  ['allreduce_s', 'all-reduce'], ['optimizer_step_s', 'optimizer step'], ['checkpoint_s', 'checkpoint'],
  ['validation_s', 'validation'], ['runtime_s', 'runtime'],
  ['unattributed_s', 'unattributed'],  // in no phase (0 for trials profiled before it existed)
];
const TERMINAL = ['STATE_COMPLETED', 'STATE_CANCELED', 'STATE_ERROR', 'STATE_DELETING'];

// A metric of a report as a finite, non-negative number (else 0).
function val(r, name) {
  const v = Number(r.metrics ? r.metrics[name] : undefined);
  return Number.isFinite(v) && v > 0 ? v : 0;
}

// Consecutive windows summed into at most `maxBars` bars, each keyed by the
// batch of its last window.
export function bucketWindows(rows, maxBars = MAX_BARS) {
  const per = Math.max(1, Math.ceil(rows.length / maxBars));
  const bars = [];
  for (let i = 0; i < rows.length; i += per) {
    const bar = {batch: 0, wall: 0, phases: Object.fromEntries(PHASES.map(([m]) => [m, 0]))};
    for (const r of rows.slice(i, i + per)) {
      bar.batch = Number(r.total_batches) || 0;
      bar.wall += val(r, 'wall_s');
      for (const [m] of PHASES) bar.phases[m] += val(r, m);
    }
    bars.push(bar);
  }
  return bars;
}

// Stacked bars, one per bucket: each phase is a <g data-testid=
// "profile-phase-<metric>" data-seconds="<sum>"> of <rect>s; `share` stacks
// each bar's phases to 100% of its wall time.
class StackedBars extends Chart {
  constructor() {
    super({testid: 'profile-chart', ariaLabel: 'where the time goes'});
  }

  update(bars, share) {
    const sig = JSON.stringify([bars, share]);
    if (sig === this.sig) return;
    this.sig = sig;
    if (!bars.length) {
      this.gData.replaceChildren();
      this.showEmpty('No profiled windows yet');
      return;
    }
    const {W, H, M} = CHART_BOX;
    const height = (b, m) => (share ? (b.wall > 0 ? b.phases[m] / b.wall : 0) : b.phases[m]);
    const top = share ? 1 : Math.max(...bars.map((b) => PHASES.reduce((a, [m]) => a + height(b, m), 0))) || 1;
    const sy = scale(0, top * 1.05, H - M.bottom, M.top);
    const band = (W - M.left - M.right) / bars.length;
    const sx = (i) => M.left + i * band;
    const xTicks = niceTicks(0, bars.length - 1, Math.min(6, bars.length)).filter((i) => Number.isInteger(i))
      .map((i) => ({v: i, label: String(bars[i].batch)}));
    const yTicks = niceTicks(0, top * 1.05, 5).map((v) => ({v, label: share ? `${Math.round(v * 100)}%` : fmtTick(v)}));
    this.drawAxes((i) => sx(i) + band / 2, sy, xTicks, yTicks, 'batch (last of the window)',
      share ? 'share of wall time' : 'seconds');
    const base = bars.map(() => 0);
    const groups = PHASES.map(([m, label], k) => {
      const g = svg('g', {'data-testid': `profile-phase-${m}`, fill: PALETTE[k],
        'data-seconds': bars.reduce((a, b) => a + b.phases[m], 0)});
      bars.forEach((b, i) => {
        const v = height(b, m);
        if (v <= 0) return;
        const y0 = sy(base[i]);
        const y1 = sy(base[i] + v);
        base[i] += v;
        g.append(svg('rect', {x: (sx(i) + band * 0.1).toFixed(1), width: Math.max(1, band * 0.8).toFixed(1),
          y: y1.toFixed(1), height: Math.max(0, y0 - y1).toFixed(1)},
        svg('title', {}, `${label} at batch ${b.batch}: ${b.phases[m].toFixed(3)} s` +
          (b.wall > 0 ? ` (${(100 * b.phases[m] / b.wall).toFixed(1)}%)` : ''))));
      });
      return g;
    });
    this.gData.replaceChildren(...groups);
    this.setLegend(PHASES.map(([m, label], k) => ({key: `profile-${m}`, label, color: PALETTE[k]})));
  }
}

// The `profiling` rows (GetTrialMetrics full_resolution, page after page):
// all of them when `have` is empty, else `have` with its rows from the last
// one's batch on read again (the master adds a window that closes at the
// same batch into that batch's row).
async function loadWindows(id, have = []) {
  const last = have.length ? Number(have[have.length - 1].total_batches) || 0 : 0;
  const rows = last > 0 ? have.filter((r) => Number(r.total_batches) < last) : [];
  let after = last > 0 ? `&after_total_batches=${last - 1}` : '';
  while (rows.length < MAX_ROWS) {
    const r = await apiGet(`/api/v1/trials/${id}/metrics?group=profiling&full_resolution=true&limit=${PAGE}${after}`);
    rows.push(...(r.metrics || []));
    if (!r.has_more || !r.metrics || !r.metrics.length) break;
    after = `&after_total_batches=${r.next_after_total_batches || 0}&after_id=${r.next_after_id || 0}`;
  }
  return rows.slice(0, MAX_ROWS);
}

// Seconds since the first sample: [[x, value], ...] of `name` (rows lacking it skipped).
function timeSeries(rows, name, f = (v) => v) {
  const t = (r) => Date.parse(String(r.end_time || '').replace(/(\.\d{3})\d+/, '$1'));
  const t0 = rows.length ? t(rows[0]) : 0;
  return rows.filter((r) => r.metrics && r.metrics[name] !== undefined)
    .map((r) => [(t(r) - t0) / 1000, f(Number(r.metrics[name]))]);
}

function gpuIndexes(rows) {
  const out = new Set();
  for (const r of rows) {
    for (const k of Object.keys(r.metrics || {})) {
      const m = /^gpu(\d{1,2})_(utilization_ratio|memory_used_bytes)$/.exec(k);
      if (m && Number(m[1]) < MAX_GPUS) out.add(Number(m[1]));
    }
  }
  return [...out].sort((a, b) => a - b);
}

class ProfileCard {
  constructor(id) {
    this.id = id;
    this.share = h('input', {type: 'checkbox', id: 'profile-share', 'data-testid': 'profile-share',
      onchange: () => this.render()});
    this.chart = new StackedBars();
    this.table = h('tbody');
    this.hint = h('p', {class: 'muted', 'data-testid': 'profile-hint', hidden: true,
      text: 'No profile recorded for this trial. To see where its time goes, set profiling: {enabled: true} in the ' +
            'experiment config (docs/guides/profiling.md); det-cli trial profile ID prints the same as a table.'});
    this.summary = h('p', {class: 'muted', 'data-testid': 'profile-summary'});
    const line = (testid, label) => new LineChart({testid, ariaLabel: label, lineTestId: (k) => `${testid}-line-${k}`});
    this.cpu = line('system-cpu-chart', 'process CPU');
    this.rss = line('system-rss-chart', 'process RSS');
    this.gpuUtil = line('system-gpu-util-chart', 'GPU utilisation');
    this.gpuMem = line('system-gpu-memory-chart', 'GPU memory used');
    this.gpuCharts = h('div', {class: 'grid2', hidden: true}, this.gpuUtil.el, this.gpuMem.el);
    this.body = h('div', {hidden: true},
      h('div', {class: 'controls'}, h('label', {}, this.share, ' share of wall time (stacked to 100%)')),
      h('div', {class: 'grid2'}, this.chart.el, h('div', {}, this.summary,
        h('div', {class: 'table-wrap'}, h('table', {'data-testid': 'profile-table'},
          h('thead', {}, h('tr', {}, ['Phase', 'Seconds', 'Share'].map((c) => h('th', {text: c})))), this.table)))),
      h('h4', {text: 'System (rank 0)'}), h('div', {class: 'grid2'}, this.cpu.el, this.rss.el), this.gpuCharts);
    this.el = h('section', {class: 'card', 'data-testid': 'profile-card'},
      h('h3', {text: 'Where the time goes'}), this.hint, this.body);
    this.windows = [];
    this.system = [];
    this.loadedTerminal = false;
    this.loadedOnce = false;
    this.busy = false;
  }

  async refresh(state) {
    if (this.busy || this.loadedTerminal) return;
    this.busy = true;
    try {
      const terminal = TERMINAL.includes(state);
      // Once the trial ended, everything once more (a restart archives rows).
      const [windows, sys] = await Promise.all([loadWindows(this.id, terminal ? [] : this.windows),
        apiGet(`/api/v1/trials/${this.id}/metrics?group=system&limit=${SYSTEM_POINTS}`)]);
      this.windows = windows;
      this.system = sys.metrics || [];
      this.loadedTerminal = terminal;
      this.loadedOnce = true;
      this.render();
    } catch {
      // The next refresh tries again; the trial page shows the master's errors.
    } finally {
      this.busy = false;
    }
  }

  render() {
    const has = this.windows.length > 0;
    setHidden(this.hint, has);
    setHidden(this.body, !has);
    if (!has) return;
    this.chart.update(bucketWindows(this.windows), this.share.checked);
    const wall = this.windows.reduce((a, r) => a + val(r, 'wall_s'), 0);
    const sum = (m) => this.windows.reduce((a, r) => a + val(r, m), 0);
    syncRows(this.table, PHASES, ([m]) => m, ([m]) => h('tr', {'data-testid': `profile-row-${m}`},
      h('td'), h('td', {class: 'num'}), h('td', {class: 'num', 'data-testid': `profile-share-${m}`})),
    (tr, [m, label]) => {
      const secs = sum(m);
      setText(tr.children[0], label);
      setText(tr.children[1], secs.toFixed(3));
      setText(tr.children[2], wall > 0 ? `${(100 * secs / wall).toFixed(1)}%` : '–');
    });
    const batches = sum('batches');
    const samples = sum('samples');
    setText(this.summary, `${this.windows.length} windows, ${wall.toFixed(3)} s of wall time: ` +
      `${wall > 0 ? (batches / wall).toFixed(2) : '–'} batches/s, ${wall > 0 ? (samples / wall).toFixed(2) : '–'} samples/s`);
    this.renderSystem();
  }

  renderSystem() {
    const rows = this.system;
    const mib = (v) => v / (1024 * 1024);
    this.cpu.update([{key: 'cpu', label: 'CPU ratio (cores busy)', color: PALETTE[0],
      points: timeSeries(rows, 'cpu_ratio')}], {xLabel: 'seconds', yLabel: 'CPU ratio', emptyText: 'No samples yet'});
    this.rss.update([{key: 'rss', label: 'RSS (MiB)', color: PALETTE[1], points: timeSeries(rows, 'rss_bytes', mib)}],
      {xLabel: 'seconds', yLabel: 'RSS (MiB)', emptyText: 'No samples yet'});
    const gpus = gpuIndexes(rows);
    setHidden(this.gpuCharts, gpus.length === 0);
    if (!gpus.length) return;
    this.gpuUtil.update(gpus.map((g) => ({key: `gpu${g}`, label: `GPU ${g}`, color: PALETTE[g % PALETTE.length],
      points: timeSeries(rows, `gpu${g}_utilization_ratio`, (v) => 100 * v)})), {xLabel: 'seconds', yLabel: 'utilisation (%)'});
    this.gpuMem.update(gpus.map((g) => ({key: `gpu${g}`, label: `GPU ${g}`, color: PALETTE[g % PALETTE.length],
      points: timeSeries(rows, `gpu${g}_memory_used_bytes`, mib)})), {xLabel: 'seconds', yLabel: 'memory used (MiB)'});
  }
}

let current = null;

// Puts the card on the trial page now showing (under its metric curves).
function attach() {
  const view = document.querySelector('[data-testid="trial-view"]');
  const m = /^#\/trials\/([0-9]+)\/?$/.exec(window.location.hash);
  if (!view || !m) return null;
  if (current && current.id === m[1] && view.contains(current.el)) return current;
  const anchor = view.querySelector('.grid2');
  if (!anchor) return null;
  current = new ProfileCard(m[1]);
  anchor.after(current.el);
  return current;
}

function tick() {
  if (document.hidden) return;
  const card = attach();
  if (!card) return;
  const badge = document.querySelector(`[data-testid="trial-state-${card.id}"]`);
  const state = badge ? badge.getAttribute('data-state') || '' : '';
  if (state) card.refresh(state);
}

function start() {
  const main = document.getElementById('main');
  if (!main) return;
  new MutationObserver(() => {
    const card = attach();
    // A new trial page: load as soon as its state is known, not at the next tick.
    if (card && !card.loadedOnce) tick();
  }).observe(main, {childList: true, subtree: true, attributes: true, attributeFilter: ['data-state']});
  setInterval(tick, REFRESH_MS);
  tick();
}

if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start);
else start();
