#!/usr/bin/env node
// Browser test of the web dashboard (issue 7), in real headless Chromium.
//
// Starts a det-master and a det-agent, runs a short random search to
// COMPLETED and starts a slow experiment that keeps running; then opens the
// dashboard that det-master serves itself (GET / on its HTTP port; the asset
// routes are checked too) and checks that
//   * the experiment list shows the finished experiment COMPLETED with the
//     REST API's best validation metric,
//   * its trials table shows every trial's stored best validation value,
//   * its top-checkpoints table lists REST's best checkpoints by the
//     searcher metric in order, and a row's download link downloads the tar,
//   * the learning-curve SVG has one path per trial with exactly the stored
//     validation (and, after switching the metric, training) points,
//   * the hyperparameter scatter has a point per trial at (hparam, best),
//   * the trial page shows the stored metrics, checkpoints and logs,
//   * its "Where the time goes" card (profile_charts.js, issue 48) stacks
//     every phase of the stored `profiling` rows, its table's seconds are
//     REST's sums and its shares add up to ~100%, the CPU chart has a point
//     per `system` row; an unprofiled (the running) trial's page shows the
//     hint how to enable profiling instead,
//   * the agents page lists the agent,
//   * clicking Pause on the running experiment turns its state to PAUSED,
//     Activate back to ACTIVE, and Kill (on its page) to CANCELED, all
//     without reloading; Archive hides it from the list until "Show
//     archived" is ticked, and Delete (confirmed) removes it;
// and writes screenshots ($DET_SCREENSHOT_DIR, else the test's temp dir):
// dashboard-experiment-<id>.png, dashboard-trial-<id>.png,
// dashboard-experiments.png.
//
//   node tests/browser/dashboard.test.mjs     (after tests/browser/setup.sh)
//
// Env: DET_BUILD_DIR (default <repo>/build), DET_CHROMIUM (default
// /usr/bin/chromium), DET_SCREENSHOT_DIR, DET_KEEP_TMP=1 (keep everything).
// Exit status: 0 pass, 1 fail, 77 skipped (no chromium / playwright-core).
import fs from 'node:fs';
import path from 'node:path';
import {
  api, apiToken, byId, check, createExperiment, log, runTest, setup, sourceDir, startAgent, startMaster, waitFor,
  withDashboardPage,
} from './harness.mjs';

const tmp = await setup({name: 'dashboard', verbose: true, retryErrors: true});
const shotDir = process.env.DET_SCREENSHOT_DIR ? path.resolve(process.env.DET_SCREENSHOT_DIR) : tmp;
fs.mkdirSync(shotDir, {recursive: true});

const closeTo = (a, b) => Math.abs(a - b) <= 1e-3 * Math.max(1, Math.abs(b));

// ---- the test -------------------------------------------------------------

let httpBase = '';
const COMPLETED_YAML = `name: dashboard-finished
hyperparameters:
  global_batch_size: 32
  learning_rate:
    type: log
    minval: -3
    maxval: -1
  hidden_size:
    type: categorical
    vals: [16, 32]
  dropout: 0.1
searcher:
  name: random
  metric: validation_loss
  smaller_is_better: true
  max_trials: 2
  max_length:
    batches: 60
min_validation_period:
  batches: 20
scheduling_unit: 10
reproducibility:
  experiment_seed: 7
profiling:
  enabled: true
data:
  train_size: 512
  val_size: 128
`;
const SLOW_YAML = `name: dashboard-running
hyperparameters:
  global_batch_size: 32
  learning_rate: 0.01
  hidden_size: 16
  dropout: 0.1
  batch_delay_ms: 200
searcher:
  name: single
  metric: validation_loss
  smaller_is_better: true
  max_length:
    batches: 400
min_validation_period:
  batches: 20
scheduling_unit: 10
data:
  train_size: 512
  val_size: 128
`;

async function startCluster() {
  let grpc;
  ({grpc, httpBase} = await startMaster());
  await startAgent();
  log(`cluster up: gRPC ${grpc}, REST ${httpBase}`);
}

