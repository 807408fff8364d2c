// Shared harness of the dashboard browser tests (tests/browser/*.test.mjs).
//
// Each test is one Node process: it starts its own det-master (and det-agent)
// in a fresh temp dir, drives the dashboard that det-master serves in real
// headless Chromium through playwright-core, and exits 0 (pass), 1 (fail) or
// 77 (skipped: no Chromium, or playwright-core not installed). This module
// holds what every test needs for that; a test keeps only its own scenario:
//
//   import {setup, startMaster, startAgent, api, check, byId, withDashboardPage,
//     runTest} from './harness.mjs';
//   const tmp = await setup({name: 'queue'});   // skips or fails right here
//   async function main() {
//     await startMaster();
//     await startAgent();
//     ... api(), createExperiment(), waitFor(), check() ...
//     await withDashboardPage(900, async ({page, pageErrors}) => { ... });
//   }
//   await runTest(main);                         // exits the process
//
// Contract: setup() comes first; startMaster() before anything that talks to
// the master (api, post, cli, createExperiment, startAgent, withDashboardPage).
// A check fails the test by throwing TestFailure (its message is printed
// alone); any other error is printed with its stack. The state (temp dir,
// child processes, master address, API token) is this process's: one test
// per process.
//
// Env: DET_BUILD_DIR (default <repo>/build), DET_CHROMIUM (default
// /usr/bin/chromium), DET_KEEP_TMP=1 (keep the master's and agent's data dirs
// after a pass; the temp dir with the logs is always kept),
// DET_TEST_NO_CHROMIUM=1 (act as if Chromium were missing: the test skips,
// which deploy/test-report.py then counts; see CONTRIBUTING.md, "Tests").
import {spawn, execFile} from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {fileURLToPath} from 'node:url';

const SKIP = 77;
const started = Date.now();
const here = path.dirname(fileURLToPath(import.meta.url));
export const sourceDir = path.resolve(here, '../..');
const buildDir = path.resolve(process.env.DET_BUILD_DIR || path.join(sourceDir, 'build'));
const chromiumPath = process.env.DET_CHROMIUM || '/usr/bin/chromium';
const bin = (name) => path.join(buildDir, 'bin', name);
const trialSo = path.join(buildDir, 'trials', 'synthetic_trial.so');

// Set by setup().
const opts = {name: 'browser', verbose: false, retryErrors: false};
let tmp = '';
let chromium = null;
// Set by startMaster(); the token by the first API call.
let grpc = '';
let httpBase = '';
let token = '';
const dataDirs = [];
const children = [];

// Prints with the test's prefix and the time since start: `[queue-test +1.2s] ...`.
export function log(...a) {
  console.log(`[${opts.name}-test +${((Date.now() - started) / 1000).toFixed(1)}s]`, ...a);
}

// Checks the test can run and prepares it; returns the temp dir
// (det-<name>-test-XXXXXX, where logs and screenshots go). Exits 77 after a
// `SKIP: reason` line without Chromium (or with DET_TEST_NO_CHROMIUM=1) or
// playwright-core, 1 when a binary or the trial is not built.
// Options: name (log prefix and temp dir), verbose (the fuller messages of
// the dashboard test: how to get Chromium, the login's status and body, a
// line when a child needs SIGKILL), retryErrors (waitFor() retries errors
// that fn throws, other than TestFailure, until its deadline).
export async function setup({name, verbose = false, retryErrors = false}) {
  Object.assign(opts, {name, verbose, retryErrors});
  if (process.env.DET_TEST_NO_CHROMIUM === '1') {
    console.log(`SKIP: Chromium hidden by DET_TEST_NO_CHROMIUM=1 (unset it to run the browser tests)`);
    process.exit(SKIP);
  }
  if (!fs.existsSync(chromiumPath)) {
    const hint = verbose ? ' (apt-get install chromium, or set DET_CHROMIUM)' : '';
    console.log(`SKIP: no Chromium at ${chromiumPath}${hint}`);
    process.exit(SKIP);
  }
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
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), `det-${name}-test-`));
  // det-cli logs in as `determined` by itself; keep its token file here.
  process.env.DET_AUTH_FILE = path.join(tmp, 'det-auth.json');
  return tmp;
}

// ---- checks and polling ---------------------------------------------------

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export class TestFailure extends Error {}
export function check(cond, message) {
  if (!cond) throw new TestFailure(message);
}

