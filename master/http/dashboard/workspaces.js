// The experiment list's workspace / project filter (kept out of app.js): a
// "Project" select next to the list's heading, listing every project as
// "workspace / project (experiments)" (GET /api/v1/workspaces and
// /api/v1/workspaces/<id>/projects). The choice is kept in localStorage;
// fetchExperimentList (experiment_actions.js) adds projectQuery() to its
// GET /api/v1/experiments, and a change re-renders the list as the
// "Show archived" toggle does.
import {apiGet} from './api.js';
import {h} from './dom.js';

const KEY = 'det.projectFilter';

function selected() {
  try {
    return localStorage.getItem(KEY) || '';
  } catch {
    return '';
  }
}

function setSelected(id) {
  try {
    if (id) localStorage.setItem(KEY, id);
    else localStorage.removeItem(KEY);
  } catch {
    // no localStorage: the filter stays "All projects"
  }
}

// "&project_id=N" for the selected project; "" for all of them.
export function projectQuery() {
  const id = selected();
  return /^[1-9][0-9]{0,9}$/.test(id) ? `&project_id=${id}` : '';
}

async function loadProjects() {
  const workspaces = (await apiGet('/api/v1/workspaces')).workspaces || [];
  const lists = await Promise.all(
    workspaces.map((w) => apiGet(`/api/v1/workspaces/${encodeURIComponent(w.id)}/projects`)));
  return lists.flatMap((l) => l.projects || []);
}

function rerender() {
  window.dispatchEvent(new HashChangeEvent('hashchange'));  // app.js re-renders the list
}

async function addFilter(view) {
  if (view.querySelector('[data-testid="project-filter"]')) return;
  const select = h('select', {id: 'project-filter', 'data-testid': 'project-filter'},
    h('option', {value: '', text: 'All projects'}));
  select.addEventListener('change', () => {
    setSelected(select.value);
    rerender();
  });
  const label = h('label', {class: 'muted', for: 'project-filter', style: 'margin: 0 1em'}, 'Project ', select);
  const heading = view.querySelector('h2');
  if (heading) heading.after(label);
  let projects = [];
  try {
    projects = await loadProjects();
  } catch {
    return;  // the filter offers "All projects" only
  }
  for (const p of projects) {
    select.append(h('option', {value: String(p.id), 'data-testid': `project-option-${p.id}`,
      text: `${p.workspace_name} / ${p.name} (${p.num_experiments || 0})${p.archived ? ' [archived]' : ''}`}));
  }
  const want = selected();
  if (want && !projects.some((p) => String(p.id) === want)) {
    setSelected('');  // a project this master does not know: show everything
    rerender();
    return;
  }
  select.value = want;
}

function onRender() {
  const list = document.querySelector('#main [data-testid="experiments-view"]');
  if (list) addFilter(list);
}

function start() {
  const main = document.getElementById('main');
  if (!main) return;
  new MutationObserver(onRender).observe(main, {childList: true});
  onRender();
}

if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start);
else start();