async function waitExperimentState(id, state, timeoutMs) {
  return waitFor(`experiment ${id} to be ${state}`, async () => {
    const e = (await api(`/api/v1/experiments/${id}`)).experiment;
    if (e.state === state) return e;
    check(!['STATE_COMPLETED', 'STATE_CANCELED', 'STATE_ERROR'].includes(e.state),
      `experiment ${id} ended ${e.state} (${e.error_message}) while waiting for ${state}`);
    return null;
  }, timeoutMs, 250);
}

// The dashboard is served by det-master itself on its HTTP port (assets
// embedded in the binary): checks the asset routes, returns the page's URL.
async function dashboardUrl() {
  const get = async (p) => {
    const res = await fetch(`${httpBase}${p}`);
    return {status: res.status, type: res.headers.get('content-type') || '', body: await res.text()};
  };
  for (const p of ['/', '/dashboard', '/dashboard/']) {
    const r = await get(p);
    check(r.status === 200 && r.type.startsWith('text/html') && /<meta\s+name="det-dashboard"/.test(r.body),
      `GET ${p}: ${r.status} ${r.type}, not the dashboard page`);
  }
  const types = {'.js': 'text/javascript', '.css': 'text/css', '.html': 'text/html'};
  const assetDir = path.join(sourceDir, 'master/http/dashboard');
  for (const file of fs.readdirSync(assetDir)) {
    const type = types[path.extname(file)] || '';
    const r = await get(`/dashboard/${file}`);
    const onDisk = fs.readFileSync(path.join(assetDir, file), 'utf8');
    check(r.status === 200 && r.type.startsWith(type), `GET /dashboard/${file}: ${r.status} ${r.type}`);
    check(r.body === onDisk, `GET /dashboard/${file}: differs from master/http/dashboard/${file} (rebuild det-master)`);
  }
  for (const p of ['/dashboard/nope.js', '/dashboard/..%2f..%2fCMakeLists.txt', '/dashboard/%2e%2e/CMakeLists.txt']) {
    const r = await get(p);
    check(r.status === 404 && !r.body.includes('cmake_minimum_required'), `GET ${p}: ${r.status}, want 404`);
  }
  log(`det-master serves the dashboard at ${httpBase}/`);
  return httpBase;
}

// The client side of auth (the master's login route may not exist yet): the
// API is made to answer 401 without `Authorization: Bearer tok-1`; the page
// must show the login form, POST /api/v1/auth/login, store the token, send it
// on every request and then show the data.
async function checkLogin(browser, base, expId) {
  const context = await browser.newContext();
  try {
    const page = await context.newPage();
    const logins = [];
    let authorized = 0;
    await page.route('**/api/v1/**', async (route) => {
      const req = route.request();
      const url = new URL(req.url());
      const json = (status, body) => route.fulfill({status, contentType: 'application/json', body: JSON.stringify(body)});
      if (url.pathname === '/api/v1/auth/login') {
        const body = req.postDataJSON();
        logins.push(body);
        if (body.username === 'determined' && body.password === 'secret') return json(200, {token: 'tok-1'});
        return json(401, {code: 16, error: 'UNAUTHENTICATED', message: 'invalid credentials'});
      }
      if (req.headers().authorization !== 'Bearer tok-1') {
        return json(401, {code: 16, error: 'UNAUTHENTICATED', message: 'missing or invalid token'});
      }
      authorized++;
      // The page sent the mock's token; the real master wants a real one.
      return route.continue({headers: {...req.headers(), authorization: `Bearer ${await apiToken()}`}});
    });
    await page.goto(`${base}/#/experiments`);
    await page.waitForSelector(byId('login-form'));
    await page.fill(byId('login-username'), 'determined');
    await page.fill(byId('login-password'), 'wrong');
    await page.click(byId('login-submit'));
    await page.waitForFunction((s) => document.querySelector(s)?.textContent === 'invalid credentials',
      byId('login-error'));
    await page.fill(byId('login-password'), 'secret');
    await page.click(byId('login-submit'));
    await page.waitForSelector(byId('login-form'), {state: 'detached'});
    await page.waitForFunction((s) => document.querySelector(s)?.textContent === 'COMPLETED',
      byId(`exp-state-${expId}`));
    const token = await page.evaluate(() => localStorage.getItem('det.token'));
    check(token === 'tok-1', `token in localStorage: ${token}`);
    check(logins.length === 2 && authorized > 0, `logins ${JSON.stringify(logins)}, authorized requests ${authorized}`);
    check(await page.isVisible(byId('logout')), 'no logout button after login');
    log(`auth: 401 -> login form -> POST /api/v1/auth/login -> ${authorized} requests with the bearer token`);
  } finally {
    await context.close();
  }
}