// Polls fn() until it returns a truthy value (returned) or the deadline
// passes (TestFailure). An error fn throws ends the wait, unless setup() was
// given retryErrors: then only a TestFailure does, and the timeout names the
// last error.
export async function waitFor(what, fn, timeoutMs, intervalMs = 100) {
  const end = Date.now() + timeoutMs;
  let last = null;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v;
      last = null;
    } catch (e) {
      if (e instanceof TestFailure || !opts.retryErrors) throw e;
      last = e;
    }
    if (Date.now() > end) {
      throw new TestFailure(`timed out after ${timeoutMs} ms waiting for ${what}${last ? ` (${last.message})` : ''}`);
    }
    await sleep(intervalMs);
  }
}

// ---- child processes ------------------------------------------------------

// Starts argv with stdout and stderr in <tmp>/<name>.log; stopped by
// runTest() (and SIGKILLed if the process exits otherwise).
function startProcess(name, argv) {
  const out = fs.openSync(path.join(tmp, `${name}.log`), 'w');
  const p = spawn(argv[0], argv.slice(1), {stdio: ['ignore', out, out]});
  fs.closeSync(out);
  p.exited = new Promise((resolve) => p.on('exit', (code, sig) => resolve(sig || code)));
  children.push({name, p});
  return p;
}

// SIGTERM to each child still running, the last started first; SIGKILL
// after 15 s.
async function stopProcesses() {
  for (const {name, p} of children.slice().reverse()) {
    if (p.exitCode !== null || p.signalCode !== null) continue;
    p.kill('SIGTERM');
    const r = await Promise.race([p.exited, sleep(15000).then(() => 'timeout')]);
    if (r === 'timeout') {
      if (opts.verbose) log(`${name} did not exit on SIGTERM; SIGKILL`);
      p.kill('SIGKILL');
      await p.exited;
    }
  }
}
process.on('exit', () => {
  for (const {p} of children) if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL');
});

// Runs argv to its end (at most timeoutMs); resolves to its stdout, rejects
// with its output when it fails.
function run(argv, timeoutMs = 120000) {
  return new Promise((resolve, reject) => {
    execFile(argv[0], argv.slice(1), {timeout: timeoutMs}, (err, stdout, stderr) => {
      if (err) reject(new Error(`${argv.join(' ')} failed: ${err.message}\n${stdout}\n${stderr}`));
      else resolve(stdout);
    });
  });
}

// ---- the cluster ----------------------------------------------------------

// Starts det-master (data in <tmp>/master, gRPC and HTTP on free ports) and
// waits for its ports file; returns {grpc: 'host:port', httpBase: 'http://host:port'}.
export async function startMaster() {
  const portsFile = path.join(tmp, 'ports.json');
  startProcess('master', [bin('det-master'), '--data-dir', path.join(tmp, 'master'), '--grpc-port', '0',
    '--http-port', '0', '--ports-file', portsFile]);
  dataDirs.push('master');
  const ports = await waitFor('the master ports file', () => {
    const text = fs.existsSync(portsFile) ? fs.readFileSync(portsFile, 'utf8') : '';
    return text.trim() ? JSON.parse(text) : null;
  }, 30000);
  grpc = `127.0.0.1:${ports.grpc}`;
  httpBase = `http://127.0.0.1:${ports.http}`;
  return {grpc, httpBase};
}

// Starts det-agent `a` with one slot (work dir <tmp>/agent) and waits until
// the master lists it connected.
export async function startAgent() {
  startProcess('agent', [bin('det-agent'), '--master', grpc, '--id', 'a', '--slots', '1', '--work-dir',
    path.join(tmp, 'agent')]);
  dataDirs.push('agent');
  await waitFor('agent a to connect', async () => {
    const r = await api('/api/v1/agents');
    return (r.agents || []).some((a) => a.id === 'a' && a.connected);
  }, 30000);
}

// Runs det-cli against the master; resolves to its stdout.
export const cli = (...args) => run([bin('det-cli'), '-m', grpc, ...args]);

// Writes yaml to <tmp>/<name>.yaml, creates the experiment with det-cli (extra
// arguments after the trial, e.g. '--paused') and returns its id as a string.
export async function createExperiment(name, yaml, ...extra) {
  const cfg = path.join(tmp, `${name}.yaml`);
  fs.writeFileSync(cfg, yaml);
  const out = await cli('experiment', 'create', cfg, trialSo, ...extra);
  const m = out.match(/Created experiment (\d+)/);
  check(m, `det-cli experiment create printed no experiment id: ${out}`);
  return m[1];
}

// ---- REST -----------------------------------------------------------------

