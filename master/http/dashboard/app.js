// det-cpp web dashboard: hash-routed views over the master's REST API
// (/api/v1/...), refreshed in place every POLL_MS while the tab is visible.
//
//   #/experiments            experiment list
//   #/experiments/<id>       one experiment: trials, top checkpoints, learning curves, hparam scatter
//   #/trials/<id>            one trial: hparams, metrics, checkpoints, logs
//   #/agents                 agents and slots
//   #/queue                  the job queue (job_queue.js)
import {apiGet, apiPost, getToken, getUsername, logout, onAuthChange} from './api.js';
import {LineChart, ScatterChart, capSeries, colorFor} from './charts.js';
import {fetchExperimentList} from './experiment_actions.js';
import {MetricsStreamCache} from './metrics_stream.js';
import {TrialPager} from './trial_pager.js';
import {checkpointSize, renderCheckpointUuid} from './checkpoints.js';
import {TopCheckpoints} from './top_checkpoints.js';
import {JobQueueView} from './job_queue.js';
import {
  h, setText, setAttr, setHidden, setChildrenKeyed, syncRows, syncEmpty, num, stateLabel, enumLabel,
  isTerminal, fmtMetric, fmtValue, fmtTime, fmtDuration, fmtBytes, flatten,
} from './dom.js';

const POLL_MS = 2000;

// ---- shared pieces --------------------------------------------------------

function stateBadge(testid) {
  return h('span', {class: 'state', 'data-testid': testid});
}

// `reason`: a trial's state_reason ("waiting for promotion: ..."), shown as
// the badge's tooltip.
function updateStateBadge(el, state, reason) {
  setText(el, stateLabel(state));
  setAttr(el, 'data-state', state || '');
  setAttr(el, 'title', reason || null);
  const cls = `state state-${stateLabel(state).toLowerCase()}`;
  if (el.className !== cls) el.className = cls;
}

// A metric value cell: formatted text, the exact value in data-value/title.
function updateMetric(el, value) {
  const has = value !== undefined && value !== null;
  setText(el, has ? fmtMetric(value) : '–');
  setAttr(el, 'data-value', has ? String(value) : null);
  setAttr(el, 'title', has ? String(value) : null);
}

function link(href, text, attrs = {}) {
  return h('a', {href, ...attrs}, text);
}

function toast(message, kind = 'info') {
  const box = document.getElementById('toasts');
  const t = h('div', {class: `toast toast-${kind}`, role: 'status', 'data-testid': 'toast'}, message);
  box.append(t);
  setTimeout(() => t.remove(), kind === 'error' ? 8000 : 3500);
}

const EXP_ACTIONS = [
  {action: 'pause', label: 'Pause', when: ['STATE_ACTIVE']},
  {action: 'activate', label: 'Activate', when: ['STATE_PAUSED']},
  {action: 'cancel', label: 'Cancel', when: ['STATE_ACTIVE', 'STATE_PAUSED'], confirm: true},
  {action: 'kill', label: 'Kill', danger: true, confirm: true,
   when: ['STATE_ACTIVE', 'STATE_PAUSED', 'STATE_STOPPING_COMPLETED', 'STATE_STOPPING_CANCELED',
          'STATE_STOPPING_ERROR']},
];

async function experimentAction(id, action, button) {
  if (EXP_ACTIONS.find((a) => a.action === action).confirm &&
      !window.confirm(`${action[0].toUpperCase()}${action.slice(1)} experiment ${id}?`)) return;
  button.disabled = true;
  try {
    await apiPost(`/api/v1/experiments/${id}/${action}`);
    toast(`Experiment ${id}: ${action} requested`);
  } catch (e) {
    toast(`Experiment ${id}: ${action} failed: ${e.message}`, 'error');
  }
  poller.now();
}

function actionButtons(id) {
  return h('span', {class: 'actions'}, EXP_ACTIONS.map((a) => h('button', {
    type: 'button', class: a.danger ? 'danger' : '', 'data-testid': `${a.action}-${id}`, 'data-action': a.action,
    disabled: true, text: a.label,
    onclick: (ev) => {
      ev.preventDefault();
      ev.stopPropagation();
      experimentAction(id, a.action, ev.currentTarget);
    },
  })));
}

function updateActionButtons(container, state) {
  for (const b of container.querySelectorAll('button[data-action]')) {
    const a = EXP_ACTIONS.find((x) => x.action === b.dataset.action);
    const enabled = a.when.includes(state);
    if (b.disabled === enabled) b.disabled = !enabled;
  }
}

function card(titleText, ...children) {
  return h('section', {class: 'card'}, titleText ? h('h3', {text: titleText}) : null, ...children);
}

// <dl> of label/value pairs; returns {el, dd: {key: <dd>}}.
function infoGrid(fields) {
  const dd = {};
  const el = h('dl', {class: 'info'}, fields.map(([key, label, testid]) => {
    dd[key] = h('dd', {'data-testid': testid});
    return h('div', {}, h('dt', {text: label}), dd[key]);
  }));
  return {el, dd};
}

