// Dashboard controls for forks and one trial's pause (loaded beside app.js,
// which stays unchanged): on a trial page, Pause / Activate buttons next to
// "Kill trial" (POST /api/v1/trials/<id>/pause|activate); on an experiment
// page, "forked from #N" under the title when the experiment has a parent
// (Experiment.parent_id). The buttons follow the trial's state badge
// (data-state), so they need no polling of their own.
import {apiGet, apiPost} from './api.js';
import {h} from './dom.js';

function trialButtons(view) {
  const head = view.querySelector('.page-head');
  const badge = head && head.querySelector('[data-state]');
  if (!head || !badge) return;
  const id = (badge.getAttribute('data-testid') || '').replace('trial-state-', '');
  if (!/^[0-9]+$/.test(id)) return;
  let pause = head.querySelector(`[data-testid="pause-trial-${id}"]`);
  let activate = head.querySelector(`[data-testid="activate-trial-${id}"]`);
  if (!pause) {
    const act = (verb, button) => async () => {
      button.disabled = true;
      try {
        await apiPost(`/api/v1/trials/${id}/${verb}`);
      } catch (e) {
        window.alert(`Trial ${id}: ${verb} failed: ${e.message}`);
        button.disabled = false;
      }
    };
    pause = h('button', {type: 'button', 'data-testid': `pause-trial-${id}`, text: 'Pause trial'});
    activate = h('button', {type: 'button', 'data-testid': `activate-trial-${id}`, text: 'Activate trial'});
    pause.onclick = act('pause', pause);
    activate.onclick = act('activate', activate);
    head.append(pause, activate);
  }
  const state = badge.getAttribute('data-state') || '';
  pause.disabled = state !== 'STATE_ACTIVE' && state !== 'STATE_WAITING';  // a waiting trial can be paused
  activate.disabled = state !== 'STATE_PAUSED';
}

const parentShown = new Map();  // experiment id -> parent id (0: none)

async function forkedFrom(view) {
  const m = /^#\/experiments\/([0-9]+)/.exec(window.location.hash);
  const head = view.querySelector('.page-head');
  if (!m || !head || head.querySelector('[data-testid="experiment-parent"]')) return;
  const id = m[1];
  if (!parentShown.has(id)) {
    parentShown.set(id, 0);
    try {
      const e = (await apiGet(`/api/v1/experiments/${id}`)).experiment || {};
      parentShown.set(id, Number(e.parent_id || 0));
    } catch {
      parentShown.delete(id);
      return;
    }
  }
  const parent = parentShown.get(id);
  if (!parent || head.querySelector('[data-testid="experiment-parent"]')) return;
  head.append(h('span', {class: 'muted', 'data-testid': 'experiment-parent'},
    'forked from ', h('a', {href: `#/experiments/${parent}`, text: `#${parent}`})));
}

function decorate() {
  const trial = document.querySelector('[data-testid="trial-view"]');
  if (trial) trialButtons(trial);
  const exp = document.querySelector('[data-testid="experiment-view"]');
  if (exp) forkedFrom(exp);
}

function start() {
  const main = document.getElementById('main');
  if (!main) return;
  new MutationObserver(decorate).observe(main, {childList: true, subtree: true, attributes: true,
    attributeFilter: ['data-state']});
  decorate();
}

if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start);
else start();