// The trial page's profile card against the trial's stored `profiling`
// and `system` rows (REST): a stacked group per phase with bars, each
// phase's seconds as REST sums them, shares adding up to ~100%, one CPU
// point per system sample, the GPU charts hidden (no NVML here), and the
// share toggle relabelling the axis.
async function checkProfileCard(page, trialId) {
  const rows = (await api(`/api/v1/trials/${trialId}/metrics?group=profiling&full_resolution=true`)).metrics || [];
  const sys = (await api(`/api/v1/trials/${trialId}/metrics?group=system`)).metrics || [];
  check(rows.length > 0 && sys.length > 0,
    `profiled trial ${trialId} has ${rows.length} profiling and ${sys.length} system rows`);
  const phases = ['data_loader_s', 'forward_s', 'backward_s', 'allreduce_s', 'optimizer_step_s', 'checkpoint_s',
    'validation_s', 'runtime_s', 'unattributed_s'];
  await page.waitForFunction((s) => document.querySelectorAll(`${s} rect`).length > 0, byId('profile-chart'),
    {timeout: 30000});
  check(!(await page.isVisible(byId('profile-hint'))), 'a profiled trial shows the enable-profiling hint');
  const groups = await page.$$eval(`${byId('profile-chart')} g[data-testid^="profile-phase-"]`,
    (gs) => gs.map((g) => g.getAttribute('data-testid').replace('profile-phase-', '')));
  check(JSON.stringify(groups) === JSON.stringify(phases), `profile chart phases: ${groups.join(', ')}`);
  let shares = 0;
  for (const m of phases) {
    const want = rows.reduce((a, r) => a + Math.max(0, Number(r.metrics[m]) || 0), 0);
    const cells = await page.$$eval(`${byId(`profile-row-${m}`)} td`, (tds) => tds.map((td) => td.textContent));
    check(Math.abs(Number(cells[1]) - want) < 0.0015, `profile table ${m}: ${cells[1]} s, REST sums ${want}`);
    shares += Number(cells[2].replace('%', ''));
  }
  check(Math.abs(shares - 100) <= 5, `profile table shares add up to ${shares}%`);
  const cpuRows = sys.filter((r) => r.metrics.cpu_ratio !== undefined).length;
  const cpuPoints = Number(await page.getAttribute(byId('system-cpu-chart-line-cpu'), 'data-points'));
  check(cpuPoints === cpuRows, `CPU chart: ${cpuPoints} points, ${cpuRows} system rows with cpu_ratio`);
  check(!(await page.isVisible(byId('system-gpu-util-chart'))), 'GPU charts shown without GPU samples');
  await page.check(byId('profile-share'));
  await page.waitForFunction((s) => document.querySelector(s).textContent.includes('share of wall time'),
    byId('profile-chart'));
  log(`trial ${trialId} profile card: ${rows.length} windows, shares ${shares.toFixed(1)}%, ${cpuPoints} CPU points`);
}