function table(testid, headers) {
  const tbody = h('tbody');
  const thead = h('thead', {}, h('tr', {}, headers.map((c) => h('th', {text: c}))));
  const el = h('div', {class: 'table-wrap'}, h('table', {'data-testid': testid}, thead, tbody));
  return {el, thead, tbody};
}

function cells(tr, n) {
  while (tr.children.length < n) tr.append(h('td'));
  return Array.from(tr.children);
}

function hparamText(hparams) {
  return Object.entries(flatten(hparams)).sort(([a], [b]) => a.localeCompare(b))
    .map(([k, v]) => `${k}=${fmtValue(v)}`).join(', ');
}

// Sets a <select>'s options to `options` ([{value, label}]) if they differ,
// keeping the selected value when it is still offered.
function syncSelect(select, options, fallback) {
  const want = options.map((o) => `${o.value}\u0000${o.label}`).join('\u0001');
  const keepValue = select.value;
  if (select.__opts !== want) {
    select.__opts = want;
    select.replaceChildren(...options.map((o) => h('option', {value: o.value, text: o.label})));
  }
  const values = options.map((o) => o.value);
  const value = values.includes(keepValue) ? keepValue : values.includes(fallback) ? fallback : values[0];
  if (value !== undefined && select.value !== value) select.value = value;
  return select.value;
}

// Metric choices over training + validation reports: value "group:name";
// at most MAX_SERIES names per group (`keep` among them).
function metricOptions(reportLists, keep = []) {
  const names = {validation: new Set(), training: new Set()};
  for (const [group, reports] of reportLists) {
    for (const r of reports) for (const k of Object.keys(r.metrics || {})) names[group].add(k);
  }
  const out = [];
  for (const group of ['validation', 'training']) {
    for (const n of capSeries([...names[group]].sort(), keep).shown) {
      out.push({value: `${group}:${n}`, label: `${n} (${group})`});
    }
  }
  return out;
}

function splitMetric(value) {
  const i = value ? value.indexOf(':') : -1;
  return i < 0 ? ['validation', value || ''] : [value.slice(0, i), value.slice(i + 1)];
}

function curvePoints(reports, name) {
  return reports.filter((r) => r.metrics && name in r.metrics)
    .map((r) => [num(r.total_batches), num(r.metrics[name])]);
}

// ---- experiment list ------------------------------------------------------

class ExperimentListView {
  constructor() {
    this.title = 'Experiments';
    this.t = table('experiments-table',
      ['ID', 'Name', 'State', 'Progress', 'Best metric', 'Trials', 'Started', 'Ended', 'Actions']);
    this.el = h('div', {class: 'view', 'data-testid': 'experiments-view'},
      h('h2', {text: 'Experiments'}), card(null, this.t.el));
  }

  async refresh() {
    const res = await fetchExperimentList();  // archived ones too when toggled
    const exps = res.experiments || [];
    syncRows(this.t.tbody, exps, (e) => e.id, (e) => this.createRow(e), (tr, e) => this.updateRow(tr, e));
    syncEmpty(this.t.tbody, exps.length, 9, 'No experiments yet. Create one with det-cli experiment create.');
  }

  createRow(e) {
    const id = e.id;
    const tr = h('tr', {'data-testid': `exp-row-${id}`},
      h('td', {}, link(`#/experiments/${id}`, String(id))),
      h('td', {}, link(`#/experiments/${id}`, '', {'data-testid': `exp-name-${id}`})),
      h('td', {}, stateBadge(`exp-state-${id}`)),
      h('td', {}, h('div', {class: 'progress'}, h('div', {class: 'bar'}, h('div', {class: 'fill'})),
        h('span', {class: 'pct', 'data-testid': `exp-progress-${id}`}))),
      h('td', {}, h('span', {class: 'metric-name muted'}), ' ', h('span', {class: 'num', 'data-testid': `exp-best-${id}`})),
      h('td', {class: 'num', 'data-testid': `exp-trials-${id}`}),
      h('td', {class: 'time'}),
      h('td', {class: 'time'}),
      h('td', {}, actionButtons(id)));
    return tr;
  }

  updateRow(tr, e) {
    const c = tr.children;
    setText(c[1].firstChild, e.name || '(unnamed)');
    updateStateBadge(c[2].firstChild, e.state);
    const p = e.progress === undefined ? null : num(e.progress);
    const fill = c[3].querySelector('.fill');
    const width = `${p === null ? 0 : Math.round(p * 1000) / 10}%`;
    if (fill.style.width !== width) fill.style.width = width;
    setText(c[3].querySelector('.pct'), p === null ? '–' : `${Math.round(p * 100)}%`);
    setText(c[4].firstChild, e.searcher_metric ? `${e.searcher_metric}${e.smaller_is_better ? ' ↓' : ' ↑'}` : '');
    updateMetric(c[4].lastChild, e.best_validation_metric);
    setText(c[5], e.num_trials ?? 0);
    setText(c[6], fmtTime(e.start_time));
    setText(c[7], fmtTime(e.end_time));
    updateActionButtons(c[8], e.state);
  }
}

