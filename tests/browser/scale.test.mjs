#!/usr/bin/env node
// Browser test of the dashboard at scale (issue 18), in real headless
// Chromium: a det-master and one det-agent with one slot; a 1,000-trial grid
// of the synthetic trial, paused once its first trial has reported (the
// rest stay queued). The experiment page must render: its trials table shows
// one page of 50 rows ("Trials 1–50 of 1000"), Next shows trials 51-100,
// the last page trials 951-1000, First goes back; the learning curves are
// drawn for the page's trials (the first trial's curve is there). The time
// from opening the page to the rendered table is printed (goal: interactive
// in under 2 s), never asserted.
//
//   node tests/browser/scale.test.mjs     (after tests/browser/setup.sh)
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
const log = (...a) => console.log(`[scale-test +${((Date.now() - started) / 1000).toFixed(1)}s]`, ...a);

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

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'det-scale-test-'));
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
async function post(p) {
  const res = await fetch(`${httpBase}${p}`, {method: 'POST', headers: {Authorization: `Bearer ${apiToken}`,
    'Content-Type': 'application/json'}, body: '{}'});
  if (!res.ok) throw new Error(`POST ${p}: ${res.status} ${await res.text()}`);
}

const TRIALS = 1000;
const YAML = `name: scale-grid
hyperparameters:
  global_batch_size: 16
  learning_rate: 0.01
  hidden_size:
    type: int
    minval: 1
    maxval: ${TRIALS}
    count: ${TRIALS}
  dropout: 0.1
searcher:
  name: grid
  metric: validation_loss
  smaller_is_better: true
  max_length:
    batches: 4
min_validation_period:
  batches: 2
scheduling_unit: 2
environment:
  environment_variables:
    - OMP_NUM_THREADS=1
data:
  train_size: 64
  val_size: 32
`;

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

  const cfg = path.join(tmp, 'grid.yaml');
  fs.writeFileSync(cfg, YAML);
  const out = await run([bin('det-cli'), '-m', grpc, 'experiment', 'create', cfg, trialSo]);
  const m = out.match(/Created experiment (\d+)/);
  check(m, `det-cli experiment create printed no experiment id: ${out}`);
  const exp = Number(m[1]);
  const trialIds = [];
  for (let offset = 0; offset < TRIALS; offset += 1000) {
    const r = await api(`/api/v1/experiments/${exp}/trials?limit=1000&offset=${offset}`);
    for (const t of r.trials || []) trialIds.push(Number(t.id));
  }
  trialIds.sort((a, b) => a - b);
  check(trialIds.length === TRIALS, `the grid has ${trialIds.length} trials, want ${TRIALS}`);
  const first = trialIds[0];
  await waitFor(`trial ${first} to report a validation`, async () => {
    const r = await api(`/api/v1/trials/${first}/metrics?group=validation`);
    return (r.metrics || []).length > 0;
  }, 120000, 250);
  await post(`/api/v1/experiments/${exp}/pause`);
  log(`experiment ${exp}: ${TRIALS} trials, trial ${first} reported; paused`);

  const browser = await chromium.launch({
    executablePath: chromiumPath, headless: true, args: ['--no-sandbox', '--disable-dev-shm-usage'],
  });
  const pageErrors = [];
  try {
    const page = await browser.newPage({viewport: {width: 1400, height: 900}});
    page.setDefaultTimeout(30000);
    page.on('pageerror', (e) => pageErrors.push(`pageerror: ${e.message}`));
    let loggedIn = false;
    page.on('console', (msg) => {
      if (msg.type() !== 'error') return;
      if (!loggedIn && /status of 401/.test(msg.text())) return;
      pageErrors.push(`console: ${msg.text()}`);
    });
    const byId = (id) => `[data-testid="${id}"]`;
    await page.goto(`${httpBase}/#/experiments`);
    await page.waitForSelector(byId('login-form'));
    await page.fill(byId('login-username'), 'determined');
    await page.fill(byId('login-password'), '');
    await page.click(byId('login-submit'));
    await page.waitForSelector(byId('login-form'), {state: 'detached'});
    loggedIn = true;

    const rowIds = () => page.$$eval('[data-testid^="trial-row-"]',
      (rows) => rows.map((r) => Number(r.getAttribute('data-testid').replace('trial-row-', ''))));
    const label = () => page.textContent(byId('trials-page'));
    const waitPage = async (from, to, what) => {
      try {
        await waitFor(what, async () => {
          const ids = await rowIds();
          return ids.length === to - from + 1 && ids[0] === trialIds[from - 1] &&
            ids[ids.length - 1] === trialIds[to - 1];
        }, 30000, 50);
      } catch (e) {
        const ids = await rowIds();
        throw new TestFailure(`${e.message}: ${ids.length} rows ${ids[0]}..${ids[ids.length - 1]}, ` +
          `label "${await label()}", errors ${pageErrors.join('; ')}`);
      }
      const text = await label();
      check(text.includes(`Trials ${from}–${to} of ${TRIALS}`), `pager label "${text}" on ${what}`);
    };
    const t0 = Date.now();
    await page.goto(`${httpBase}/#/experiments/${exp}`);
    await waitPage(1, 50, 'the first page of trials');
    const rendered = Date.now() - t0;
    // The first trial's learning curve (its metrics, downsampled by the master).
    // Attached, not visible: a curve of one point is a zero-length path.
    const curve = byId(`curve-line-${first}`);
    await page.waitForSelector(curve, {state: 'attached', timeout: 90000}).catch(async (e) => {
      const status = await page.textContent('#poll-status');
      throw new TestFailure(`no curve of trial ${first}: ${e.message}; status "${status}"`);
    });
    const shown = Date.now() - t0;
    log(`experiment page with ${TRIALS} trials: table rendered in ${rendered} ms, first curve in ${shown} ms ` +
      '(goal: interactive in < 2000 ms; not asserted)');
    await page.screenshot({path: path.join(tmp, 'dashboard-scale-page1.png')});

    await page.click(byId('trials-next'));
    await waitPage(51, 100, 'page 2 after Next');
    await page.click(byId('trials-last'));
    await waitPage(951, 1000, 'the last page');
    check(await page.isDisabled(byId('trials-next')), 'Next is enabled on the last page');
    await page.click(byId('trials-prev'));
    await waitPage(901, 950, 'page 19 after Previous');
    await page.click(byId('trials-first'));
    await waitPage(1, 50, 'page 1 after First');
    check(await page.isDisabled(byId('trials-prev')), 'Previous is enabled on the first page');
    await page.waitForSelector(byId(`curve-line-${first}`), {state: 'attached'});
    log('paging: Next, Last, Previous, First');
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
