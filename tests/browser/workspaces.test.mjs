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
const log = (...a) => console.log(`[workspaces-test +${((Date.now() - started) / 1000).toFixed(1)}s]`, ...a);

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

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'det-workspaces-test-'));
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
const cli = (...args) => run([bin('det-cli'), '-m', grpc, ...args]);

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
async function createExperiment(name, placement) {
  const cfg = path.join(tmp, `${name}.yaml`);
  fs.writeFileSync(cfg, yaml(name, placement));
  const out = await cli('experiment', 'create', cfg, trialSo, '--paused');
  const m = out.match(/Created experiment (\d+)/);
  check(m, `det-cli experiment create printed no experiment id: ${out}`);
  return m[1];
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
  const placed = await createExperiment('placed', 'workspace: team-a\nproject: vision\n');
  const loose = await createExperiment('loose', '');
  const inProject = ((await api(`/api/v1/experiments?project_id=${projectId}`)).experiments || []).map((e) => String(e.id));
  check(JSON.stringify(inProject) === JSON.stringify([placed]), `API: project ${projectId} holds ${inProject}`);

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
    for (const d of ['master']) fs.rmSync(path.join(tmp, d), {recursive: true, force: true});
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
