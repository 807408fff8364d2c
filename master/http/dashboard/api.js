// The one way the dashboard talks to the master: every request goes through
// apiFetch, which adds `Authorization: Bearer <token>` (token from
// localStorage) and, on 401 UNAUTHENTICATED, shows the login form, posts
// POST /api/v1/auth/login {username, password} -> {token, ...}, stores the
// token and retries the request.
import {h} from './dom.js';

const TOKEN_KEY = 'det.token';
const USER_KEY = 'det.username';

export class ApiError extends Error {
  constructor(status, body, message) {
    super(message);
    this.status = status;
    this.body = body;
  }
}

export function getToken() {
  try {
    return localStorage.getItem(TOKEN_KEY);
  } catch {
    return null;
  }
}

export function getUsername() {
  try {
    return localStorage.getItem(USER_KEY);
  } catch {
    return null;
  }
}

export function setToken(token, username) {
  try {
    if (token) localStorage.setItem(TOKEN_KEY, token);
    else localStorage.removeItem(TOKEN_KEY);
    if (username) localStorage.setItem(USER_KEY, username);
    else if (!token) localStorage.removeItem(USER_KEY);
  } catch {
    // localStorage unavailable (private mode): the token lives for this page only.
  }
  authListeners.forEach((f) => f(token));
}

const authListeners = [];
export function onAuthChange(f) {
  authListeners.push(f);
}

async function parseBody(res) {
  const text = await res.text();
  if (!text) return {};
  try {
    return JSON.parse(text);
  } catch {
    return {message: text};
  }
}

// Returns the parsed JSON body; throws ApiError for non-2xx answers (message:
// the master's {"message": ...}) and TypeError for network failures.
export async function apiFetch(path, {method = 'GET', body, signal} = {}) {
  for (;;) {
    const headers = {Accept: 'application/json'};
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    const token = getToken();
    if (token) headers.Authorization = `Bearer ${token}`;
    const res = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      signal,
      cache: 'no-store',
    });
    const data = await parseBody(res);
    if (res.status === 401) {
      if (token && getToken() === token) setToken(null);
      await requireLogin(data.message || 'Please log in.');
      continue;  // retry with the new token
    }
    if (!res.ok) throw new ApiError(res.status, data, data.message || `${res.status} ${res.statusText}`);
    return data;
  }
}

export const apiGet = (path, opts) => apiFetch(path, opts);
export const apiPost = (path, body = {}) => apiFetch(path, {method: 'POST', body});

// ---- login ----------------------------------------------------------------

let loginPromise = null;

// Shows the login form (once, however many requests are waiting) and
// resolves when a token was obtained.
export function requireLogin(reason) {
  if (!loginPromise) {
    loginPromise = showLoginForm(reason).finally(() => {
      loginPromise = null;
    });
  }
  return loginPromise;
}

function showLoginForm(reason) {
  return new Promise((resolve) => {
    const error = h('div', {class: 'login-error', 'data-testid': 'login-error', role: 'alert'});
    const user = h('input', {
      id: 'login-username', name: 'username', autocomplete: 'username', required: true,
      'data-testid': 'login-username', value: getUsername() || '',
    });
    const pass = h('input', {
      id: 'login-password', name: 'password', type: 'password', autocomplete: 'current-password',
      'data-testid': 'login-password',
    });
    const submit = h('button', {type: 'submit', class: 'primary', 'data-testid': 'login-submit', text: 'Log in'});
    const form = h('form', {class: 'login-form', id: 'login-form', 'data-testid': 'login-form'},
      h('h2', {text: 'Log in to det-master'}),
      h('p', {class: 'muted', text: reason}),
      h('label', {for: 'login-username', text: 'Username'}), user,
      h('label', {for: 'login-password', text: 'Password'}), pass,
      error, submit);
    const overlay = h('div', {class: 'overlay', 'data-testid': 'login-overlay'}, form);
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      submit.disabled = true;
      error.textContent = '';
      try {
        const res = await fetch('/api/v1/auth/login', {
          method: 'POST',
          headers: {'Content-Type': 'application/json', Accept: 'application/json'},
          body: JSON.stringify({username: user.value, password: pass.value}),
          cache: 'no-store',
        });
        const data = await parseBody(res);
        if (!res.ok || !data.token) throw new Error(data.message || `login failed (${res.status})`);
        setToken(data.token, user.value);
        overlay.remove();
        resolve(data.token);
      } catch (e) {
        error.textContent = e.message;
        submit.disabled = false;
        pass.select();
      }
    });
    document.body.append(overlay);
    (user.value ? pass : user).focus();
  });
}

// Forgets the token (and tells the master, best effort).
export async function logout() {
  const token = getToken();
  if (token) {
    try {
      await fetch('/api/v1/auth/logout', {method: 'POST', headers: {Authorization: `Bearer ${token}`}});
    } catch {
      // the token is dropped locally anyway
    }
  }
  setToken(null);
}
