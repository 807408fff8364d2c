// A tiny static server for the dashboard (master/http/dashboard) at the same
// URL paths det-master serves it, proxying /api/* to a master's REST port.
// For development and for the browser test until det-master serves "/".
//
//   node tests/browser/serve.mjs --master 127.0.0.1:8080 [--port 8081] [--host 127.0.0.1]
//
// Routes (same as det-master, see master/http/dashboard/README.md):
//   GET /, /index.html, /dashboard, /dashboard/     -> index.html
//   GET /dashboard/<file>                            -> master/http/dashboard/<file>
//   *   /api/...                                     -> http://<master>/api/...
import http from 'node:http';
import fs from 'node:fs/promises';
import path from 'node:path';
import {fileURLToPath} from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
export const DASHBOARD_DIR = path.resolve(here, '../../master/http/dashboard');

export const CONTENT_TYPES = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.json': 'application/json',
  '.md': 'text/markdown; charset=utf-8',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
};

function send(res, status, type, body) {
  res.writeHead(status, {'Content-Type': type, 'Cache-Control': 'no-cache', 'Content-Length': Buffer.byteLength(body)});
  res.end(body);
}

async function serveFile(res, file, method) {
  try {
    const body = await fs.readFile(file);
    const type = CONTENT_TYPES[path.extname(file)] || 'application/octet-stream';
    res.writeHead(200, {'Content-Type': type, 'Cache-Control': 'no-cache', 'Content-Length': body.length});
    res.end(method === 'HEAD' ? undefined : body);
  } catch {
    send(res, 404, 'application/json', JSON.stringify({code: 5, error: 'NOT_FOUND', message: 'no such file'}));
  }
}

function proxy(req, res, master) {
  const [host, port] = master.split(':');
  const up = http.request({host, port: Number(port), method: req.method, path: req.url, headers: req.headers},
    (ur) => {
      res.writeHead(ur.statusCode, ur.headers);
      ur.pipe(res);
    });
  up.on('error', (e) => {
    send(res, 502, 'application/json', JSON.stringify({code: 14, error: 'UNAVAILABLE', message: `proxy: ${e.message}`}));
  });
  req.pipe(up);
}

// Starts the server; resolves to {server, port, url}.
export function startServer({master, port = 0, host = '127.0.0.1', dashboardDir = DASHBOARD_DIR}) {
  const server = http.createServer((req, res) => {
    const url = new URL(req.url, 'http://x');
    const p = decodeURIComponent(url.pathname);
    if (p.startsWith('/api/')) return proxy(req, res, master);
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      return send(res, 405, 'application/json', JSON.stringify({code: 12, error: 'UNIMPLEMENTED', message: 'GET only'}));
    }
    if (p === '/' || p === '/index.html' || p === '/dashboard' || p === '/dashboard/') {
      return serveFile(res, path.join(dashboardDir, 'index.html'), req.method);
    }
    const m = p.match(/^\/dashboard\/([A-Za-z0-9_.-]+)$/);
    if (m && !m[1].startsWith('.')) return serveFile(res, path.join(dashboardDir, m[1]), req.method);
    return send(res, 404, 'application/json', JSON.stringify({code: 5, error: 'NOT_FOUND', message: `no route ${p}`}));
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      const actual = server.address().port;
      resolve({server, port: actual, url: `http://${host}:${actual}`});
    });
  });
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const args = process.argv.slice(2);
  const opt = (name, def) => {
    const i = args.indexOf(`--${name}`);
    return i >= 0 && i + 1 < args.length ? args[i + 1] : def;
  };
  const master = opt('master', process.env.DET_MASTER_HTTP || '127.0.0.1:8080');
  const {url} = await startServer({master, port: Number(opt('port', '8081')), host: opt('host', '127.0.0.1')});
  console.log(`dashboard: ${url}/  (API proxied to http://${master})`);
}