// ---- experiment page ------------------------------------------------------

class ExperimentView {
  constructor(id) {
    this.id = id;
    this.title = `Experiment ${id}`;
    this.metrics = new MetricsStreamCache({chartPoints: 300});  // curves of one page of trials
    this.pager = new TrialPager(() => this.refresh());
    this.heading = h('span', {'data-testid': 'exp-title'});
    this.state = stateBadge(`exp-state-${id}`);
    this.actions = actionButtons(id);
    this.info = infoGrid([
      ['searcher', 'Searcher', 'exp-searcher'], ['metric', 'Searcher metric', 'exp-metric'],
      ['best', 'Best validation', `exp-best-${id}`], ['bestTrial', 'Best trial', 'exp-best-trial'],
      ['progress', 'Progress', `exp-progress-${id}`], ['trials', 'Trials', 'exp-trials'],
      ['pool', 'Resource pool', 'exp-pool'], ['start', 'Started', 'exp-start'], ['end', 'Ended', 'exp-end'],
      ['duration', 'Duration', 'exp-duration'], ['labels', 'Labels', 'exp-labels'],
      ['description', 'Description', 'exp-description'],
    ]);
    this.error = h('div', {class: 'error-box', 'data-testid': 'exp-error', hidden: true});
    this.config = h('pre', {class: 'config', 'data-testid': 'exp-config'});
    this.trials = table('trials-table',
      ['ID', 'State', 'Batches', 'Best validation', 'Latest validation', 'Restarts', 'Hyperparameters', 'Started',
       'Ended']);
    this.metricSelect = h('select', {id: 'curve-metric', 'data-testid': 'curve-metric',
      onchange: () => this.render()});
    this.curve = new LineChart({onSeriesClick: (it) => { location.hash = `#/trials/${it.key}`; }});
    this.hparamSelect = h('select', {id: 'scatter-hparam', 'data-testid': 'scatter-hparam',
      onchange: () => this.render()});
    this.scatter = new ScatterChart({onPointClick: (p) => { location.hash = `#/trials/${p.key}`; }});
    this.top = new TopCheckpoints();
    this.el = h('div', {class: 'view', 'data-testid': 'experiment-view'},
      h('nav', {class: 'crumbs'}, link('#/experiments', 'Experiments'), ' / ', `Experiment ${id}`),
      h('div', {class: 'page-head'}, h('h2', {}, this.heading), this.state, this.actions),
      card(null, this.info.el, this.error,
        h('details', {}, h('summary', {text: 'Configuration'}), this.config)),
      card('Trials', this.pager.el, this.trials.el),
      card('Top checkpoints', this.top.el),
      h('div', {class: 'grid2'},
        card('Learning curves',
          h('div', {class: 'controls'}, h('label', {for: 'curve-metric', text: 'Metric '}), this.metricSelect),
          this.curve.el),
        card('Hyperparameter vs. best validation',
          h('div', {class: 'controls'}, h('label', {for: 'scatter-hparam', text: 'Hyperparameter '}),
            this.hparamSelect),
          this.scatter.el)));
  }

  async refresh() {
    const [er, tr, top] = await Promise.all([
      apiGet(`/api/v1/experiments/${this.id}`),
      apiGet(`/api/v1/experiments/${this.id}/trials?limit=1000`),
      TopCheckpoints.fetch(this.id),
    ]);
    this.exp = er.experiment;
    this.trialList = (tr.trials || []).slice().sort((a, b) => a.id - b.id);
    this.renderHeader();
    this.renderTrials();
    this.top.render(this.exp, top);
    await this.metrics.load(this.pageTrials, ['validation', 'training']);
    this.render();
  }

  renderHeader() {
    const e = this.exp;
    const dd = this.info.dd;
    setText(this.heading, `Experiment ${e.id}: ${e.name || '(unnamed)'}`);
    updateStateBadge(this.state, e.state);
    updateActionButtons(this.actions, e.state);
    setText(dd.searcher, e.searcher_name || '–');
    setText(dd.metric, e.searcher_metric ?
      `${e.searcher_metric} (${e.smaller_is_better ? 'smaller' : 'larger'} is better)` : '–');
    updateMetric(dd.best, e.best_validation_metric);
    setChildrenKeyed(dd.bestTrial, String(e.best_trial_id || ''),
      () => (e.best_trial_id ? [link(`#/trials/${e.best_trial_id}`, `Trial ${e.best_trial_id}`)] : ['–']));
    setText(dd.progress, e.progress === undefined ? '–' : `${Math.round(num(e.progress) * 100)}%`);
    const byState = Object.entries(e.num_trials_by_state || {})
      .map(([s, n]) => `${n} ${stateLabel(s).toLowerCase()}`).join(', ');
    setText(dd.trials, `${e.num_trials ?? 0}${byState ? ` (${byState})` : ''}`);
    setText(dd.pool, e.resource_pool || '–');
    setText(dd.start, fmtTime(e.start_time));
    setText(dd.end, fmtTime(e.end_time));
    setText(dd.duration, fmtDuration(e.start_time, e.end_time));
    setText(dd.labels, (e.labels || []).join(', ') || '–');
    setText(dd.description, e.description || '–');
    setText(this.error, e.error_message || '');
    setHidden(this.error, !e.error_message);
    setText(this.config, e.config_yaml || '');
  }

