// The dashboard's job queue page (#/queue, routed by app.js): every
// unfinished experiment's job per resource pool, in the order the scheduler
// considers them (GET /api/v1/job-queue), with priority, weight, max slots
// and slots requested / held. The job's owner and admins get two controls:
// set its priority, and move it ahead of the job before it in its pool
// (PATCH /api/v1/jobs/<job_id> with {"priority": N} or {"ahead_of": JOB}).
import {apiFetch, apiGet} from './api.js';
import {enumLabel, h, num, setAttr, setText, syncEmpty, syncRows} from './dom.js';

const HEADERS = ['#', 'Job', 'Experiment', 'User', 'State', 'Priority', 'Weight', 'Max slots',
  'Slots (req / held)', 'Actions'];

function toast(message, kind = 'info') {
  const box = document.getElementById('toasts');
  if (!box) return;
  const t = h('div', {class: `toast toast-${kind}`, role: 'status', 'data-testid': 'toast'}, message);
  box.append(t);
  setTimeout(() => t.remove(), kind === 'error' ? 8000 : 3500);
}

async function updateJob(jobId, body, what, controls) {
  controls.forEach((c) => { c.disabled = true; });
  try {
    await apiFetch(`/api/v1/jobs/${encodeURIComponent(jobId)}`, {method: 'PATCH', body});
    toast(`Job ${jobId}: ${what}`);
    return true;
  } catch (e) {
    toast(`Job ${jobId}: ${what} failed: ${e.message}`, 'error');
    return false;
  } finally {
    controls.forEach((c) => { c.disabled = false; });
  }
}

export class JobQueueView {
  constructor() {
    this.title = 'Job queue';
    this.me = null;
    this.summary = h('p', {class: 'muted', 'data-testid': 'queue-summary'});
    this.pools = h('div', {'data-testid': 'queue-pools'});
    this.tables = new Map();  // pool name -> {el, tbody}
    this.el = h('div', {class: 'view', 'data-testid': 'queue-view'},
      h('div', {class: 'page-head'}, h('h2', {text: 'Job queue'})), this.summary, this.pools);
  }

  mayChange(job) {
    if (!this.me) return false;
    return !!this.me.admin || (job.username && job.username === this.me.username);
  }

  poolTable(pool) {
    let t = this.tables.get(pool);
    if (t) return t;
    const tbody = h('tbody');
    const table = h('table', {'data-testid': `queue-table-${pool}`},
      h('thead', {}, h('tr', {}, HEADERS.map((c) => h('th', {text: c})))), tbody);
    const el = h('section', {class: 'card', 'data-testid': `queue-pool-${pool}`},
      h('h3', {text: `Pool ${pool}`}), h('div', {class: 'table-wrap'}, table));
    t = {el, tbody};
    this.tables.set(pool, t);
    return t;
  }

  createRow(job) {
    const id = job.job_id;
    const priority = h('input', {type: 'number', min: '1', max: '99', step: '1', class: 'num',
      'data-testid': `job-priority-input-${id}`, 'aria-label': `Priority of ${id}`});
    priority.style.width = '4.5em';
    const set = h('button', {type: 'button', 'data-testid': `job-set-priority-${id}`, text: 'Set'});
    const up = h('button', {type: 'button', 'data-testid': `job-move-up-${id}`, text: 'Move up',
      title: 'Move ahead of the job before it (takes its priority)'});
    const tr = h('tr', {'data-testid': `job-row-${id}`},
      h('td', {class: 'num'}), h('td', {class: 'mono'}), h('td'), h('td'), h('td'), h('td', {class: 'num'}),
      h('td', {class: 'num'}), h('td', {class: 'num'}), h('td', {class: 'num'}),
      h('td', {}, h('span', {class: 'actions'}, priority, set, up)));
    set.addEventListener('click', async () => {
      const value = Number(priority.value);
      if (!Number.isInteger(value) || value < 1 || value > 99) {
        toast(`Job ${id}: the priority must be a whole number from 1 to 99`, 'error');
        return;
      }
      if (await updateJob(id, {priority: value}, `priority ${value}`, [set, up])) this.refresh();
    });
    up.addEventListener('click', async () => {
      const before = tr.dataset.before;
      if (!before) return;
      if (await updateJob(id, {ahead_of: before}, `moved ahead of ${before}`, [set, up])) this.refresh();
    });
    tr.priorityInput = priority;
    tr.controls = [priority, set, up];
    return tr;
  }

  updateRow(tr, job, before) {
    const c = tr.children;
    const expId = num(job.experiment_id);
    setText(c[0], num(job.queue_position || 0));
    setText(c[1], job.job_id);
    if (c[2].__exp !== expId) {
      c[2].__exp = expId;
      c[2].replaceChildren(h('a', {href: `#/experiments/${expId}`, text: `${expId}: ${job.name || ''}`}));
    }
    setText(c[3], job.username || '–');
    setText(c[4], enumLabel(job.state, 'JOB_STATE_'));
    setAttr(c[4], 'data-state', job.state || '');
    setText(c[5], num(job.priority));
    setText(c[6], num(job.weight));
    setText(c[7], num(job.max_slots || 0) > 0 ? num(job.max_slots) : '–');
    setText(c[8], `${num(job.requested_slots || 0)} / ${num(job.allocated_slots || 0)}`);
    if (document.activeElement !== tr.priorityInput) tr.priorityInput.value = String(num(job.priority));
    tr.dataset.before = before || '';
    const allowed = this.mayChange(job);
    tr.controls.forEach((el) => { el.hidden = !allowed; });
    tr.controls[2].disabled = !before;
  }

  async refresh() {
    if (!this.me) {
      try {
        this.me = (await apiGet('/api/v1/me')).user || null;
      } catch {
        this.me = null;
      }
    }
    const res = await apiGet('/api/v1/job-queue?limit=1000');
    const jobs = res.jobs || [];
    const byPool = new Map();
    for (const j of jobs) {
      const pool = j.resource_pool || 'default';
      if (!byPool.has(pool)) byPool.set(pool, []);
      byPool.get(pool).push(j);
    }
    const queued = jobs.filter((j) => j.state === 'JOB_STATE_QUEUED').length;
    setText(this.summary, `${jobs.length} job(s) in ${byPool.size} pool(s), ${queued} waiting for slots`);
    const shown = [];
    for (const [pool, list] of [...byPool.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
      const t = this.poolTable(pool);
      syncRows(t.tbody, list, (j) => j.job_id, (j) => this.createRow(j),
        (tr, j) => {
          const i = list.indexOf(j);
          this.updateRow(tr, j, i > 0 ? list[i - 1].job_id : '');
        });
      syncEmpty(t.tbody, list.length, HEADERS.length, 'No jobs.');
      shown.push(t.el);
    }
    if (shown.length === 0) {
      shown.push(h('p', {class: 'muted', 'data-testid': 'queue-empty', text: 'No jobs: every experiment has ended.'}));
    }
    const same = shown.length === this.pools.children.length &&
      shown.every((el, i) => this.pools.children[i] === el);
    if (!same) this.pools.replaceChildren(...shown);
  }
}