// Every API route needs a token: the first call logs in as `determined`
// (empty password, bootstrapped by the master); apiToken() returns it.
export async function apiToken() {
  if (token) return token;
  const res = await fetch(`${httpBase}/api/v1/auth/login`, {
    method: 'POST', headers: {'Content-Type': 'application/json'},
    body: JSON.stringify({username: 'determined', password: ''}),
  });
  const body = await res.json();
  check(res.ok && body.token,
    opts.verbose ? `POST /api/v1/auth/login: ${res.status} ${JSON.stringify(body)}` : 'login as determined failed');
  token = body.token;
  return token;
}

// `method p` (no body) with the token; resolves to the JSON answer, throws
// unless 2xx.
export async function api(p, method = 'GET') {
  const auth = `Bearer ${await apiToken()}`;
  const res = await fetch(`${httpBase}${p}`, {method, headers: {Authorization: auth}});
  const body = await res.json();
  if (!res.ok) throw new Error(`${method} ${p}: ${res.status} ${JSON.stringify(body)}`);
  return body;
}

// POST p with the body {} and the token; throws unless 2xx.
export async function post(p) {
  const headers = {Authorization: `Bearer ${await apiToken()}`, 'Content-Type': 'application/json'};
  const res = await fetch(`${httpBase}${p}`, {method: 'POST', headers, body: '{}'});
  if (!res.ok) throw new Error(`POST ${p}: ${res.status} ${await res.text()}`);
}

// ---- the browser ----------------------------------------------------------

// The selector of the element with data-testid="id".
export const byId = (id) => `[data-testid="${id}"]`;

// Launches headless Chromium, opens a 1400 x viewportHeight page (default
// timeout 30 s) on the dashboard's experiment list, logs in there as
// `username` (default `determined`) with the empty password, then resolves to body({browser,
// page, pageErrors}). pageErrors collects the page's uncaught errors and
// console errors (but the API's 401s before the login and the browser's own
// favicon.ico 404s); the test checks it.
// The browser is closed afterwards, also when body throws.
export async function withDashboardPage(viewportHeight, body, {username = 'determined'} = {}) {
  const browser = await chromium.launch({
    executablePath: chromiumPath, headless: true, args: ['--no-sandbox', '--disable-dev-shm-usage'],
  });
  const pageErrors = [];
  try {
    const page = await browser.newPage({viewport: {width: 1400, height: viewportHeight}});
    page.setDefaultTimeout(30000);
    page.on('pageerror', (e) => pageErrors.push(`pageerror: ${e.message}`));
    // Until the login below, the API's 401s are expected (Chromium logs each
    // as "Failed to load resource"); afterwards every console error counts.
    let loggedIn = false;
    page.on('console', (m) => {
      if (m.type() !== 'error') return;
      if (!loggedIn && /status of 401/.test(m.text())) return;
      // Chromium's own favicon request for a page without an icon (the
      // master's JSON answers, viewed as a page) is not the dashboard's error.
      if (/status of 404/.test(m.text()) && /\/favicon\.ico$/.test(m.location().url || '')) return;
      pageErrors.push(`console: ${m.text()}`);
    });
    await page.goto(`${httpBase}/#/experiments`);
    await page.waitForSelector(byId('login-form'));
    await page.fill(byId('login-username'), username);
    await page.fill(byId('login-password'), '');
    await page.click(byId('login-submit'));
    await page.waitForSelector(byId('login-form'), {state: 'detached'});
    loggedIn = true;
    return await body({browser, page, pageErrors});
  } finally {
    await browser.close();
  }
}

// ---- the run --------------------------------------------------------------

// Runs main (240 s at most), stops the children and exits: 0 after
// `PASS in N s (<kept> in <tmp>)` (the master's and agent's data dirs removed
// unless DET_KEEP_TMP), else 1 after `FAIL: ...` and the tail of each
// child's log.
export async function runTest(main, {kept = 'screenshot'} = {}) {
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
      for (const d of dataDirs) fs.rmSync(path.join(tmp, d), {recursive: true, force: true});
    }
    log(`PASS in ${((Date.now() - started) / 1000).toFixed(1)} s (${kept} in ${tmp})`);
    process.exit(0);
  }
  printLogTails();
  process.exit(1);
}

function printLogTails() {
  for (const {name} of children) {
    const f = path.join(tmp, `${name}.log`);
    const tail = fs.existsSync(f) ? fs.readFileSync(f, 'utf8').split('\n').slice(-15).join('\n') : '';
    console.error(`--- ${name}.log (tail) ---\n${tail}`);
  }
  console.error(`logs in ${tmp}`);
}
