// Live metric curves: the trial and experiment pages keep their trials'
// metric reports up to date from GET /api/v1/trials/<id>/metrics/stream
// (StreamTrialMetrics as newline-delimited JSON, follow=true) instead of
// polling. Each stream resumes with after_id = the last next_after_id it
// read, so a reconnect neither misses nor repeats a report. The master
// allows 16 streams per user: trials beyond kMaxStreams are fetched once per
// refresh as before. Both start from the master's downsampled reports
// (GetTrialMetrics: at most `chartPoints` points per series, 1,000 by
// default), so a trial with millions of reports costs the page a few
// thousand points; a stream then adds only the reports after them.
import {apiGet, getToken} from './api.js';

// Each open stream holds one of the browser's 6 HTTP/1.1 connections to the
// master: with more, the page's other requests wait behind them forever.
const kMaxStreams = 4;
const kRetryMs = 2000;

function isTerminalState(state) {
  return ['STATE_COMPLETED', 'STATE_CANCELED', 'STATE_ERROR'].includes(state);
}

// Reads NDJSON lines from a fetch() response body, calling onMessage(obj)
// for each; resolves at the end of the body.
async function readNdjson(res, onMessage) {
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buffered = '';
  for (;;) {
    const {value, done} = await reader.read();
    if (done) break;
    buffered += decoder.decode(value, {stream: true});
    let nl;
    while ((nl = buffered.indexOf('\n')) >= 0) {
      const line = buffered.slice(0, nl).trim();
      buffered = buffered.slice(nl + 1);
      if (line) onMessage(JSON.parse(line));
    }
  }
  if (buffered.trim()) onMessage(JSON.parse(buffered));
}

// One trial's reports by group, fed by its stream.
class TrialStream {
  constructor(trialId, chartPoints) {
    this.trialId = trialId;
    this.chartPoints = chartPoints;
    this.reports = new Map();  // group -> [MetricsReport]
    this.afterId = 0;
    this.ended = false;
    this.abort = new AbortController();
  }
  add(message) {
    if (message.error) throw new Error(message.error.message || 'stream error');
    for (const r of message.metrics || []) {
      const g = r.group || '';
      if (!this.reports.has(g)) this.reports.set(g, []);
      this.reports.get(g).push(r);
    }
    if (message.next_after_id) this.afterId = Number(message.next_after_id);
  }
  // The downsampled history; the stream resumes after its newest report.
  async loadHistory() {
    const q = this.chartPoints ? `?limit=${this.chartPoints}` : '';
    const r = await apiGet(`/api/v1/trials/${this.trialId}/metrics${q}`);
    this.add({metrics: r.metrics || []});
    for (const m of r.metrics || []) this.afterId = Math.max(this.afterId, Number(m.id) || 0);
  }
  async run() {
    while (!this.abort.signal.aborted) {
      try {
        if (this.afterId === 0) await this.loadHistory();
        const headers = {Accept: 'application/x-ndjson'};
        const token = getToken();
        if (token) headers.Authorization = `Bearer ${token}`;
        const res = await fetch(
          `/api/v1/trials/${this.trialId}/metrics/stream?follow=true&after_id=${this.afterId}`,
          {headers, signal: this.abort.signal, cache: 'no-store'});
        if (!res.ok) throw new Error(`HTTP ${res.status}`);
        await readNdjson(res, (m) => this.add(m));
        this.ended = true;  // the stream ends when the trial has ended
        return;
      } catch (e) {
        if (this.abort.signal.aborted) return;
        await new Promise((resolve) => setTimeout(resolve, kRetryMs));
      }
    }
  }
  stop() {
    this.abort.abort();
  }
}

// Same interface as the polling cache it replaces: load(trials, groups)
// before a render, get(trialId, group) during it.
export class MetricsStreamCache {
  // options.chartPoints: points per series asked of the master (0: its default).
  constructor(options = {}) {
    this.chartPoints = options.chartPoints || 0;
    this.streams = new Map();  // trialId -> TrialStream
    this.fetched = new Map();  // `${trialId}:${group}` -> {reports, final}
  }
  async load(trials, groups) {
    const jobs = [];
    for (const t of trials) {
      if (this.streams.has(t.id)) continue;
      if (this.streams.size < kMaxStreams && !isTerminalState(t.state)) {
        const s = new TrialStream(t.id, this.chartPoints);
        this.streams.set(t.id, s);
        s.run();
        continue;
      }
      for (const g of groups) {
        const key = `${t.id}:${g}`;
        const e = this.fetched.get(key);
        if (e && e.final) continue;
        const final = isTerminalState(t.state);
        const limit = this.chartPoints ? `&limit=${this.chartPoints}` : '';
        jobs.push(apiGet(`/api/v1/trials/${t.id}/metrics?group=${encodeURIComponent(g)}${limit}`)
          .then((r) => this.fetched.set(key, {reports: r.metrics || [], final})));
      }
    }
    await Promise.all(jobs);
  }
  get(trialId, group) {
    const s = this.streams.get(trialId);
    if (s) return s.reports.get(group) || [];
    const e = this.fetched.get(`${trialId}:${group}`);
    return e ? e.reports : [];
  }
  // Ends every stream (the page is left).
  close() {
    for (const s of this.streams.values()) s.stop();
    this.streams.clear();
  }
}
