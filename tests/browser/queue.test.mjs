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
import {spawn, execFile} from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {fileURLToPath} from 'node:url';

const SKIP = 77;
const started = Date.now();
const here = path.dirname(fileURLToPath(import.meta.url));
const sourceDir = path.resolve(here, '../..');
const buildDir = path.resolve(process.env.DET_BUILD_DIR || path.join(sourceDir, 'build'));
const chromiumPath = process.env.DET_CHROMIUM || '/usr/bin/chromium';
const bin = (name) => path.join(buildDir, 'bin', name);
const trialSo = path.join(buildDir, 'trials', 'synthetic_trial.so');
const log = (...a) => console.log(`[queue-test +${((Date.now() - started) / 1000).toFixed(1)}s]`, ...a);

if (!fs.existsSync(chromiumPath)) {
  console.log(`SKIP: no Chromium at ${chromiumPath}`);
  process.exit(SKIP);
}
let chromium;
try {
  ({chromium} = await import('playwright-core'));
} catch (e) {
  console.log(`SKIP: playwright-core is not installed (run tests/browser/setup.sh): ${e.message}`);
  process.exit(SKIP);
}
for (const f of [bin('det-master'), bin('det-agent'), bin('det-cli'), trialSo]) {
  if (!fs.existsSync(f)) {
    console.error(`FAIL: ${f} is missing; build det-master det-agent det-cli synthetic_trial first`);
    process.exit(1);
  }
}

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'det-queue-test-'));
process.env.DET_AUTH_FILE = path.join(tmp, 'det-auth.json');
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
class TestFailure extends Error {}
function check(cond, message) {
  if (!cond) throw new TestFailure(message);
}
async function waitFor(what, fn, timeoutMs, intervalMs = 100) {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new TestFailure(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(intervalMs);
  }
}

const children = [];
function startProcess(name, argv) {
  const out = fs.openSync(path.join(tmp, `${name}.log`), 'w');
  const p = spawn(argv[0], argv.slice(1), {stdio: ['ignore', out, out]});
  fs.closeSync(out);
  p.exited = new Promise((resolve) => p.on('exit', (code, sig) => resolve(sig || code)));
  children.push({name, p});
  return p;
}
async function stopProcesses() {
  for (const {p} of children.slice().reverse()) {
    if (p.exitCode !== null || p.signalCode !== null) continue;
    p.kill('SIGTERM');
    const r = await Promise.race([p.exited, sleep(15000).then(() => 'timeout')]);
    if (r === 'timeout') {
      p.kill('SIGKILL');
      await p.exited;
    }
  }
}
process.on('exit', () => {
  for (const {p} of children) if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL');
});
function run(argv, timeoutMs = 120000) {
  return new Promise((resolve, reject) => {
    execFile(argv[0], argv.slice(1), {timeout: timeoutMs}, (err, stdout, stderr) => {
      if (err) reject(new Error(`${argv.join(' ')} failed: ${err.message}\n${stdout}\n${stderr}`));
      else resolve(stdout);
    });
  });
}

let grpc = '';
let httpBase = '';
let apiToken = '';
async function api(p) {
  if (!apiToken) {
    const res = await fetch(`${httpBase}/api/v1/auth/login`, {
      method: 'POST', headers: {'Content-Type': 'application/json'},
      body: JSON.stringify({username: 'determined', password: ''}),
    });
    apiToken = (await res.json()).token;
    check(apiToken, 'login as determined failed');
  }
  const res = await fetch(`${httpBase}${p}`, {headers: {Authorization: `Bearer ${apiToken}`}});
  const body = await res.json();
  if (!res.ok) throw new Error(`GET ${p}: ${res.status} ${JSON.stringify(body)}`);
  return body;
}
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
async function createExperiment(name, priority) {
  const cfg = path.join(tmp, `${name}.yaml`);
  fs.writeFileSync(cfg, yaml(name, priority));
  const out = await run([bin('det-cli'), '-m', grpc, 'experiment', 'create', cfg, trialSo]);
  const m = out.match(/Created experiment (\d+)/);
  check(m, `det-cli experiment create printed no experiment id: ${out}`);
  return `exp-${m[1]}`;
}