  renderTrials() {
    const metric = this.exp.searcher_metric;
    syncRows(this.trials.tbody, this.pageTrials = this.pager.slice(this.trialList), (t) => t.id, (t) => h('tr', {'data-testid': `trial-row-${t.id}`},
      h('td', {}, link(`#/trials/${t.id}`, String(t.id))),
      h('td', {}, stateBadge(`trial-state-${t.id}`)),
      h('td', {class: 'num', 'data-testid': `trial-batches-${t.id}`}),
      h('td', {class: 'num', 'data-testid': `trial-best-${t.id}`}),
      h('td', {class: 'num', 'data-testid': `trial-latest-${t.id}`}),
      h('td', {class: 'num'}),
      h('td', {class: 'hparams', 'data-testid': `trial-hparams-${t.id}`}),
      h('td', {class: 'time'}),
      h('td', {class: 'time'})),
    (tr, t) => {
      const c = tr.children;
      updateStateBadge(c[1].firstChild, t.state, t.state_reason);
      const target = num(t.searcher_target_batches);
      setText(c[2], `${num(t.total_batches_processed) || 0}${target > 0 ? ` / ${target}` : ''}`);
      updateMetric(c[3], t.best_validation && t.best_validation.metrics ? t.best_validation.metrics[metric] : null);
      updateMetric(c[4], t.latest_validation && t.latest_validation.metrics ?
        t.latest_validation.metrics[metric] : null);
      setText(c[5], t.restarts ?? 0);
      setText(c[6], hparamText(t.hparams));
      setText(c[7], fmtTime(t.start_time));
      setText(c[8], fmtTime(t.end_time));
    });
    syncEmpty(this.trials.tbody, this.trialList.length, 9, 'No trials yet.');
  }

  // Charts: from the cached data, so changing a dropdown redraws at once.
  render() {
    if (!this.exp) return;
    const trials = this.trialList;
    const lists = [];
    for (const t of this.pageTrials) {
      lists.push(['validation', this.metrics.get(t.id, 'validation')]);
      lists.push(['training', this.metrics.get(t.id, 'training')]);
    }
    const chosen = syncSelect(this.metricSelect, metricOptions(lists), `validation:${this.exp.searcher_metric}`);
    const [group, name] = splitMetric(chosen);
    this.curve.update(this.pageTrials.map((t) => ({
      key: t.id, label: `Trial ${t.id}`, color: colorFor(t.id), points: curvePoints(this.metrics.get(t.id, group), name),
    })), {xLabel: 'batches', yLabel: name ? `${name} (${group})` : '', emptyText: 'No metrics reported yet'});

    const hpValues = trials.map((t) => flatten(t.hparams));
    const hpNames = [...new Set(hpValues.flatMap((v) => Object.keys(v)))].sort();
    const varying = hpNames.find((n) => new Set(hpValues.map((v) => JSON.stringify(v[n]))).size > 1);
    const hp = syncSelect(this.hparamSelect, hpNames.map((n) => ({value: n, label: n})), varying || hpNames[0]);
    const metric = this.exp.searcher_metric;
    const logX = this.hparamType(hp) === 'log';
    this.scatter.update(trials.map((t, i) => ({
      key: t.id, x: hpValues[i][hp], color: colorFor(t.id), label: `Trial ${t.id}`,
      y: t.best_validation && t.best_validation.metrics ? num(t.best_validation.metrics[metric]) : NaN,
    })), {xLabel: hp || '', yLabel: `best ${metric}`, logX});
  }

  hparamType(name) {
    let node = this.exp.config && this.exp.config.hyperparameters;
    for (const part of (name || '').split('.')) {
      if (!node || typeof node !== 'object') return null;
      node = node[part];
    }
    return node && typeof node === 'object' ? node.type : null;
  }
}

// ---- trial page -----------------------------------------------------------

