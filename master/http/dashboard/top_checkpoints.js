// The experiment page's "Top checkpoints" card (issue 45, the best model in
// one place): the experiment's best COMPLETED checkpoints by its searcher
// metric, as the master ranks them (GET
// /api/v1/experiments/<id>/checkpoints?sort_by=searcher_metric&states=completed&limit=5:
// smaller_is_better honoured, checkpoints without the metric last), with
// trial, batches, metric and size, each with a download link to the
// checkpoint download route (checkpoints.js).
import {apiGet} from './api.js';
import {checkpointDownloadLink, checkpointSize} from './checkpoints.js';
import {h, setText, setAttr, syncRows, syncEmpty, num, fmtMetric, fmtBytes} from './dom.js';

export const kTopCheckpoints = 5;

export class TopCheckpoints {
  constructor() {
    this.metricHead = h('th', {text: 'Metric'});
    this.tbody = h('tbody');
    this.table = h('table', {'data-testid': 'top-checkpoints-table'},
      h('thead', {}, h('tr', {}, h('th', {text: '#'}), h('th', {text: 'UUID'}), h('th', {text: 'Trial'}),
        h('th', {text: 'Batches'}), this.metricHead, h('th', {text: 'Size'}), h('th', {text: ''}))),
      this.tbody);
    this.el = h('div', {class: 'table-wrap'}, this.table);
  }

  // Fetches the best checkpoints of experiment `expId` (an array, best
  // first), for render(); it can run beside the experiment's own fetch.
  static async fetch(expId) {
    const res = await apiGet(`/api/v1/experiments/${expId}/checkpoints` +
      `?sort_by=searcher_metric&states=completed&limit=${kTopCheckpoints}`);
    return res.checkpoints || [];
  }

  // Renders `cks` (from fetch()) for experiment `exp` (its GetExperiment
  // JSON: searcher_metric, smaller_is_better).
  render(exp, cks) {
    const sense = exp.smaller_is_better ? 'smaller is better' : 'larger is better';
    setText(this.metricHead, exp.searcher_metric ? `${exp.searcher_metric} (${sense})` : 'Metric');
    syncRows(this.tbody, cks, (c) => c.uuid, (c) => h('tr', {'data-testid': `top-checkpoint-${c.uuid}`},
      h('td', {class: 'num'}), h('td', {class: 'mono'}), h('td', {class: 'num'}), h('td', {class: 'num'}),
      h('td', {class: 'num'}), h('td', {class: 'num'}),
      h('td', {}, checkpointDownloadLink(c.uuid, `top-checkpoint-download-${c.uuid}`))),
    (tr, c) => {
      const td = tr.children;
      setText(td[0], String(cks.indexOf(c) + 1));
      setText(td[1], c.uuid);
      setText(td[2], c.trial_id);
      setText(td[3], num(c.total_batches));
      const has = c.searcher_metric !== undefined && c.searcher_metric !== null;
      setText(td[4], has ? fmtMetric(c.searcher_metric) : '–');
      setAttr(td[4], 'data-value', has ? String(c.searcher_metric) : null);
      setText(td[5], fmtBytes(checkpointSize(c)));
    });
    syncEmpty(this.tbody, cks.length, 7, 'No completed checkpoints yet.');
  }
}
