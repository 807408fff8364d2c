// Dashboard controls for agents (loaded beside app.js, which stays
// unchanged): on the agents page, for admins, each agent row gets Enable /
// Disable / Drain buttons (POST /api/v1/agents/<id>/enable, .../disable with
// {"drain": false|true}). Disable preempts the agent's trials (they
// checkpoint and move to another agent); Drain lets them finish and places
// nothing new there; Enable restores placement. The buttons follow the row's
// Enabled cell, which the agents page refreshes, so they poll nothing.
import {apiGet, apiPost, onAuthChange} from './api.js';
import {h} from './dom.js';

let admin = null;  // null: not known yet; a promise while asking

async function isAdmin() {
  if (admin === null) {
    admin = apiGet('/api/v1/me').then((r) => Boolean(r.user && r.user.admin)).catch(() => {
      admin = null;
      return false;
    });
  }
  return admin;
}

function setDisabled(button, disabled) {
  if (button.disabled !== disabled) button.disabled = disabled;
}

function controlsFor(row, id) {
  let cell = row.querySelector('td[data-agent-controls]');
  if (cell) return cell;
  const act = (verb, drain) => async (ev) => {
    const button = ev.currentTarget;
    button.disabled = true;
    try {
      await apiPost(`/api/v1/agents/${encodeURIComponent(id)}/${verb}`, verb === 'disable' ? {drain} : {});
    } catch (e) {
      window.alert(`Agent ${id}: ${verb}${drain ? ' (drain)' : ''} failed: ${e.message}`);
      button.disabled = false;
    }
  };
  const enable = h('button', {type: 'button', 'data-testid': `enable-agent-${id}`, text: 'Enable'});
  const disable = h('button', {type: 'button', 'data-testid': `disable-agent-${id}`, text: 'Disable',
    title: 'Its trials checkpoint and move to another agent'});
  const drain = h('button', {type: 'button', 'data-testid': `drain-agent-${id}`, text: 'Drain',
    title: 'Running trials finish; nothing new is placed here'});
  enable.onclick = act('enable', false);
  disable.onclick = act('disable', false);
  drain.onclick = act('disable', true);
  cell = h('td', {'data-agent-controls': '1'}, enable, disable, drain);
  row.append(cell);
  return cell;
}

async function decorate() {
  const view = document.querySelector('[data-testid="agents-view"]');
  if (!view || !(await isAdmin())) return;
  const head = view.querySelector('[data-testid="agents-table"] thead tr') ||
    view.querySelector('table thead tr');
  if (head && !head.querySelector('th[data-agent-controls]')) {
    head.append(h('th', {'data-agent-controls': '1', text: 'Actions'}));
  }
  for (const row of view.querySelectorAll('tr[data-testid^="agent-row-"]')) {
    const id = row.getAttribute('data-testid').slice('agent-row-'.length);
    const cell = controlsFor(row, id);
    const state = (row.children[4] && row.children[4].textContent) || '';
    const [enable, disable, drain] = cell.children;
    // Enabled: Disable and Drain. Disabled or draining: Enable, and Disable
    // (turns a drain into a preempting disable).
    const enabled = state === 'yes';
    setDisabled(enable, enabled);
    setDisabled(disable, false);
    setDisabled(drain, !enabled);
  }
}

function start() {
  const main = document.getElementById('main');
  if (!main) return;
  new MutationObserver(() => { decorate(); }).observe(main, {childList: true, subtree: true, characterData: true});
  onAuthChange(() => { admin = null; });
  decorate();
}

if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start);
else start();