class MetricsTable {
  constructor(testid) {
    this.t = table(testid, []);
    this.testid = testid;
    this.columns = null;
  }
  update(reports) {
    const all = [...new Set(reports.flatMap((r) => Object.keys(r.metrics || {})))].sort();
    const {shown: names, total} = capSeries(all);
    const cols = names.join('\u0000');
    if (cols !== this.columns) {
      this.columns = cols;
      this.names = names;
      this.t.thead.replaceChildren(h('tr', {},
        ['Batches', 'Epochs', 'Time', ...names].map((c) => h('th', {text: c})),
        total > names.length ? h('th', {'data-testid': `${this.testid}-capped`,
          text: `showing ${names.length} of ${total} metrics; det-cli trial metrics shows the others`}) : null));
      this.t.tbody.replaceChildren();
    }
    syncRows(this.t.tbody, reports, (r) => r.id, (r) => h('tr', {'data-testid': `${this.testid}-row`}),
      (tr, r) => {
        const c = cells(tr, 3 + this.names.length);
        setText(c[0], num(r.total_batches));
        setText(c[1], fmtMetric(r.total_epochs));
        setText(c[2], fmtTime(r.end_time));
        this.names.forEach((n, i) => {
          updateMetric(c[3 + i], r.metrics ? r.metrics[n] : null);
          c[3 + i].className = 'num';
        });
      });
    syncEmpty(this.t.tbody, reports.length, 3 + this.names.length, 'No reports yet.');
  }
}

class TrialView {
  constructor(id) {
    this.id = id;
    this.title = `Trial ${id}`;
    this.metrics = new MetricsStreamCache();
    this.lastLogId = 0;
    this.expLink = h('span');
    this.state = stateBadge(`trial-state-${id}`);
    this.killButton = h('button', {type: 'button', class: 'danger', 'data-testid': `kill-trial-${id}`, disabled: true,
      text: 'Kill trial', onclick: () => this.kill()});
    this.info = infoGrid([
      ['experiment', 'Experiment', 'trial-experiment'], ['reason', 'State reason', `trial-state-reason-${id}`],
      ['batches', 'Batches', `trial-batches-${id}`],
      ['best', 'Best validation', `trial-best-${id}`], ['latest', 'Latest validation', `trial-latest-${id}`],
      ['restarts', 'Restarts', 'trial-restarts'], ['runner', 'Allocation', 'trial-runner'],
      ['seed', 'Seed', 'trial-seed'], ['checkpoint', 'Latest checkpoint', 'trial-latest-checkpoint'],
      ['bestCheckpoint', 'Best checkpoint', 'trial-best-checkpoint'],
      ['start', 'Started', 'trial-start'], ['end', 'Ended', 'trial-end'],
    ]);
    this.error = h('div', {class: 'error-box', 'data-testid': 'trial-error', hidden: true});
    this.hparams = table('hparams-table', ['Hyperparameter', 'Value']);
    this.metricSelect = h('select', {id: 'trial-metric', 'data-testid': 'curve-metric', onchange: () => this.render()});
    this.curve = new LineChart();
    this.validationTable = new MetricsTable('validation-metrics-table');
    this.trainingTable = new MetricsTable('training-metrics-table');
    this.checkpoints = table('checkpoints-table',
      ['UUID', 'State', 'Batches', 'Searcher metric', 'Size', 'Reported', 'Storage path']);
    this.follow = h('input', {type: 'checkbox', checked: true, id: 'logs-follow', 'data-testid': 'logs-follow'});
    this.logs = h('div', {class: 'logs', 'data-testid': 'trial-logs', tabindex: 0});
    this.logCount = h('span', {class: 'muted', 'data-testid': 'trial-log-count'});
    this.el = h('div', {class: 'view', 'data-testid': 'trial-view'},
      h('nav', {class: 'crumbs'}, link('#/experiments', 'Experiments'), ' / ', this.expLink, ' / ', `Trial ${id}`),
      h('div', {class: 'page-head'}, h('h2', {text: `Trial ${id}`}), this.state, this.killButton),
      card(null, this.info.el, this.error),
      h('div', {class: 'grid2'},
        card('Hyperparameters', this.hparams.el),
        card('Metrics',
          h('div', {class: 'controls'}, h('label', {for: 'trial-metric', text: 'Metric '}), this.metricSelect),
          this.curve.el)),
      card('Validation metrics', h('div', {class: 'scroll'}, this.validationTable.t.el)),
      card('Training metrics', h('div', {class: 'scroll'}, this.trainingTable.t.el)),
      card('Checkpoints', this.checkpoints.el),
      card('Logs', h('div', {class: 'controls'}, h('label', {}, this.follow, ' follow'), ' ', this.logCount),
        this.logs));
  }

  async kill() {
    if (!window.confirm(`Kill trial ${this.id}?`)) return;
    this.killButton.disabled = true;
    try {
      await apiPost(`/api/v1/trials/${this.id}/kill`);
      toast(`Trial ${this.id}: kill requested`);
    } catch (e) {
      toast(`Trial ${this.id}: kill failed: ${e.message}`, 'error');
    }
    poller.now();
  }

