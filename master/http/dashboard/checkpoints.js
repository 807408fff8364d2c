// Checkpoint downloads from the dashboard: GET
// /api/v1/checkpoints/<uuid>/download answers a tar, but needs the bearer
// token, which a plain <a href> cannot send: the tar is fetched with the
// header and handed to the browser as a blob download named <uuid>.tar.
import {getToken, requireLogin} from './api.js';
import {h, setText, num} from './dom.js';

// A checkpoint's size in bytes as shown: its size_bytes, or, when that is
// missing or 0, the sum of its resources' sizes (0 when it has none).
export function checkpointSize(c) {
  const size = num(c.size_bytes);
  return size > 0 ? size : Object.values(c.resources || {}).reduce((a, b) => a + num(b), 0);
}

export async function downloadCheckpoint(uuid) {
  for (;;) {
    const token = getToken();
    const res = await fetch(`/api/v1/checkpoints/${encodeURIComponent(uuid)}/download`, {
      headers: token ? {Authorization: `Bearer ${token}`} : {},
      cache: 'no-store',
    });
    if (res.status === 401) {
      await requireLogin('Please log in to download checkpoints.');
      continue;
    }
    if (!res.ok) {
      let message = `${res.status} ${res.statusText}`;
      try {
        message = (await res.json()).message || message;
      } catch {
        // not JSON
      }
      throw new Error(message);
    }
    const url = URL.createObjectURL(await res.blob());
    const a = h('a', {href: url, download: `${uuid}.tar`, hidden: true});
    document.body.appendChild(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 60000);
    return;
  }
}

// Fills a checkpoint row's UUID cell: the uuid and, for a COMPLETED
// checkpoint, a download button (errors shown in its title).
export function renderCheckpointUuid(td, c) {
  if (!td.firstChild || td.dataset.uuid !== c.uuid) {
    td.replaceChildren(h('span', {text: c.uuid}), ' ',
      h('button', {type: 'button', class: 'small', 'data-testid': `checkpoint-download-${c.uuid}`, text: 'Download',
        onclick: (ev) => {
          const b = ev.currentTarget;
          b.disabled = true;
          downloadCheckpoint(c.uuid)
            .then(() => setText(b, 'Download'), (err) => {
              setText(b, 'Download failed');
              b.title = err.message;
            })
            .finally(() => { b.disabled = false; });
        }}));
    td.dataset.uuid = c.uuid;
  }
  td.lastChild.hidden = c.state !== 'CHECKPOINT_STATE_COMPLETED';
}

// A link to the checkpoint download route (GET
// /api/v1/checkpoints/<uuid>/download, a tar). A click fetches it with the
// bearer token (downloadCheckpoint); the href is the route itself, for
// copying. Errors show in the link's title.
export function checkpointDownloadLink(uuid, testid) {
  const a = h('a', {href: `/api/v1/checkpoints/${encodeURIComponent(uuid)}/download`, 'data-testid': testid,
    text: 'Download', download: `${uuid}.tar`,
    onclick: (ev) => {
      ev.preventDefault();
      setText(a, 'Downloading…');
      downloadCheckpoint(uuid).then(() => {
        setText(a, 'Download');
        a.title = '';
      }, (err) => {
        setText(a, 'Download failed');
        a.title = err.message;
      });
    }});
  return a;
}
