// Experiment lifecycle controls of the dashboard, kept out of app.js:
//   - on an experiment page (#/experiments/<id>): Archive / Unarchive and
//     Delete buttons next to its other actions (Delete asks first, then goes
//     back to the list; the master deletes in the background);
//   - on the experiment list: a "Show archived" toggle (fetchExperimentList
//     is what the list view loads).
// The buttons are added when app.js renders a view (a MutationObserver on
// #main) and follow the experiment's state and archived flag.
import {apiFetch, apiGet, apiPost} from './api.js';
import {h} from './dom.js';
import {projectQuery} from './workspaces.js';

const SHOW_ARCHIVED_KEY = 'det.showArchived';
const TERMINAL = new Set(['STATE_COMPLETED', 'STATE_CANCELED', 'STATE_ERROR']);

function showArchived() {
  try {
    return localStorage.getItem(SHOW_ARCHIVED_KEY) === '1';
  } catch {
    return false;
  }
}

function toast(message, kind = 'info') {
  const box = document.getElementById('toasts');
  if (!box) return;
  const t = h('div', {class: `toast toast-${kind}`, role: 'status', 'data-testid': 'toast'}, message);
  box.append(t);
  setTimeout(() => t.remove(), kind === 'error' ? 8000 : 3500);
}

// The experiments the list shows: unarchived ones, and archived ones too
// when the toggle is on (the API lists one or the other), newest first.
export async function fetchExperimentList() {
  const only = projectQuery();  // the project filter (workspaces.js), if any
  const res = await apiGet(`/api/v1/experiments?limit=1000${only}`);
  if (!showArchived()) return res;
  const archived = await apiGet(`/api/v1/experiments?limit=1000&archived=true${only}`);
  const all = (res.experiments || []).concat(archived.experiments || []);
  all.sort((a, b) => Number(b.id) - Number(a.id));
  return {...res, experiments: all};
}

function addListToggle(view) {
  if (view.querySelector('[data-testid="show-archived"]')) return;
  const box = h('input', {type: 'checkbox', id: 'show-archived', 'data-testid': 'show-archived'});
  box.checked = showArchived();
  box.addEventListener('change', () => {
    try {
      localStorage.setItem(SHOW_ARCHIVED_KEY, box.checked ? '1' : '0');
    } catch {
      // no localStorage: the toggle does nothing
    }
    window.dispatchEvent(new HashChangeEvent('hashchange'));  // app.js re-renders the list
  });
  const heading = view.querySelector('h2');
  const label = h('label', {class: 'muted', for: 'show-archived'}, box, ' Show archived');
  if (heading) heading.after(label);
}

async function run(id, what, call, buttons) {
  buttons.forEach((b) => { b.disabled = true; });
  try {
    await call();
    toast(`Experiment ${id}: ${what}`);
    return true;
  } catch (e) {
    toast(`Experiment ${id}: ${what} failed: ${e.message}`, 'error');
    return false;
  } finally {
    buttons.forEach((b) => { b.disabled = false; });
  }
}

function addExperimentButtons(view) {
  const head = view.querySelector('.page-head');
  const m = /^#\/experiments\/(\d+)/.exec(location.hash);
  if (!head || !m || head.querySelector('[data-testid^="archive-toggle-"]')) return;
  const id = m[1];
  const archive = h('button', {type: 'button', 'data-testid': `archive-toggle-${id}`, disabled: true,
    text: 'Archive'});
  const del = h('button', {type: 'button', class: 'danger', 'data-testid': `delete-${id}`, disabled: true,
    text: 'Delete'});
  const state = {archived: false, terminal: false};
  const sync = async () => {
    try {
      const e = (await apiGet(`/api/v1/experiments/${id}`)).experiment;
      state.archived = !!e.archived;
      state.terminal = TERMINAL.has(e.state);
      archive.textContent = state.archived ? 'Unarchive' : 'Archive';
      archive.disabled = !state.terminal && !state.archived;
      del.disabled = !state.terminal;
      del.title = state.terminal ? '' : 'Only a completed, canceled or failed experiment can be deleted';
    } catch {
      archive.disabled = true;
      del.disabled = true;
    }
  };
  archive.addEventListener('click', async () => {
    const verb = state.archived ? 'unarchive' : 'archive';
    await run(id, `${verb}d`, () => apiPost(`/api/v1/experiments/${id}/${verb}`), [archive]);
    sync();
  });
  del.addEventListener('click', async () => {
    if (!window.confirm(`Delete experiment ${id} with its checkpoints, metrics and logs? This cannot be undone.`)) {
      return;
    }
    const ok = await run(id, 'deleting', () => apiFetch(`/api/v1/experiments/${id}`, {method: 'DELETE'}), [del]);
    if (ok) location.hash = '#/experiments';
  });
  head.append(h('span', {class: 'actions', 'data-testid': 'lifecycle-actions'}, archive, del));
  sync();
  // Follow state changes (app.js updates the state badge's data-state).
  const badge = head.querySelector('.state');
  if (badge) new MutationObserver(sync).observe(badge, {attributes: true, attributeFilter: ['data-state']});
}

function onRender() {
  const main = document.getElementById('main');
  if (!main) return;
  const list = main.querySelector('[data-testid="experiments-view"]');
  if (list) addListToggle(list);
  const page = main.querySelector('[data-testid="experiment-view"]');
  if (page) addExperimentButtons(page);
}

function start() {
  const main = document.getElementById('main');
  if (!main) return;
  new MutationObserver(onRender).observe(main, {childList: true});
  onRender();
}

if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start);
else start();