  async refresh() {
    const tr = await apiGet(`/api/v1/trials/${this.id}`);
    const t = tr.trial;
    this.trial = t;
    if (!this.exp || !isTerminal(this.exp.state)) {
      this.exp = (await apiGet(`/api/v1/experiments/${t.experiment_id}`)).experiment;
    }
    const [, cks] = await Promise.all([
      this.metrics.load([t], ['validation', 'training']),
      apiGet(`/api/v1/trials/${this.id}/checkpoints`),
      this.loadLogs(),
    ]);
    this.renderInfo();
    this.render();
    this.renderCheckpoints(cks.checkpoints || []);
  }

  renderInfo() {
    const t = this.trial;
    const metric = this.exp ? this.exp.searcher_metric : '';
    const dd = this.info.dd;
    setChildrenKeyed(this.expLink, String(t.experiment_id),
      () => [link(`#/experiments/${t.experiment_id}`, `Experiment ${t.experiment_id}`)]);
    setChildrenKeyed(dd.experiment, `${t.experiment_id}:${this.exp && this.exp.name}`,
      () => [link(`#/experiments/${t.experiment_id}`, `${t.experiment_id}: ${(this.exp && this.exp.name) || ''}`)]);
    updateStateBadge(this.state, t.state, t.state_reason);
    setText(dd.reason, t.state_reason || '–');
    const killable = !isTerminal(t.state) && t.state !== 'STATE_STOPPING_KILLED';
    if (this.killButton.disabled === killable) this.killButton.disabled = !killable;
    const target = num(t.searcher_target_batches);
    setText(dd.batches, `${num(t.total_batches_processed) || 0}${target > 0 ? ` / ${target}` : ''}`);
    updateMetric(dd.best, t.best_validation && t.best_validation.metrics ? t.best_validation.metrics[metric] : null);
    updateMetric(dd.latest, t.latest_validation && t.latest_validation.metrics ?
      t.latest_validation.metrics[metric] : null);
    setText(dd.restarts, t.restarts ?? 0);
    const runner = enumLabel(t.runner_state, 'ALLOCATION_STATE_');
    setText(dd.runner, t.allocation_id ? `${t.allocation_id} (${runner})` : runner === 'UNSPECIFIED' ? '–' : runner);
    setText(dd.seed, t.seed ?? '–');
    setText(dd.checkpoint, t.latest_checkpoint_uuid || '–');
    // The checkpoint whose validation has the best searcher metric, and the
    // batch of the best validation (Trial.best_validation.total_batches).
    const bestBatch = t.best_validation ? num(t.best_validation.total_batches) : 0;
    setText(dd.bestCheckpoint, t.best_checkpoint_uuid ?
      `${t.best_checkpoint_uuid}${bestBatch > 0 ? ` (best validation at batch ${bestBatch})` : ''}` : '–');
    setText(dd.start, fmtTime(t.start_time));
    setText(dd.end, fmtTime(t.end_time));
    setText(this.error, t.error_message || '');
    setHidden(this.error, !t.error_message);
    const hp = Object.entries(flatten(t.hparams)).sort(([a], [b]) => a.localeCompare(b));
    syncRows(this.hparams.tbody, hp, ([k]) => k, ([k]) => h('tr', {'data-testid': `hparam-${k}`}, h('td'), h('td')),
      (row, [k, v]) => {
        setText(row.children[0], k);
        setText(row.children[1], fmtValue(v));
      });
  }

  render() {
    if (!this.trial) return;
    const val = this.metrics.get(this.id, 'validation');
    const train = this.metrics.get(this.id, 'training');
    const metric = this.exp ? this.exp.searcher_metric : '';
    const chosen = syncSelect(this.metricSelect, metricOptions([['validation', val], ['training', train]], [metric]),
      `validation:${metric}`);
    const [group, name] = splitMetric(chosen);
    this.curve.update([{key: this.id, label: `Trial ${this.id}: ${name}`, color: colorFor(this.id),
      points: curvePoints(group === 'training' ? train : val, name)}],
    {xLabel: 'batches', yLabel: name ? `${name} (${group})` : '', emptyText: 'No metrics reported yet'});
    this.validationTable.update(val);
    this.trainingTable.update(train);
  }

  renderCheckpoints(cks) {
    syncRows(this.checkpoints.tbody, cks, (c) => c.uuid, (c) => h('tr', {'data-testid': `checkpoint-row-${c.uuid}`},
      h('td', {class: 'mono'}), h('td'), h('td', {class: 'num'}), h('td', {class: 'num'}), h('td', {class: 'num'}),
      h('td', {class: 'time'}), h('td', {class: 'mono path'})),
    (tr, c) => {
      const td = tr.children;
      renderCheckpointUuid(td[0], c);
      setText(td[1], enumLabel(c.state, 'CHECKPOINT_STATE_'));
      setText(td[2], num(c.total_batches));
      updateMetric(td[3], c.searcher_metric);
      setText(td[4], fmtBytes(checkpointSize(c)));
      setText(td[5], fmtTime(c.report_time));
      setText(td[6], c.storage_path || '');
      setAttr(td[6], 'title', c.storage_path || null);
    });
    syncEmpty(this.checkpoints.tbody, cks.length, 7, 'No checkpoints yet.');
  }

