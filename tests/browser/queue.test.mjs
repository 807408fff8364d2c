#!/usr/bin/env node
// Browser test of the dashboard's job queue page (issue 16), in real headless
// Chromium: a det-master and one det-agent with one slot run experiment A
// (priority 10); B then C (priority 50) wait. The Queue page (nav link,
// #/queue) lists A, B, C in that order with their priorities; setting C's
// priority to 40 with its field and Set moves its row before B's, and B's
// "Move up" button moves B back ahead of C (PATCH /api/v1/jobs/<id>), each
// checked against GET /api/v1/job-queue, without reloading the page.
//
//   node tests/browser/queue.test.mjs     (after tests/browser/setup.sh)
//
// Env: DET_BUILD_DIR (default <repo>/build), DET_CHROMIUM (default
// /usr/bin/chromium), DET_KEEP_TMP=1. Exit status: 0 pass, 1 fail, 77
// skipped (no chromium / playwright-core).
import path from 'node:path';
import {
  api, byId, check, createExperiment, log, runTest, setup, startAgent, startMaster, waitFor, withDashboardPage,
} from './harness.mjs';

const tmp = await setup({name: 'queue'});

const queueOrder = async () => ((await api('/api/v1/job-queue')).jobs || []).map((j) => j.job_id);

const yaml = (name, priority) => `name: ${name}
hyperparameters:
  global_batch_size: 16
  learning_rate: 0.01
  hidden_size: 16
  dropout: 0.1
  batch_delay_ms: 100
searcher:
  name: single
  metric: validation_loss
  smaller_is_better: true
  max_length:
    batches: 100000
resources:
  priority: ${priority}
environment:
  environment_variables:
    - OMP_NUM_THREADS=1
data:
  train_size: 256
  val_size: 64
`;
// Creates the experiment; returns its job id (exp-<id>).
const createJob = async (name, priority) => `exp-${await createExperiment(name, yaml(name, priority))}`;

async function main() {
  await startMaster();
  await startAgent();

  const a = await createJob('urgent', 10);
  await waitFor(`${a} to hold the slot`, async () => {
    const j = ((await api('/api/v1/job-queue')).jobs || []).find((x) => x.job_id === a);
    return j && j.state === 'JOB_STATE_SCHEDULED';
  }, 120000, 250);
  const b = await createJob('b', 50);
  const c = await createJob('c', 50);
  check(JSON.stringify(await queueOrder()) === JSON.stringify([a, b, c]), `queue ${await queueOrder()}`);

  await withDashboardPage(900, async ({page, pageErrors}) => {
    await page.click(byId('nav-queue'));
    await page.waitForSelector(byId('queue-view'));
    const rowOrder = () => page.$$eval('[data-testid^="job-row-"]',
      (rows) => rows.map((r) => r.getAttribute('data-testid').replace('job-row-', '')));
    const waitRows = (want, what) => waitFor(what, async () =>
      JSON.stringify(await rowOrder()) === JSON.stringify(want), 30000);
    await waitRows([a, b, c], 'rows A, B, C');
    const cells = async (id) => page.$$eval(`${byId(`job-row-${id}`)} td`, (tds) => tds.map((td) => td.textContent));
    const rowC = await cells(c);
    check(rowC[0] === '2' && rowC[4] === 'QUEUED' && rowC[5] === '50', `row of ${c}: ${rowC}`);
    check((await cells(a))[4] === 'SCHEDULED', `row of ${a}: ${await cells(a)}`);
    log(`queue page: ${await rowOrder()}`);

    // Priority 40 for C: its row moves before B's.
    await page.fill(byId(`job-priority-input-${c}`), '40');
    await page.click(byId(`job-set-priority-${c}`));
    await waitRows([a, c, b], 'C before B after priority 40');
    check(JSON.stringify(await queueOrder()) === JSON.stringify([a, c, b]), `API queue ${await queueOrder()}`);
    check((await cells(c))[5] === '40', `row of ${c}: ${await cells(c)}`);
    log(`C set to priority 40: ${await rowOrder()}`);

    // Move B up: ahead of C (it takes C's priority).
    await page.click(byId(`job-move-up-${b}`));
    await waitRows([a, b, c], 'B before C after Move up');
    check(JSON.stringify(await queueOrder()) === JSON.stringify([a, b, c]), `API queue ${await queueOrder()}`);
    check((await cells(b))[5] === '40', `row of ${b}: ${await cells(b)}`);
    check(await page.isDisabled(byId(`job-move-up-${a}`)), 'the first job cannot move up');
    await page.screenshot({path: path.join(tmp, 'dashboard-queue.png')});
    log(`B moved up: ${await rowOrder()}`);
    check(pageErrors.length === 0, `page errors: ${pageErrors.join('; ')}`);
  });
}

await runTest(main);