async function main() {
  const portsFile = path.join(tmp, 'ports.json');
  startProcess('master', [bin('det-master'), '--data-dir', path.join(tmp, 'master'), '--grpc-port', '0',
    '--http-port', '0', '--ports-file', portsFile]);
  const ports = await waitFor('the master ports file', () => {
    const text = fs.existsSync(portsFile) ? fs.readFileSync(portsFile, 'utf8') : '';
    return text.trim() ? JSON.parse(text) : null;
  }, 30000);
  grpc = `127.0.0.1:${ports.grpc}`;
  httpBase = `http://127.0.0.1:${ports.http}`;
  startProcess('agent', [bin('det-agent'), '--master', grpc, '--id', 'a', '--slots', '1', '--work-dir',
    path.join(tmp, 'agent')]);
  await waitFor('agent a to connect', async () => {
    const r = await api('/api/v1/agents');
    return (r.agents || []).some((a) => a.id === 'a' && a.connected);
  }, 30000);

  const a = await createExperiment('urgent', 10);
  await waitFor(`${a} to hold the slot`, async () => {
    const j = ((await api('/api/v1/job-queue')).jobs || []).find((x) => x.job_id === a);
    return j && j.state === 'JOB_STATE_SCHEDULED';
  }, 120000, 250);
  const b = await createExperiment('b', 50);
  const c = await createExperiment('c', 50);
  check(JSON.stringify(await queueOrder()) === JSON.stringify([a, b, c]), `queue ${await queueOrder()}`);

  const browser = await chromium.launch({
    executablePath: chromiumPath, headless: true, args: ['--no-sandbox', '--disable-dev-shm-usage'],
  });
  const pageErrors = [];
  try {
    const page = await browser.newPage({viewport: {width: 1400, height: 900}});
    page.setDefaultTimeout(30000);
    page.on('pageerror', (e) => pageErrors.push(`pageerror: ${e.message}`));
    let loggedIn = false;
    page.on('console', (m) => {
      if (m.type() !== 'error') return;
      if (!loggedIn && /status of 401/.test(m.text())) return;
      pageErrors.push(`console: ${m.text()}`);
    });
    const byId = (id) => `[data-testid="${id}"]`;
    await page.goto(`${httpBase}/#/experiments`);
    await page.waitForSelector(byId('login-form'));
    await page.fill(byId('login-username'), 'determined');
    await page.fill(byId('login-password'), '');
    await page.click(byId('login-submit'));
    await page.waitForSelector(byId('login-form'), {state: 'detached'});
    loggedIn = true;

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
  } finally {
    await browser.close();
  }
}

const timer = setTimeout(async () => {
  console.error('FAIL: the test took longer than 240 s');
  await stopProcesses();
  console.error(`logs in ${tmp}`);
  process.exit(1);
}, 240000);

let ok = false;
try {
  await main();
  ok = true;
} catch (e) {
  console.error(`FAIL: ${e instanceof TestFailure ? e.message : e.stack}`);
} finally {
  clearTimeout(timer);
  await stopProcesses();
}
if (ok) {
  if (!process.env.DET_KEEP_TMP) {
    for (const d of ['master', 'agent']) fs.rmSync(path.join(tmp, d), {recursive: true, force: true});
  }
  log(`PASS in ${((Date.now() - started) / 1000).toFixed(1)} s (screenshot in ${tmp})`);
  process.exit(0);
}
for (const {name} of children) {
  const f = path.join(tmp, `${name}.log`);
  const tail = fs.existsSync(f) ? fs.readFileSync(f, 'utf8').split('\n').slice(-15).join('\n') : '';
  console.error(`--- ${name}.log (tail) ---\n${tail}`);
}
console.error(`logs in ${tmp}`);
process.exit(1);