  // Appends the lines after the last one seen (GET .../logs?after_id=N, a
  // page of at most 1000 lines; up to 5 pages per refresh while `more`).
  async loadLogs() {
    for (let page = 0; page < 5; page++) {
      const res = await apiGet(`/api/v1/trials/${this.id}/logs?after_id=${this.lastLogId}`);
      this.appendLogs(res);
      if (!res.more) break;
    }
  }

  appendLogs(res) {
    const lines = (res.logs || []).filter((l) => num(l.id) > this.lastLogId);
    if (!lines.length) {
      if (!this.logs.firstChild) this.logs.append(h('div', {class: 'muted log-empty', text: 'No log lines yet.'}));
      return;
    }
    const atBottom = this.logs.scrollTop + this.logs.clientHeight >= this.logs.scrollHeight - 4;
    const empty = this.logs.querySelector('.log-empty');
    if (empty) empty.remove();
    const frag = document.createDocumentFragment();
    for (const l of lines) {
      const level = enumLabel(l.level, 'LOG_LEVEL_');
      const cls = `log-line${l.stdtype === 'STD_TYPE_STDERR' ? ' stderr' : ''}` +
                  (['ERROR', 'CRITICAL'].includes(level) ? ' error' : level === 'WARNING' ? ' warning' : '');
      frag.append(h('div', {class: cls, 'data-id': l.id},
        h('span', {class: 'log-time', text: fmtTime(l.timestamp)}), ' ',
        l.rank !== undefined ? h('span', {class: 'log-rank', text: `[${l.rank}]`}) : null, ' ', l.message));
      this.lastLogId = Math.max(this.lastLogId, num(l.id));
    }
    this.logs.append(frag);
    const MAX_LINES = 5000;
    while (this.logs.childElementCount > MAX_LINES) this.logs.firstElementChild.remove();
    setText(this.logCount, `${this.logs.childElementCount} lines (last id ${this.lastLogId})`);
    if (this.follow.checked && (atBottom || lines.length === this.logs.childElementCount)) {
      this.logs.scrollTop = this.logs.scrollHeight;
    }
  }
}

// ---- agents and slots -----------------------------------------------------

class AgentsView {
  constructor() {
    this.title = 'Agents';
    this.summary = h('p', {class: 'muted', 'data-testid': 'slots-summary'});
    this.agents = table('agents-table',
      ['ID', 'Hostname', 'Pool', 'Connected', 'Enabled', 'Slots (used / total)', 'Version', 'Registered',
       'Last heartbeat']);
    this.slots = table('slots-table', ['Slot', 'Agent', 'Device', 'Brand', 'Enabled', 'Allocation', 'Trial']);
    this.el = h('div', {class: 'view', 'data-testid': 'agents-view'},
      h('h2', {text: 'Agents and slots'}), this.summary,
      card('Agents', this.agents.el), card('Slots', this.slots.el));
  }

  async refresh() {
    const [ar, sr] = await Promise.all([apiGet('/api/v1/agents'), apiGet('/api/v1/slots')]);
    const agents = ar.agents || [];
    const slots = sr.slots || [];
    const used = slots.filter((s) => s.allocation_id).length;
    setText(this.summary, `${agents.filter((a) => a.connected).length} connected agent(s), ` +
      `${used} of ${slots.length} slot(s) in use`);
    syncRows(this.agents.tbody, agents, (a) => a.id, (a) => h('tr', {'data-testid': `agent-row-${a.id}`},
      h('td', {class: 'mono'}), h('td'), h('td'), h('td'), h('td'), h('td', {class: 'num'}), h('td'),
      h('td', {class: 'time'}), h('td', {class: 'time'})),
    (tr, a) => {
      const c = tr.children;
      setText(c[0], a.id);
      setText(c[1], a.hostname || '–');
      setText(c[2], a.resource_pool || '–');
      setText(c[3], a.connected ? 'yes' : 'no');
      setAttr(c[3], 'class', a.connected ? 'ok' : 'bad');
      setText(c[4], a.enabled ? (a.draining ? 'draining' : 'yes') : 'no');
      const s = a.slots || [];
      setText(c[5], `${s.filter((x) => x.allocation_id).length} / ${s.length}`);
      setText(c[6], a.version || '–');
      setText(c[7], fmtTime(a.registered_time));
      setText(c[8], fmtTime(a.last_heartbeat_time));
    });
    syncEmpty(this.agents.tbody, agents.length, 9, 'No agents connected.');
    syncRows(this.slots.tbody, slots, (s) => `${s.agent_id}/${s.id}`,
      (s) => h('tr', {'data-testid': `slot-row-${s.id}`}, h('td', {class: 'mono'}), h('td', {class: 'mono'}), h('td'),
        h('td'), h('td'), h('td', {class: 'mono'}), h('td')),
      (tr, s) => {
        const c = tr.children;
        setText(c[0], s.id);
        setText(c[1], s.agent_id);
        setText(c[2], s.device ? `${enumLabel(s.device.type, 'DEVICE_TYPE_')} ${s.device.id}` : '–');
        setText(c[3], (s.device && s.device.brand) || '–');
        setText(c[4], s.enabled ? (s.draining ? 'draining' : 'yes') : 'no');
        setText(c[5], s.allocation_id || 'free');
        const m = /^trial-(\d+)\./.exec(s.allocation_id || '');  // allocation ids are "trial-<id>.<run>.<hex>"
        const trialId = s.trial_id || (m ? Number(m[1]) : 0);
        setChildrenKeyed(c[6], String(trialId || ''),
          () => (trialId ? [link(`#/trials/${trialId}`, `Trial ${trialId}`)] : ['–']));
      });
    syncEmpty(this.slots.tbody, slots.length, 7, 'No slots.');
  }
}

