#!/usr/bin/env node
// Browser test of the experiment list's project filter (issue 17,
// master/http/dashboard/workspaces.js), in real headless Chromium: a
// det-master (no agent) with workspace "team-a" holding project "vision"
// (det-cli workspace/project create) and two PAUSED experiments, one in
// team-a/vision and one in Uncategorized. The experiment list shows both;
// choosing "team-a / vision (1)" in the Project select shows only the first
// (checked against GET /api/v1/experiments?project_id=); the choice
// survives a reload; "All projects" shows both again.
//
//   node tests/browser/workspaces.test.mjs     (after tests/browser/setup.sh)
//
// Env: DET_BUILD_DIR (default <repo>/build), DET_CHROMIUM (default
// /usr/bin/chromium), DET_KEEP_TMP=1. Exit status: 0 pass, 1 fail, 77
// skipped (no chromium / playwright-core).
import path from 'node:path';
import {
  api, byId, check, cli, createExperiment, log, runTest, setup, startMaster, waitFor, withDashboardPage,
} from './harness.mjs';

const tmp = await setup({name: 'workspaces'});

const yaml = (name, placement) => `name: ${name}
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
    batches: 10
data:
  train_size: 64
  val_size: 16
${placement}`;
// Creates the experiment PAUSED; returns its id (a string).
const createPaused = (name, placement) => createExperiment(name, yaml(name, placement), '--paused');

async function main() {
  const {httpBase} = await startMaster();
  await waitFor('the master to answer', async () => {
    try {
      return (await fetch(`${httpBase}/api/v1/master`)).ok;
    } catch {
      return false;
    }
  }, 30000);

  await cli('workspace', 'create', 'team-a');
  const created = await cli('project', 'create', 'team-a', 'vision');
  const pm = created.match(/Created project (\d+)/);
  check(pm, `det-cli project create printed no id: ${created}`);
  const projectId = pm[1];
  const placed = await createPaused('placed', 'workspace: team-a\nproject: vision\n');
  const loose = await createPaused('loose', '');
  const inProject = ((await api(`/api/v1/experiments?project_id=${projectId}`)).experiments || []).map((e) => String(e.id));
  check(JSON.stringify(inProject) === JSON.stringify([placed]), `API: project ${projectId} holds ${inProject}`);

  await withDashboardPage(900, async ({page, pageErrors}) => {
    await page.waitForSelector(byId('experiments-view'));
    const rows = () => page.$$eval('[data-testid^="exp-row-"]',
      (trs) => trs.map((r) => r.getAttribute('data-testid').replace('exp-row-', '')).sort());
    const waitRows = (want, what) => waitFor(what, async () =>
      JSON.stringify(await rows()) === JSON.stringify([...want].sort()), 30000);
    await waitRows([placed, loose], 'both experiments listed');
    await page.waitForSelector(byId(`project-option-${projectId}`), {state: 'attached'});
    const label = await page.textContent(byId(`project-option-${projectId}`));
    check(label === 'team-a / vision (1)', `option label: ${label}`);
    log(`list: ${await rows()}; filter offers ${label}`);

    await page.selectOption(byId('project-filter'), projectId);
    await waitRows([placed], 'only the team-a/vision experiment');
    log(`filtered to project ${projectId}: ${await rows()}`);
    await page.reload();
    await page.waitForSelector(byId('experiments-view'));
    await waitRows([placed], 'the filter kept over a reload');
    await page.waitForSelector(byId(`project-option-${projectId}`), {state: 'attached'});
    await waitFor('the select to show the kept choice', async () =>
      (await page.inputValue(byId('project-filter'))) === projectId, 10000);
    await page.screenshot({path: path.join(tmp, 'dashboard-project-filter.png')});

    await page.selectOption(byId('project-filter'), '');
    await waitRows([placed, loose], 'both experiments again');
    log(`all projects: ${await rows()}`);
    check(pageErrors.length === 0, `page errors: ${pageErrors.join('; ')}`);
  });
}

await runTest(main);
