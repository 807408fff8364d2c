// Small DOM helpers shared by the dashboard's views: element creation, in-place
// updates (only touching what changed, so polling never flickers) and value
// formatting.

// h('div', {class: 'x', 'data-testid': 'y', onclick: f}, child, 'text', ...)
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  if (attrs) {
    for (const [k, v] of Object.entries(attrs)) {
      if (v === undefined || v === null || v === false) continue;
      if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
      else if (k === 'class') el.className = v;
      else if (k === 'text') el.textContent = v;
      else if (k in el && typeof v !== 'string') el[k] = v;
      else el.setAttribute(k, v === true ? '' : String(v));
    }
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

export function setText(el, text) {
  const t = text === undefined || text === null ? '' : String(text);
  if (el.textContent !== t) el.textContent = t;
}

// Sets (or, for null/undefined/false, removes) an attribute when it differs.
export function setAttr(el, name, value) {
  if (value === undefined || value === null || value === false) {
    if (el.hasAttribute(name)) el.removeAttribute(name);
    return;
  }
  const v = value === true ? '' : String(value);
  if (el.getAttribute(name) !== v) el.setAttribute(name, v);
}

export function setHidden(el, hidden) {
  if (el.hidden !== !!hidden) el.hidden = !!hidden;
}

// Replaces el's children only when `key` differs from the last call's.
export function setChildrenKeyed(el, key, build) {
  if (el.__key === key) return;
  el.__key = key;
  el.replaceChildren(...[].concat(build()));
}

// Reconciles the children of `parent` (e.g. a <tbody>) with `items`: rows are
// keyed by keyOf(item); existing rows are updated in place, new ones created,
// missing ones removed, and the order made to match `items`.
export function syncRows(parent, items, keyOf, create, update) {
  const existing = new Map();
  for (const child of Array.from(parent.children)) {
    if (child.dataset.key !== undefined) existing.set(child.dataset.key, child);
    else child.remove();
  }
  const keep = new Set();
  let prev = null;
  for (const item of items) {
    const key = String(keyOf(item));
    let row = existing.get(key);
    if (!row) {
      row = create(item);
      row.dataset.key = key;
    }
    update(row, item);
    keep.add(key);
    const want = prev ? prev.nextSibling : parent.firstChild;
    if (want !== row) parent.insertBefore(row, want);
    prev = row;
  }
  for (const [key, row] of existing) if (!keep.has(key)) row.remove();
}

// A <tbody> message row ("No trials yet") shown when a table is empty.
export function emptyRow(colspan, text) {
  const tr = h('tr', {class: 'empty'}, h('td', {colspan, text}));
  tr.dataset.key = '__empty__';
  return tr;
}

// Shows a message row in an empty table body (syncRows removes it again).
export function syncEmpty(tbody, count, colspan, text) {
  if (count === 0 && !tbody.querySelector('tr.empty')) tbody.append(emptyRow(colspan, text));
}

// ---- values ---------------------------------------------------------------

// Protobuf JSON numbers: int64 fields are strings, non-finite doubles are
// "NaN" / "Infinity" / "-Infinity".
export function num(v) {
  if (typeof v === 'number') return v;
  if (v === undefined || v === null || v === '') return NaN;
  return Number(v);
}

export function enumLabel(v, prefix) {
  if (!v) return '–';
  return String(v).startsWith(prefix) ? String(v).slice(prefix.length) : String(v);
}

export const stateLabel = (s) => enumLabel(s, 'STATE_');

export const TERMINAL = new Set(['STATE_COMPLETED', 'STATE_CANCELED', 'STATE_ERROR', 'STATE_DELETING']);
export const isTerminal = (state) => TERMINAL.has(state);

export function fmtMetric(v) {
  const x = num(v);
  if (v === undefined || v === null) return '–';
  if (!Number.isFinite(x)) return String(x);
  if (x === 0) return '0';
  const a = Math.abs(x);
  if (a >= 1e5 || a < 1e-3) return x.toExponential(3);
  return String(Number(x.toPrecision(5)));
}

export function fmtValue(v) {
  if (v === undefined || v === null) return '–';
  if (typeof v === 'number') return fmtMetric(v);
  if (typeof v === 'object') return JSON.stringify(v);
  return String(v);
}

const pad = (n) => String(n).padStart(2, '0');

export function fmtTime(iso) {
  if (!iso) return '–';
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return String(iso);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
         `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

export function fmtDuration(startIso, endIso) {
  if (!startIso) return '–';
  const start = new Date(startIso).getTime();
  const end = endIso ? new Date(endIso).getTime() : Date.now();
  let s = Math.max(0, Math.round((end - start) / 1000));
  const hh = Math.floor(s / 3600);
  s -= hh * 3600;
  const mm = Math.floor(s / 60);
  s -= mm * 60;
  if (hh) return `${hh}h ${mm}m`;
  if (mm) return `${mm}m ${s}s`;
  return `${s}s`;
}

export function fmtBytes(n) {
  const x = num(n);
  if (!Number.isFinite(x)) return '–';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  let v = x;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return i === 0 ? `${v} B` : `${v.toFixed(1)} ${units[i]}`;
}

// Flattens nested hyperparameters to dotted names: {opt: {lr: 1}} -> {"opt.lr": 1}.
export function flatten(obj, prefix = '', out = {}) {
  for (const [k, v] of Object.entries(obj || {})) {
    const name = prefix ? `${prefix}.${k}` : k;
    if (v && typeof v === 'object' && !Array.isArray(v)) flatten(v, name, out);
    else out[name] = v;
  }
  return out;
}