class NotFoundView {
  constructor() {
    this.title = 'Not found';
    this.el = h('div', {class: 'view'}, h('h2', {text: 'Page not found'}),
      h('p', {}, link('#/experiments', 'Back to the experiments')));
  }
  async refresh() {}
}

// ---- routing and polling --------------------------------------------------

const ROUTES = [
  [/^#?\/?$/, () => new ExperimentListView(), 'experiments'],
  [/^#\/experiments\/?$/, () => new ExperimentListView(), 'experiments'],
  [/^#\/experiments\/(\d+)\/?$/, (m) => new ExperimentView(Number(m[1])), 'experiments'],
  [/^#\/trials\/(\d+)\/?$/, (m) => new TrialView(Number(m[1])), 'experiments'],
  [/^#\/agents\/?$/, () => new AgentsView(), 'agents'],
  [/^#\/queue\/?$/, () => new JobQueueView(), 'queue'],
];

// Runs the visible view's refresh() now and then every POLL_MS (never two at
// once); paused while the tab is hidden.
class Poller {
  constructor() {
    this.view = null;
    this.gen = 0;
    this.timer = null;
    this.running = false;
    this.again = false;
  }
  setView(view) {
    this.gen++;
    clearTimeout(this.timer);
    if (this.view && this.view.metrics && this.view.metrics.close) this.view.metrics.close();  // live streams
    this.view = view;
    this.running = false;
    this.again = false;
    this.run();
  }
  now() {
    this.run();
  }
  async run() {
    if (!this.view) return;
    if (this.running) {
      this.again = true;
      return;
    }
    clearTimeout(this.timer);
    const gen = this.gen;
    this.running = true;
    if (!document.hidden) {
      try {
        await this.view.refresh();
        if (gen === this.gen) {
          this.count = (this.count || 0) + 1;
          setStatus('ok', `live · updated ${fmtTime(new Date().toISOString()).slice(11)}`);
          setAttr(document.getElementById('poll-status'), 'data-refreshes', this.count);
        }
      } catch (e) {
        if (gen === this.gen) setStatus('error', `error: ${e.message}`);
        console.error(e);
      }
    }
    if (gen !== this.gen) return;
    this.running = false;
    if (this.again) {
      this.again = false;
      this.run();
      return;
    }
    this.timer = setTimeout(() => this.run(), POLL_MS);
  }
}

const poller = new Poller();

function setStatus(kind, text) {
  const el = document.getElementById('poll-status');
  setText(el, text);
  setAttr(el, 'data-status', kind);
}

function route() {
  const hash = location.hash || '#/';
  let view = null;
  let nav = '';
  for (const [re, make, section] of ROUTES) {
    const m = hash.match(re);
    if (m) {
      view = make(m);
      nav = section;
      break;
    }
  }
  if (!view) view = new NotFoundView();
  for (const a of document.querySelectorAll('header nav a')) {
    a.classList.toggle('active', a.dataset.section === nav);
  }
  document.title = `${view.title} · det-cpp`;
  document.getElementById('main').replaceChildren(view.el);
  poller.setView(view);
}

function updateUser() {
  const box = document.getElementById('user');
  const token = getToken();
  setHidden(box, !token);
  setText(document.getElementById('user-name'), token ? getUsername() || 'logged in' : '');
}

async function loadMasterInfo() {
  try {
    const m = await apiGet('/api/v1/master');
    setText(document.getElementById('cluster'), `${m.cluster_name || 'det-cpp'} · v${m.version || '?'}`);
  } catch (e) {
    setText(document.getElementById('cluster'), 'master unreachable');
  }
}

function main() {
  document.getElementById('logout').addEventListener('click', async () => {
    await logout();
    poller.now();
  });
  onAuthChange(updateUser);
  updateUser();
  window.addEventListener('hashchange', route);
  document.addEventListener('visibilitychange', () => {
    if (!document.hidden) poller.now();
  });
  route();
  loadMasterInfo();
}

main();