async function main() {
  await startCluster();

  const finished = Number(await createExperiment('finished', COMPLETED_YAML));
  log(`experiment ${finished} created; waiting for COMPLETED`);
  const exp = await waitExperimentState(finished, 'STATE_COMPLETED', 150000);
  const metric = exp.searcher_metric;
  const trials = (await api(`/api/v1/experiments/${finished}/trials`)).trials;
  check(trials.length === 2, `expected 2 trials, got ${trials.length}`);
  const stored = {};
  for (const t of trials) {
    stored[t.id] = {
      validation: (await api(`/api/v1/trials/${t.id}/metrics?group=validation`)).metrics,
      training: (await api(`/api/v1/trials/${t.id}/metrics?group=training`)).metrics,
      checkpoints: (await api(`/api/v1/trials/${t.id}/checkpoints`)).checkpoints || [],
    };
    check(stored[t.id].validation.length > 0, `trial ${t.id} has no stored validation metrics`);
  }
  log(`experiment ${finished} COMPLETED: best ${metric} ${exp.best_validation_metric}; trials ` +
      trials.map((t) => `${t.id} (${stored[t.id].validation.length} validation, ` +
                        `${stored[t.id].training.length} training rows)`).join(', '));

  const running = Number(await createExperiment('running', SLOW_YAML));
  await waitFor(`experiment ${running} to train`, async () => {
    const ts = (await api(`/api/v1/experiments/${running}/trials`)).trials || [];
    return ts.length > 0 && ts[0].state === 'STATE_ACTIVE' && Number(ts[0].total_batches_processed) > 0;
  }, 60000, 250);
  log(`experiment ${running} is running`);

  const base = await dashboardUrl();
  // The master answers 401 until the page logs in: as `determined`, with
  // the empty password the master bootstraps.
  await withDashboardPage(1000, async ({browser, page, pageErrors}) => {
    log('logged in through the dashboard as determined');
    const text = async (id) => (await page.textContent(byId(id)))?.trim();
    const waitText = (id, want, timeout = 30000) => page.waitForFunction(
      ([sel, w]) => document.querySelector(sel)?.textContent.trim() === w, [byId(id), want], {timeout});

    // Experiment list.
    await waitText(`exp-state-${finished}`, 'COMPLETED');
    const listBest = await page.getAttribute(byId(`exp-best-${finished}`), 'data-value');
    check(Number(listBest) === exp.best_validation_metric,
      `list: best metric ${listBest} != REST ${exp.best_validation_metric}`);
    log(`list: experiment ${finished} COMPLETED, best ${await text(`exp-best-${finished}`)}`);

    // Experiment page: trials table.
    await page.click(byId(`exp-name-${finished}`));
    await page.waitForSelector(byId('experiment-view'));
    await waitText(`exp-state-${finished}`, 'COMPLETED');
    for (const t of trials) {
      const want = t.best_validation.metrics[metric];
      await page.waitForSelector(byId(`trial-row-${t.id}`));
      await waitText(`trial-state-${t.id}`, 'COMPLETED');
      const v = await page.getAttribute(byId(`trial-best-${t.id}`), 'data-value');
      const shown = await text(`trial-best-${t.id}`);
      check(Number(v) === want, `trial ${t.id}: best validation data-value ${v} != REST ${want}`);
      check(closeTo(Number(shown), want), `trial ${t.id}: best validation shown as ${shown}, REST ${want}`);
      check(stored[t.id].validation.some((r) => r.metrics[metric] === want),
        `trial ${t.id}: best ${want} is not among the stored validation rows`);
    }
    log(`experiment page: ${trials.length} trial rows with the stored best ${metric}`);

    // Top checkpoints (issue 45): the REST ranking (sort_by=searcher_metric,
    // best first), in that order, each row with its metric and a download
    // link to the checkpoint download route, which downloads the tar.
    const top = (await api(`/api/v1/experiments/${finished}/checkpoints` +
      '?sort_by=searcher_metric&states=completed&limit=5')).checkpoints || [];
    const all = (await api(`/api/v1/experiments/${finished}/checkpoints`)).checkpoints || [];
    const scored = all.filter((c) => c.state === 'CHECKPOINT_STATE_COMPLETED' && c.searcher_metric !== undefined);
    check(top.length > 0 && top.length === Math.min(5, all.filter((c) => c.state === 'CHECKPOINT_STATE_COMPLETED')
      .length), `REST top checkpoints: ${top.length} of ${all.length}`);
    check(top[0].searcher_metric === Math.min(...scored.map((c) => c.searcher_metric)),
      `REST top checkpoint ${top[0].uuid} (${top[0].searcher_metric}) is not the smallest ${metric}`);
    const topRows = `${byId('top-checkpoints-table')} tbody tr[data-testid^="top-checkpoint-"]`;
    await page.waitForFunction(([s, want]) => Array.from(document.querySelectorAll(s))
      .map((r) => r.getAttribute('data-testid')).join() === want, [topRows, top.map((c) => `top-checkpoint-${c.uuid}`)
      .join()]);
    for (const c of top) {
      const shown = await page.getAttribute(`${byId(`top-checkpoint-${c.uuid}`)} td[data-value]`, 'data-value');
      check(Number(shown) === c.searcher_metric, `top checkpoint ${c.uuid}: metric ${shown} != REST ${c.searcher_metric}`);
      const href = await page.getAttribute(byId(`top-checkpoint-download-${c.uuid}`), 'href');
      check(href === `/api/v1/checkpoints/${c.uuid}/download`, `top checkpoint ${c.uuid}: link ${href}`);
    }
    const [download] = await Promise.all([page.waitForEvent('download'),
      page.click(byId(`top-checkpoint-download-${top[0].uuid}`))]);
    check(download.suggestedFilename() === `${top[0].uuid}.tar`, `download named ${download.suggestedFilename()}`);
    const tarPath = path.join(tmp, 'top-checkpoint.tar');
    await download.saveAs(tarPath);
    const tar = fs.readFileSync(tarPath);
    check(tar.length > 1024 && tar.includes(Buffer.from('metadata.json')), `downloaded tar: ${tar.length} bytes`);
    log(`top checkpoints: ${top.map((c) => `${c.uuid} ${c.searcher_metric}`).join(', ')}; ` +
        `the first's link downloaded ${tar.length} bytes`);

    // Learning curves: one path per trial, one point per stored row.
    const checkCurves = async (group, name) => {
      for (const t of trials) {
        const rows = stored[t.id][group].filter((r) => name in r.metrics);
        const sel = byId(`curve-line-${t.id}`);
        await page.waitForFunction(([s, n]) => document.querySelector(s)?.getAttribute('data-points') === String(n),
          [sel, rows.length]);
        const d = await page.getAttribute(sel, 'd');
        const points = (d.match(/[ML]/g) || []).length;
        check(points === rows.length, `trial ${t.id} ${group} ${name}: path has ${points} points, stored ${rows.length}`);
        // Marker titles carry the exact values.
        const titles = await page.$$eval(`[data-series="${t.id}"] circle title`, (ts) => ts.map((x) => x.textContent));
        const shownValues = titles.map((x) => Number(x.slice(x.lastIndexOf(': ') + 2))).sort();
        const storedValues = rows.map((r) => r.metrics[name]).sort();
        check(JSON.stringify(shownValues) === JSON.stringify(storedValues),
          `trial ${t.id} ${group} ${name}: curve values ${shownValues} != stored ${storedValues}`);
      }
      log(`curves: ${group} ${name}: ${trials.map((t) => `trial ${t.id} ${stored[t.id][group].length} points`).join(', ')}`);
    };
    // The metric choices appear once the trials' metrics have loaded (after
    // the trial rows): wait for them before reading the default.
    await page.waitForFunction((s) => document.querySelector(s)?.value !== '', byId('curve-metric'));
    check(await page.inputValue(byId('curve-metric')) === `validation:${metric}`,
      `curve metric defaults to ${await page.inputValue(byId('curve-metric'))}, not the searcher metric`);
    await checkCurves('validation', metric);
    await page.selectOption(byId('curve-metric'), 'training:loss');
    await checkCurves('training', 'loss');
    await page.selectOption(byId('curve-metric'), `validation:${metric}`);
    await checkCurves('validation', metric);

    // Scatter: learning_rate vs. best validation.
    await page.selectOption(byId('scatter-hparam'), 'learning_rate');
    for (const t of trials) {
      const sel = byId(`scatter-point-${t.id}`);
      await page.waitForFunction(([s, x]) => document.querySelector(s)?.getAttribute('data-x') === x,
        [sel, JSON.stringify(t.hparams.learning_rate)]);
      const y = Number(await page.getAttribute(sel, 'data-y'));
      check(y === t.best_validation.metrics[metric], `scatter: trial ${t.id} y ${y} != ${t.best_validation.metrics[metric]}`);
    }
    log('scatter: a point per trial at (learning_rate, best validation)');

    // Live updates keep the DOM: after two more refreshes the rows and the
    // curve paths are the same nodes (updated in place, not re-rendered).
    const marked = await page.evaluate((ids) => {
      window.__probe = ids.map((id) => document.querySelector(id));
      return window.__probe.every(Boolean);
    }, trials.flatMap((t) => [byId(`trial-row-${t.id}`), byId(`curve-line-${t.id}`), byId(`trial-best-${t.id}`)]));
    check(marked, 'trial rows / curve paths not found');
    const refreshes = Number(await page.getAttribute(byId('poll-status'), 'data-refreshes'));
    await page.waitForFunction(([s, n]) => Number(document.querySelector(s).getAttribute('data-refreshes')) >= n,
      [byId('poll-status'), refreshes + 2], {timeout: 15000});
    const stable = await page.evaluate(() => window.__probe.every((el) => el.isConnected));
    check(stable, 'polling replaced table rows or curve paths instead of updating them in place');
    log(`live updates: ${refreshes} -> ${refreshes + 2} refreshes, rows and paths kept in place`);
    await page.evaluate(() => window.scrollTo(0, 0));
    await page.mouse.move(0, 0);
    const expShot = path.join(shotDir, `dashboard-experiment-${finished}.png`);
    await page.screenshot({path: expShot, fullPage: true});

    // Trial page: metrics table, checkpoints, logs.
    const t0 = trials[0];
    await page.click(`${byId(`trial-row-${t0.id}`)} a`);
    await page.waitForSelector(byId('trial-view'));
    await waitText(`trial-state-${t0.id}`, 'COMPLETED');
    const nVal = stored[t0.id].validation.length;
    await page.waitForFunction(([s, n]) => document.querySelectorAll(s).length === n,
      [byId('validation-metrics-table-row'), nVal]);
    const tableValues = await page.$$eval(`${byId('validation-metrics-table-row')} td[data-value]`,
      (tds) => tds.map((td) => Number(td.getAttribute('data-value'))));
    for (const r of stored[t0.id].validation) {
      check(tableValues.includes(r.metrics[metric]), `trial page: ${metric} ${r.metrics[metric]} not in the table`);
    }
    await page.waitForFunction(([s, n]) => document.querySelectorAll(`${s} tbody tr[data-testid^="checkpoint-row-"]`)
      .length === n, [byId('checkpoints-table'), stored[t0.id].checkpoints.length]);
    await page.waitForFunction((s) => document.querySelectorAll(`${s} .log-line`).length > 0, byId('trial-logs'));
    const nLogs = await page.$$eval(`${byId('trial-logs')} .log-line`, (ls) => ls.length);
    // Issue 45: the best checkpoint and the best validation's batch, as REST says.
    const t0Rest = (await api(`/api/v1/trials/${t0.id}`)).trial;
    check(t0Rest.best_checkpoint_uuid && Number(t0Rest.best_validation.total_batches) > 0,
      `REST trial ${t0.id}: best checkpoint '${t0Rest.best_checkpoint_uuid}', best validation at batch ` +
      `${t0Rest.best_validation.total_batches}`);
    await waitText('trial-best-checkpoint', `${t0Rest.best_checkpoint_uuid} (best validation at batch ` +
      `${Number(t0Rest.best_validation.total_batches)})`);
    log(`trial ${t0.id} page: ${nVal} validation rows, ${stored[t0.id].checkpoints.length} checkpoint(s), ` +
      `${nLogs} log lines, best checkpoint ${t0Rest.best_checkpoint_uuid}`);
    await page.mouse.move(0, 0);
    await checkProfileCard(page, t0.id);
    const trialShot = path.join(shotDir, `dashboard-trial-${t0.id}.png`);
    await page.screenshot({path: trialShot, fullPage: true});

    // The running experiment is not profiled: its trial page says how to.
    const runningTrial = (await api(`/api/v1/experiments/${running}/trials`)).trials[0].id;
    await page.evaluate((id) => { window.location.hash = `#/trials/${id}`; }, runningTrial);
    await page.waitForSelector(`${byId('profile-hint')}:not([hidden])`, {timeout: 30000});
    check((await text('profile-hint')).includes('profiling: {enabled: true}'),
      `trial ${runningTrial}'s profile hint: ${await text('profile-hint')}`);
    check(!(await page.isVisible(byId('profile-chart'))), 'an unprofiled trial shows a profile chart');

    // Agents page.
    await page.click(byId('nav-agents'));
    await page.waitForSelector(byId('agent-row-a'));

    // Pause the running experiment from the list and watch its state change.
    await page.click(byId('nav-experiments'));
    await waitText(`exp-state-${running}`, 'ACTIVE');
    await page.click(byId(`pause-${running}`));
    const seen = ['ACTIVE'];
    await waitFor(`the page to show experiment ${running} PAUSED`, async () => {
      const s = await text(`exp-state-${running}`);
      if (s !== seen[seen.length - 1]) seen.push(s);
      return s === 'PAUSED';
    }, 60000, 50);
    log(`pause clicked: the page showed ${seen.join(' -> ')}`);
    const after = (await api(`/api/v1/experiments/${running}`)).experiment;
    check(after.state === 'STATE_PAUSED', `REST says experiment ${running} is ${after.state}`);
    await page.waitForFunction((s) => !document.querySelector(s).disabled, byId(`activate-${running}`));
    check(await page.isDisabled(byId(`pause-${running}`)), 'pause button still enabled on a paused experiment');
    await page.mouse.move(0, 0);
    const listShot = path.join(shotDir, 'dashboard-experiments.png');
    await page.screenshot({path: listShot, fullPage: true});

    // Activate it again, then kill it from its own page (the confirm dialog
    // is accepted): ACTIVE, then CANCELED, without reloading.
    await page.click(byId(`activate-${running}`));
    await waitText(`exp-state-${running}`, 'ACTIVE', 60000);
    check((await api(`/api/v1/experiments/${running}`)).experiment.state === 'STATE_ACTIVE',
      `REST: experiment ${running} not ACTIVE after the activate click`);
    await page.click(`${byId(`exp-row-${running}`)} a`);
    await page.waitForSelector(byId('experiment-view'));
    page.once('dialog', (d) => d.accept());
    await page.waitForFunction((s) => !document.querySelector(s).disabled, byId(`kill-${running}`));
    await page.click(byId(`kill-${running}`));
    await waitText(`exp-state-${running}`, 'CANCELED', 90000);
    log(`activate clicked: ACTIVE; kill clicked on the experiment page: CANCELED`);

    // Archive it on its page (experiment_actions.js): hidden from the list
    // until "Show archived" is ticked; then Delete (confirmed) goes back to
    // the list and the master deletes it (REST: 404).
    const archiveButton = byId(`archive-toggle-${running}`);
    await page.waitForFunction((s) => document.querySelector(s) && !document.querySelector(s).disabled, archiveButton);
    await page.click(archiveButton);
    await page.waitForFunction((s) => document.querySelector(s).textContent === 'Unarchive', archiveButton);
    check((await api(`/api/v1/experiments/${running}`)).experiment.archived === true,
      `REST: experiment ${running} not archived after the archive click`);
    await page.click(byId('nav-experiments'));
    await page.waitForSelector(byId(`exp-row-${finished}`));
    check(!(await page.isVisible(byId(`exp-row-${running}`))), 'an archived experiment is listed by default');
    await page.check(byId('show-archived'));
    await page.waitForSelector(byId(`exp-row-${running}`));
    await page.click(`${byId(`exp-row-${running}`)} a`);
    await page.waitForSelector(byId(`delete-${running}`));
    await page.waitForFunction((s) => !document.querySelector(s).disabled, byId(`delete-${running}`));
    page.once('dialog', (d) => d.accept());
    await page.click(byId(`delete-${running}`));
    await page.waitForSelector(byId('experiments-view'));
    await waitFor(`experiment ${running} to be deleted`, async () => {
      const res = await fetch(`${httpBase}/api/v1/experiments/${running}`,
        {headers: {Authorization: `Bearer ${await apiToken()}`}});
      return res.status === 404;
    }, 30000, 200);
    await page.uncheck(byId('show-archived'));
    log(`archive, show archived, delete clicked: experiment ${running} gone`);

    await checkLogin(browser, base, finished);

    check(pageErrors.length === 0, `errors in the page:\n${pageErrors.join('\n')}`);
    for (const f of [expShot, trialShot, listShot]) {
      const head = fs.readFileSync(f).subarray(0, 8);
      check(head.equals(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])) && fs.statSync(f).size > 10000,
        `screenshot ${f} is not a PNG`);
    }
    log(`screenshots: ${expShot} ${trialShot} ${listShot}`);
  });
  await api(`/api/v1/experiments/${running}/kill`, 'POST').catch(() => {});
}

await runTest(main, {kept: 'logs and screenshots'});
