#!/usr/bin/env node
// Browser test of issue 46's finding 3 (CSRF through the dashboard cookie),
// in real headless Chromium. `admin` logs in to the dashboard, which sets
// the det_token cookie (HttpOnly, SameSite=Strict) for 127.0.0.1. A page
// served by a node http server on another loopback port (same-site, so the
// browser attaches the cookie) then, in the same browser:
//   * fetch()es POST /api/v1/users with mode 'no-cors' and a text/plain body
//     that is valid JSON, credentials included;
//   * auto-submits a <form enctype="text/plain"> whose one field makes the
//     body valid JSON (the red team's attack), to the same route.
// The master must refuse both (403: a cookie-authenticated write needs the
// master's own Origin and Content-Type: application/json, csrf.h), so no user
// is created (checked through the API). Then the dashboard still works: its
// experiment list shows a paused experiment, and its Activate and Pause
// buttons change the experiment's state (writes it sends with its Bearer
// token).
//
//   node tests/browser/csrf.test.mjs     (after tests/browser/setup.sh)
//
// Env: DET_BUILD_DIR (default <repo>/build), DET_CHROMIUM (default
// /usr/bin/chromium), DET_KEEP_TMP=1. Exit status: 0 pass, 1 fail, 77
// skipped (no chromium / playwright-core).
import http from 'node:http';
import {
  api, byId, check, createExperiment, log, runTest, setup, startMaster, waitFor, withDashboardPage,
} from './harness.mjs';

await setup({name: 'csrf'});

const yaml = `name: csrf-victim
hyperparameters:
  global_batch_size: 16
  learning_rate: 0.01
  hidden_size: 16
  dropout: 0.1
searcher:
  name: single
  metric: validation_loss
  smaller_is_better: true
  max_length:
    batches: 100
environment:
  environment_variables:
    - OMP_NUM_THREADS=1
data:
  train_size: 256
  val_size: 64
`;

// The attacker's page: a no-cors fetch, then the text/plain form, both to
// the master's create-user route. The form's one field is
//   {"user": {"username": "csrf-form", "admin": true}, "password": "pw-1", "x": "
// with the value "}, so the text/plain body is name=value: valid JSON.
function attackPage(target) {
  const field = '{"user": {"username": "csrf-form", "admin": true}, "password": "pw-csrf-form-1", "x": "';
  const fetchBody = JSON.stringify({user: {username: 'csrf-fetch', admin: true}, password: 'pw-csrf-fetch-1'});
  const attr = (s) => s.replace(/&/g, '&amp;').replace(/"/g, '&quot;');
  return `<!doctype html><html><head><title>cute cats</title></head><body>
<form id="f" method="POST" action="${attr(target)}" enctype="text/plain">
  <input type="hidden" name="${attr(field)}" value='"}'>
</form>
<script>
  fetch(${JSON.stringify(target)}, {method: 'POST', mode: 'no-cors', credentials: 'include',
    headers: {'Content-Type': 'text/plain'}, body: ${JSON.stringify(fetchBody)}})
    .catch(() => {})
    .finally(() => { document.title = 'fetched'; document.getElementById('f').submit(); });
</script></body></html>`;
}

// Serves `html` at / on 127.0.0.1, a port the OS chooses; resolves to
// {server, origin}.
function serveAttacker(html) {
  const server = http.createServer((req, res) => {
    res.writeHead(200, {'Content-Type': 'text/html; charset=utf-8'});
    res.end(html);
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => {
    resolve({server, origin: `http://127.0.0.1:${server.address().port}`});
  }));
}

const usernames = async () => ((await api('/api/v1/users')).users || []).map((u) => u.username);

async function main() {
  const {httpBase} = await startMaster();
  const exp = await createExperiment('csrf-victim', yaml, '--paused');
  const before = await usernames();
  check(!before.includes('csrf-form') && !before.includes('csrf-fetch'), `users before: ${before}`);

  const {server, origin} = await serveAttacker(attackPage(`${httpBase}/api/v1/users`));
  check(origin !== httpBase, 'the attacker page must be on another port');
  try {
    await withDashboardPage(900, async ({page, pageErrors}) => {
      // The precondition of the attack: the admin's cookie is in the browser.
      const cookies = await page.context().cookies(httpBase);
      check(cookies.some((c) => c.name === 'det_token' && c.value), `no det_token cookie after login: ` +
        JSON.stringify(cookies.map((c) => c.name)));

      // The logged-in browser visits the attacker's page. Its form's
      // submission navigates the page to the master's answer.
      await page.goto(`${origin}/`);
      await page.waitForURL(`${httpBase}/api/v1/users`, {timeout: 30000});
      const answer = await page.textContent('body');
      log(`the form POST got: ${answer}`);
      check(answer.includes('PERMISSION_DENIED') && answer.includes(`from origin ${origin} refused`),
        `the form POST from ${origin} was not refused as cross-origin: ${answer}`);
      // Chromium logs the refused requests (403) as console errors.
      log(`console during the attack: ${pageErrors.splice(0).join('; ') || '(nothing)'}`);
      const after = await usernames();
      check(!after.includes('csrf-form'), `the text/plain form created user csrf-form: ${after}`);
      check(!after.includes('csrf-fetch'), `the no-cors fetch created user csrf-fetch: ${after}`);
      check(JSON.stringify(after) === JSON.stringify(before), `users changed: ${before} -> ${after}`);
      log(`refused: no user created (users: ${after.join(', ')})`);

      // The dashboard still works (its token is in localStorage): list,
      // Activate, Pause (its own writes).
      await page.goto(`${httpBase}/#/experiments`);
      await page.waitForSelector(byId(`exp-row-${exp}`));
      await page.waitForFunction((s) => !document.querySelector(s).disabled, byId(`activate-${exp}`));
      await page.click(byId(`activate-${exp}`));
      await waitFor(`experiment ${exp} to be ACTIVE`, async () =>
        (await api(`/api/v1/experiments/${exp}`)).experiment.state === 'STATE_ACTIVE', 30000, 100);
      await page.waitForFunction((s) => !document.querySelector(s).disabled, byId(`pause-${exp}`));
      await page.click(byId(`pause-${exp}`));
      await waitFor(`experiment ${exp} to be PAUSED`, async () =>
        (await api(`/api/v1/experiments/${exp}`)).experiment.state === 'STATE_PAUSED', 30000, 100);
      check(pageErrors.length === 0, `dashboard errors: ${pageErrors.join('; ')}`);
      log(`dashboard: activate and pause of experiment ${exp} worked`);
    }, {username: 'admin'});
  } finally {
    server.close();
  }
  // The master is alive.
  check((await api('/api/v1/master')).version !== undefined, 'GET /api/v1/master failed');
}

await runTest(main, {kept: 'logs'});
